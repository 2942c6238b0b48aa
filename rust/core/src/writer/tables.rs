//! The checkpoint's own tables: the root, the module state and every tensor table, then the data
//! tail (each inline tensor's `raw_data` after the metadata, its first byte on a
//! [`DATA_ALIGNMENT`] boundary).

use super::limits::{DATA_ALIGNMENT, MAX_FLATBUFFER_BYTES};
use super::meta::{len_u32, Field, Meta};
use super::pieces::Pieces;
use super::tensors::tensor_tables;
use super::{optimizer, properties};
use crate::placement::Place;
use crate::schema::{fbs, FILE_IDENTIFIER};
use crate::spec::{CheckpointSpec, TensorSpec};
use crate::{Error, Result};

/// Lays out the checkpoint file; `places` are the tensors in file order with their places.
pub(super) fn layout_checkpoint<'a>(
    spec: &CheckpointSpec<'a>,
    places: &[(&TensorSpec<'a>, Place)],
    has_external: bool,
    estimate: usize,
) -> Result<Pieces<'a>> {
    let mut m = Meta { buf: Vec::with_capacity(estimate), vtables: Vec::new(), raw: Vec::new() };
    // The bytes of the inline tensors with data, in the order of `m.raw`.
    let mut data: Vec<&'a [u8]> = Vec::new();

    m.buf.extend_from_slice(&[0; 4]); // root uoffset
    m.buf.extend_from_slice(FILE_IDENTIFIER);
    let has_groups = !spec.optimizer_groups.is_empty();
    let has_properties = !spec.properties.is_empty();
    let (root_table, root_refs) = m.table(&[
        Some(Field::I32(fbs::Checkpoint::VT_VERSION, spec.version)),
        Some(Field::Ref(fbs::Checkpoint::VT_MODULE_STATE)),
        has_groups.then_some(Field::Ref(fbs::Checkpoint::VT_OPTIMIZER_GROUPS)),
        has_properties.then_some(Field::Ref(fbs::Checkpoint::VT_PROPERTY_BAG)),
    ])?;
    m.patch(0, root_table)?;

    let (ms_table, ms) = m.table(&[
        Some(Field::Ref(fbs::ModuleState::VT_REQUIRES_GRAD_PARAMS)),
        Some(Field::Ref(fbs::ModuleState::VT_FROZEN_PARAMS)),
        // Version 1 has no nominal flag (validate refuses nominal v1 specs).
        (spec.is_nominal && spec.version >= 2)
            .then_some(Field::Bool(fbs::ModuleState::VT_IS_NOMINAL_STATE, true)),
        has_external.then_some(Field::Bool(fbs::ModuleState::VT_HAS_EXTERNAL_DATA, true)),
    ])?;
    m.patch(root_refs.at(fbs::Checkpoint::VT_MODULE_STATE), ms_table)?;
    let mut next = places.iter();
    let n_trainable = spec.trainable.len();
    let trainable_at = m.offset_vector(ms.at(fbs::ModuleState::VT_REQUIRES_GRAD_PARAMS), n_trainable)?;
    let frozen_at = m.offset_vector(ms.at(fbs::ModuleState::VT_FROZEN_PARAMS), spec.frozen.len())?;
    tensor_tables(&mut m, trainable_at, n_trainable, &mut next, &mut data)?;
    tensor_tables(&mut m, frozen_at, spec.frozen.len(), &mut next, &mut data)?;

    if has_groups {
        optimizer::optimizer_groups(
            &mut m,
            root_refs.at(fbs::Checkpoint::VT_OPTIMIZER_GROUPS),
            &spec.optimizer_groups,
            &mut next,
            &mut data,
        )?;
    }
    if has_properties {
        properties::property_bag(&mut m, root_refs.at(fbs::Checkpoint::VT_PROPERTY_BAG), &spec.properties)?;
    }
    if next.next().is_some() {
        return Err(Error::Internal { detail: "placement lists more tensors than the spec".into() });
    }
    tail(m, data)
}

/// Places every inline `raw_data` vector after the metadata and resolves the offsets to them.
fn tail<'a>(mut m: Meta, data: Vec<&'a [u8]>) -> Result<Pieces<'a>> {
    let mut cursor = m.pos() as u64;
    let mut prefixes = Vec::with_capacity(data.len());
    for bytes in &data {
        // The 4-byte length prefix ends where the data start, on a DATA_ALIGNMENT boundary.
        let start = (cursor + 4).next_multiple_of(DATA_ALIGNMENT as u64);
        prefixes.push(start - 4);
        cursor = start + bytes.len() as u64;
    }
    if cursor > MAX_FLATBUFFER_BYTES {
        return Err(Error::TooLarge { bytes: cursor });
    }
    let raw = std::mem::take(&mut m.raw);
    if raw.len() != prefixes.len() {
        return Err(Error::Internal { detail: "raw_data offsets and tensor data disagree".into() });
    }
    for (at, prefix) in raw.iter().zip(&prefixes) {
        m.patch(*at, *prefix as usize)?;
    }
    let mut pieces = Pieces::default();
    pieces.push_owned(&m.buf);
    for (bytes, prefix) in data.iter().zip(prefixes) {
        let pad = prefix - pieces.len();
        pieces.push_zeros(pad as usize);
        pieces.push_owned(&len_u32(bytes.len())?.to_le_bytes());
        pieces.push_borrowed(bytes);
    }
    Ok(pieces)
}
