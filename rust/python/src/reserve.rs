//! The extension's global allocator: the system's, with an emergency reserve.
//!
//! Rust aborts the process when an allocation fails, and the core makes every allocation an input
//! calls for fallible (`try_reserve`: `MemoryError`). What remains are small allocations that
//! happen once memory is already exhausted, typically while a failure is reported: the message of
//! an error, a name copied into it. To let those succeed, [`BLOCKS`] blocks of [`RESERVE`] bytes
//! are held aside; when a small allocation fails, a block is given back to the system and the
//! allocation retried, so the operation can unwind and raise `MemoryError` instead of aborting.
//! Blocks are taken again at import, when a native call starts or an error is converted for
//! Python, and when a block at least their size is freed (memory has come back then). Large
//! allocations never use the reserve: they are the fallible ones, which report their failure.
//! This makes an abort on a small allocation unlikely, not impossible (many failures in a row with
//! no memory coming back in between could use every block).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// The reserve is this many blocks: each failure gives back one, so several failures in a row
/// (a reader failing, then its caller's error path, then Python's own) each find room.
const BLOCKS: usize = 8;
/// Bytes of one block (the reserve is `BLOCKS` of them).
const RESERVE: usize = 2 << 20;
/// Allocations up to this size may use the reserve (the error paths' sizes, with margin).
const SMALL: usize = 256 << 10;

static HELD: [AtomicPtr<u8>; BLOCKS] = [const { AtomicPtr::new(null_mut()) }; BLOCKS];

fn block_layout() -> Layout {
    // SAFETY: RESERVE is non-zero and 4096 is a power of two; RESERVE rounded up to 4096 does not
    // overflow isize.
    unsafe { Layout::from_size_align_unchecked(RESERVE, 4096) }
}

/// Gives one block of the reserve back to the system; true when there was one.
fn release() -> bool {
    for slot in &HELD {
        let block = slot.swap(null_mut(), Ordering::AcqRel);
        if !block.is_null() {
            // SAFETY: `block` was allocated by `System` with `block_layout()` in `rearm`, and the
            // swap made this the only owner.
            unsafe { System.dealloc(block, block_layout()) };
            return true;
        }
    }
    false
}

/// Takes back the blocks that were used, as far as memory allows (one atomic load per block
/// when the reserve is whole).
pub(crate) fn rearm() {
    for slot in &HELD {
        if !slot.load(Ordering::Acquire).is_null() {
            continue;
        }
        // SAFETY: a non-zero-size layout.
        let block = unsafe { System.alloc(block_layout()) };
        if block.is_null() {
            return;
        }
        if slot.compare_exchange(null_mut(), block, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // another thread filled this slot first
            // SAFETY: allocated just above with this layout, owned by nobody else.
            unsafe { System.dealloc(block, block_layout()) };
        }
    }
}

/// The system allocator, retrying a failed small allocation once with the reserve given back.
pub(crate) struct WithReserve;

// SAFETY: every call is forwarded to `System` with the caller's arguments (the caller upholds
// `GlobalAlloc`'s contract for them); the reserve is a separate `System` block only ever freed
// once (see `release`).
unsafe impl GlobalAlloc for WithReserve {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() && layout.size() <= SMALL && release() {
            // SAFETY: as above.
            return unsafe { System.alloc(layout) };
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as received.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() && layout.size() <= SMALL && release() {
            // SAFETY: as above.
            return unsafe { System.alloc_zeroed(layout) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
        if layout.size() >= RESERVE {
            // memory at least the reserve's size just came back: take the reserve again if it
            // was used (one atomic load otherwise; only for large blocks)
            rearm();
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as received; a failed realloc leaves `ptr` valid, so it may be retried.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() && new_size <= SMALL && release() {
            // SAFETY: as above.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        p
    }
}
