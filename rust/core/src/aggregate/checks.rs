//! One upload held in memory, checked against the reference's layout and added: the checks every
//! way of adding an upload starts with ([`located_data`]), and the single-upload entry points.

use super::kernel::{accumulate, check_values, slot_bytes};
use super::rejection::Rejection;
use super::structure::{check_structure, weight_of, Layout, Located, WeightRule};

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
