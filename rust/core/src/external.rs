//! Checks of a checkpoint's external tensor ranges against the external data file.

use crate::{CheckpointIndex, Error, Result, Storage};

/// Fails unless every external tensor of `index` lies inside a file of `file_len` bytes and no
/// two external tensors overlap.
pub fn check_external_ranges(index: &CheckpointIndex, file_len: u64) -> Result<()> {
    // (position, offset, len): positions name the tensor in errors without copying names.
    let mut ranges: Vec<(usize, u64, u64)> = index
        .tensors()
        .enumerate()
        .filter_map(|(position, t)| match t.storage {
            Storage::External { offset, len } => Some((position, offset, len)),
            _ => None,
        })
        .collect();
    let name = |position: usize| index.tensor(position).map_or(String::new(), |t| t.name.to_owned());
    for &(position, offset, len) in &ranges {
        // The reader already checked offset + len fits in an i64.
        let end = offset.saturating_add(len);
        if end > file_len {
            return Err(Error::ExternalOutOfRange { tensor: name(position), offset, len, file_len });
        }
    }
    // Sorted by offset, a range overlaps an earlier one iff it starts before the furthest end seen
    // so far. Empty ranges claim no bytes and are skipped.
    ranges.retain(|&(_, _, len)| len > 0);
    ranges.sort_by_key(|&(_, offset, _)| offset);
    let mut furthest: Option<(usize, u64)> = None;
    for &(position, offset, len) in &ranges {
        let end = offset.saturating_add(len);
        if let Some((earlier, earlier_end)) = furthest {
            if offset < earlier_end {
                return Err(Error::ExternalOverlap { first: name(earlier), second: name(position) });
            }
        }
        if furthest.is_none_or(|(_, e)| end > e) {
            furthest = Some((position, end));
        }
    }
    Ok(())
}
