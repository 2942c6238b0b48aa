//! Aggregation of device uploads (federated averaging) at memory speed: the structural check of
//! an upload's index against the reference's [`Layout`], the weight rule, and the kernel that
//! checks every value and adds `weight × value` into float64 sums (see [`kernel`]). Uploads are
//! read into private memory ([`read_file`]), never through a shared mapping.

mod columns;
mod distances;
mod kernel;
#[cfg(feature = "fs")] // reads upload files
mod round;
#[cfg(feature = "fs")] // reads upload files
mod rows;
mod select;
mod simd;
#[cfg(feature = "fs")] // reads upload files
mod stream;
mod structure;
#[cfg(feature = "fs")] // upload files; the rest works on bytes (the browser build too)
mod upload;
mod values;

pub use columns::{
    median_columns, reduce_block, reduce_stored_block, trimmed_mean_columns, Statistic, NETWORK_UP_TO,
};
pub use distances::add_pairwise;
pub use kernel::{accumulate, add_window, check_values, slot_bytes};
#[cfg(feature = "fs")]
pub use round::{add_files, check_files, FileItem, Screened, Verdict};
#[cfg(feature = "fs")]
pub use rows::{read_rows, reduce_rows, reduce_slots, RowSource, MIN_CHUNK_LANES};
pub use structure::{
    check_structure, py_repr, type_name, weight_of, weight_problem, ExpectedMomentum, ExpectedParam, Layout,
    Located, WeightRule, MAX_WEIGHT, MIN_WEIGHT,
};
#[cfg(feature = "fs")]
pub use upload::{index_upload, read_file, release_buffers, Buffer, FileUpload, HeldFiles, UploadError};
pub use values::{decode_into, f16_to_f64, f8_table, Lanes, F8};

/// Why an upload is not averaged: a short `kind` code (documented in docs/federated.md) and a
/// message naming the tensor and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// `missing-parameter`, `dtype`, `non-finite`, `overflow`, `too-large`, ...
    pub kind: &'static str,
    /// A sentence for users.
    pub message: String,
}

impl Rejection {
    /// A rejection of `kind`.
    pub fn new(kind: &'static str, message: impl Into<String>) -> Rejection {
        Rejection { kind, message: message.into() }
    }
}

/// Where an upload's averaged tensors are, their bytes, and its weight.
pub(crate) type LocatedData<'a> = (Vec<Located>, Vec<&'a [u8]>, f64);

/// The checks every way of adding an upload starts with: its structure against `layout`, the
/// bytes of each averaged tensor (`lanes` per slot: the layout's), and its weight.
pub(crate) fn located_data<'a>(
    layout: &Layout,
    index: &crate::CheckpointIndex,
    checkpoint: &'a [u8],
    external: Option<&'a [u8]>,
    lanes: &[usize],
    rule: &WeightRule,
) -> Result<LocatedData<'a>, Rejection> {
    let located = check_structure(index, layout)?;
    let data = slot_bytes(layout, &located, checkpoint, external, lanes)?;
    let weight = weight_of(index, rule)?;
    Ok((located, data, weight))
}

/// Checks one indexed upload against `layout` and adds it (weighted by `rule`) into `sums` and
/// `bounds` (see [`accumulate`]); returns the weight used. Nothing is added when it is rejected.
pub fn add_upload(
    layout: &Layout,
    index: &crate::CheckpointIndex,
    checkpoint: &[u8],
    external: Option<&[u8]>,
    rule: &WeightRule,
    sums: &mut [&mut [f64]],
    bounds: &mut [f64],
) -> Result<f64, Rejection> {
    let lanes: Vec<usize> = sums.iter().map(|s| s.len()).collect();
    if lanes != layout.slot_lanes() {
        return Err(Rejection::new(
            "internal",
            "the sums do not match the reference's layout (a bug in ortckpt)",
        ));
    }
    let (located, data, weight) = located_data(layout, index, checkpoint, external, &lanes, rule)?;
    accumulate(layout, &located, &data, weight, sums, bounds)?;
    Ok(weight)
}

/// [`add_upload`]'s checks without the addition ([`check_values`]): the weight, or `Ok(None)`
/// when the sums are needed to tell whether this upload overflows (nothing was changed).
pub fn check_upload(
    layout: &Layout,
    index: &crate::CheckpointIndex,
    checkpoint: &[u8],
    external: Option<&[u8]>,
    rule: &WeightRule,
    bounds: &mut [f64],
) -> Result<Option<f64>, Rejection> {
    let lanes = layout.slot_lanes();
    if bounds.len() != lanes.len() {
        return Err(Rejection::new(
            "internal",
            "the bounds do not match the reference's layout (a bug in ortckpt)",
        ));
    }
    let (located, data, weight) = located_data(layout, index, checkpoint, external, &lanes, rule)?;
    Ok(check_values(layout, &located, &data, weight, bounds)?.then_some(weight))
}
