//! The checks every way of adding an upload held in memory starts with ([`located_data`]).

use super::kernel::slot_bytes;
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
