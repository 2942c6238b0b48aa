//! Checks of a checkpoint's external tensor ranges against the external data file.

use crate::{CheckpointIndex, Error, Result, Storage, TensorIndex};

/// Fails unless every external tensor of `index` lies inside a file of `file_len` bytes and no
/// two external tensors overlap.
pub fn check_external_ranges(index: &CheckpointIndex, file_len: u64) -> Result<()> {
    let momentums = index.optimizer_groups.iter().flat_map(|g| g.states.iter().flat_map(|s| &s.momentums));
    let mut ranges: Vec<(&str, u64, u64)> = index
        .trainable
        .iter()
        .chain(&index.frozen)
        .chain(momentums)
        .filter_map(|t: &TensorIndex| match t.storage {
            Storage::External { offset, len } => Some((t.name.as_str(), offset, len)),
            _ => None,
        })
        .collect();
    for &(tensor, offset, len) in &ranges {
        // The reader already checked offset + len fits in an i64.
        let end = offset.saturating_add(len);
        if end > file_len {
            return Err(Error::ExternalOutOfRange { tensor: tensor.to_owned(), offset, len, file_len });
        }
    }
    // Sorted by offset, a range overlaps an earlier one iff it starts before the furthest end seen
    // so far. Empty ranges claim no bytes and are skipped.
    ranges.retain(|&(_, _, len)| len > 0);
    ranges.sort_by_key(|&(_, offset, _)| offset);
    let mut furthest: Option<(&str, u64)> = None;
    for &(tensor, offset, len) in &ranges {
        let end = offset.saturating_add(len);
        if let Some((earlier, earlier_end)) = furthest {
            if offset < earlier_end {
                return Err(Error::ExternalOverlap { first: earlier.to_owned(), second: tensor.to_owned() });
            }
        }
        if furthest.is_none_or(|(_, e)| end > e) {
            furthest = Some((tensor, end));
        }
    }
    Ok(())
}
