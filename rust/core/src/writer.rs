//! Lays a checkpoint out as a flatbuffer, front to back, without building it in memory.
//!
//! The small metadata (root table, module state, tensor tables, names, dims, optimizer state,
//! properties) is emitted forward into one owned buffer: every parent before its children, so
//! every `uoffset` points forward as flatbuffers require. Each inline tensor's `raw_data` vector
//! comes after all of that, its first data byte on a [`DATA_ALIGNMENT`] boundary of the file;
//! its bytes are never copied: the file is described as a list of [`Pieces`] (owned runs of
//! metadata, length prefixes and padding, and borrowed slices of the caller's tensors) that
//! `save` streams to disk. See docs/format.md, "The layout ortckpt writes".
//!
//! Output is deterministic: parameters, optimizer groups, parameter states, momentums and
//! properties are sorted by name (ORT sorts the same lists when it saves). A scalar field is left
//! out exactly when its bits equal the schema default, so `-0.0` is kept.

//!
//! One job per module: [`pieces`] (the file as owned and borrowed runs), [`meta`] (the metadata
//! buffer: tables, vtables, strings, vectors), [`tables`] (the checkpoint and module state tables,
//! and the data tail), [`tensors`] (one table per tensor, the checkpoint's and the optimizer's),
//! [`optimizer`] and [`properties`] (their tables), [`estimate`] (the metadata buffer's initial
//! size), [`limits`] (the alignment and size the layout keeps to). Field positions come from the
//! generated code's `VT_*` constants (`schema.rs`), never from hand-written numbers.

mod estimate;
mod limits;
mod meta;
mod optimizer;
mod pieces;
mod properties;
mod tables;
mod tensors;

pub use limits::DATA_ALIGNMENT;
pub(crate) use pieces::Pieces;

use crate::placement::{plan, Place, SaveOptions};
use crate::spec::{tensors_in_file_order, validate, CheckpointSpec, TensorPayload, TensorSpec};
use crate::{Error, Result};

/// Both files of a save, laid out: the checkpoint, and the external data file (empty when the
/// plan put nothing there).
#[derive(Debug)]
pub(crate) struct FileLayout<'a> {
    pub checkpoint: Pieces<'a>,
    #[cfg_attr(not(feature = "fs"), allow(dead_code))] // used by the file layer only
    pub external: Pieces<'a>,
}

/// Validates `spec`, places its tensors for `options` and lays out both files.
pub(crate) fn plan_and_layout<'a>(
    spec: &CheckpointSpec<'a>,
    options: &SaveOptions,
) -> Result<FileLayout<'a>> {
    let tensors = tensors_in_file_order(spec);
    validate(spec, &tensors)?;
    let plan = plan(&tensors, spec.is_nominal, options);
    if spec.version < 2 && plan.has_external() {
        return Err(Error::InvalidSpec {
            detail: format!(
                "format version {} (ONNX Runtime 1.16-1.17) cannot hold external data, and these tensors \
                 exceed the external data threshold; write version 2, or raise the threshold if the \
                 data fit in 2 GiB",
                spec.version
            ),
        });
    }
    let mut external = Pieces::default();
    for ((_, t), place) in tensors.iter().zip(&plan.places) {
        if let (Place::External { offset }, TensorPayload::Bytes(bytes)) = (place, &t.data) {
            let pad = offset.checked_sub(external.len()).ok_or_else(|| Error::Internal {
                detail: format!("external offsets out of order at tensor {:?}", t.name),
            })?;
            external.push_zeros(pad as usize);
            external.push_borrowed(bytes);
        }
    }
    if external.len() != plan.external_len {
        return Err(Error::Internal { detail: "external data length disagrees with the placement".into() });
    }
    let places: Vec<(&TensorSpec<'a>, Place)> =
        tensors.iter().map(|(_, t)| *t).zip(plan.places.iter().copied()).collect();
    let estimate = estimate::metadata_bytes(spec, &tensors);
    let checkpoint = tables::layout_checkpoint(spec, &places, plan.has_external(), estimate)?;
    Ok(FileLayout { checkpoint, external })
}

/// Serializes `spec` to checkpoint bytes with every tensor inline.
pub fn serialize_checkpoint(spec: &CheckpointSpec<'_>) -> Result<Vec<u8>> {
    let layout =
        plan_and_layout(spec, &SaveOptions { external_data_threshold: None, external_momentums: false })?;
    Ok(layout.checkpoint.concat())
}
