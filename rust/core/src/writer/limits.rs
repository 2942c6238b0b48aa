//! The numbers every part of the layout keeps to.

/// Byte alignment of every tensor's `raw_data` in files this library writes: enough for any
/// element type, so memory-mapped readers get aligned views.
pub const DATA_ALIGNMENT: usize = 16;

/// The largest buffer a flatbuffer can address with its 32-bit signed offsets.
pub(super) const MAX_FLATBUFFER_BYTES: u64 = (1 << 31) - 1;
