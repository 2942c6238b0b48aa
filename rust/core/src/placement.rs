//! Which tensors go to the external data file, and where.
//!
//! ORT's rule (docs/format.md §7): when the checkpoint's tensor data exceed the threshold, every
//! non-string tensor of at least 64 bytes goes external; smaller ones and strings stay inline.
//! ortckpt applies it to momentums too (ORT reads them through the same path), so a checkpoint
//! with large optimizer state also fits. Offsets are assigned in file order, each aligned to
//! [`EXTERNAL_ALIGNMENT`] so the external file can be memory-mapped with aligned views.

use std::collections::HashMap;

use crate::writer::{tensors_in_file_order, CheckpointSpec, TensorPayload, TensorSpec};

/// ORT keeps tensors smaller than this inline even in external mode.
pub const MIN_EXTERNAL_BYTES: usize = 64;

/// Alignment of each tensor's first byte in the external data file (ORT uses 4 or 8; any value
/// reads back in ORT, and 16 suits every element type).
pub const EXTERNAL_ALIGNMENT: u64 = 16;

/// Tensor bytes to write to the external file at `offset`.
pub(crate) struct ExternalChunk<'a> {
    pub offset: u64,
    pub bytes: &'a [u8],
}

/// External offsets keyed by the address of each `TensorSpec`, which is stable while the spec is
/// borrowed for one save.
pub(crate) struct Placement {
    offsets: HashMap<usize, u64>,
}

fn key(t: &TensorSpec<'_>) -> usize {
    t as *const TensorSpec<'_> as usize
}

impl Placement {
    pub(crate) fn all_inline() -> Placement {
        Placement { offsets: HashMap::new() }
    }

    /// Places tensors for a save with `threshold` (`None`: never external).
    pub(crate) fn plan<'a>(
        spec: &CheckpointSpec<'a>,
        threshold: Option<u64>,
    ) -> (Placement, Vec<ExternalChunk<'a>>) {
        let tensors = tensors_in_file_order(spec);
        let total: u64 = tensors
            .iter()
            .map(|t| match t.data {
                TensorPayload::Bytes(b) => b.len() as u64,
                _ => 0,
            })
            .fold(0, u64::saturating_add);
        let external = !spec.is_nominal && threshold.is_some_and(|t| total > t);
        let mut placement = Placement::all_inline();
        let mut chunks = Vec::new();
        if !external {
            return (placement, chunks);
        }
        let mut cursor: u64 = 0;
        for t in tensors {
            if let TensorPayload::Bytes(bytes) = t.data {
                if bytes.len() >= MIN_EXTERNAL_BYTES {
                    let offset = cursor.next_multiple_of(EXTERNAL_ALIGNMENT);
                    cursor = offset.saturating_add(bytes.len() as u64);
                    placement.offsets.insert(key(t), offset);
                    chunks.push(ExternalChunk { offset, bytes });
                }
            }
        }
        (placement, chunks)
    }

    pub(crate) fn offset_of(&self, t: &TensorSpec<'_>) -> Option<u64> {
        self.offsets.get(&key(t)).copied()
    }

    pub(crate) fn has_external(&self) -> bool {
        !self.offsets.is_empty()
    }
}
