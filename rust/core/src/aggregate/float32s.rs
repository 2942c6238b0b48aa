//! A round's float32 results in memory of their own, handed to a binding without a copy: a float32
//! vector (the robust methods'), or FedAvg's float64 sums divided and rounded to float32 over their
//! own memory, which then shrinks to the float32 values' size. The rounding is the one a caller
//! rounding `sum / divisor` to float32 does (IEEE division, then round to nearest even), so the
//! values are the same bit for bit; the point is memory: no fresh float32 copy of the model for
//! the kernel to clear while the float64 sums are still held.

use std::alloc::{self, Layout};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

/// Float32 values owning their memory (see the module note).
pub struct Float32s {
    ptr: NonNull<f32>,
    len: usize,
    /// How the memory was allocated (size 0: nothing to free).
    layout: Layout,
    /// Whether every value is known to be finite (checked as they were written).
    finite: bool,
}

// SAFETY: `Float32s` owns its memory exclusively, as a `Vec<f32>` does, and gives only shared
// access to it (`as_slice`).
unsafe impl Send for Float32s {}
// SAFETY: as above: nothing mutates the values through a shared reference.
unsafe impl Sync for Float32s {}

/// Float64 values read before their float32 values are written over them (8 KiB on the stack).
const BLOCK: usize = 1024;

impl Float32s {
    /// The values of `values`, in its memory; `finite`: whether the caller checked every value
    /// finite.
    pub fn from_vec(values: Vec<f32>, finite: bool) -> Float32s {
        let mut v = ManuallyDrop::new(values);
        let (len, capacity) = (v.len(), v.capacity());
        // a vector's buffer was allocated with `Layout::array::<f32>(capacity)` (nothing when
        // the capacity is 0: its pointer is dangling, and the layout's size 0 frees nothing)
        match (NonNull::new(v.as_mut_ptr()), Layout::array::<f32>(capacity)) {
            (Some(ptr), Ok(layout)) => Float32s { ptr, len, layout, finite },
            // not reached (a vector's pointer is never null, its layout was valid): leaking the
            // vector is safe, dropping it after taking it apart would not be
            _ => Float32s::empty(),
        }
    }

    fn empty() -> Float32s {
        Float32s { ptr: NonNull::dangling(), len: 0, layout: Layout::new::<[f32; 0]>(), finite: true }
    }

    /// Each of `sums` divided by `divisor` and rounded to float32, written over the sums' own
    /// memory block by block from the start, which is then shrunk to the float32 values' size
    /// (`realloc`: the allocator frees the tail in place). Whether every value is finite is
    /// checked as they are written ([`Float32s::finite`]).
    pub fn rounded_in_place(sums: Vec<f64>, divisor: f64) -> Float32s {
        let mut v = ManuallyDrop::new(sums);
        let (len, capacity, start) = (v.len(), v.capacity(), v.as_mut_ptr());
        let Ok(old) = Layout::array::<f64>(capacity) else {
            // not reached (the vector was allocated with this layout): round into a new vector
            // SAFETY: `start` holds `len` initialized values, the vector's own.
            let values = unsafe { std::slice::from_raw_parts(start, len) };
            let rounded: Vec<f32> = values.iter().map(|&s| (s / divisor) as f32).collect();
            let finite = rounded.iter().all(|v| v.is_finite());
            return Float32s::from_vec(rounded, finite);
        };
        if old.size() == 0 {
            return Float32s::empty();
        }
        let out = start.cast::<f32>();
        let mut block = [0.0f64; BLOCK];
        let (mut at, mut finite) = (0, true);
        while at < len {
            let n = (len - at).min(BLOCK);
            let read = block.get_mut(..n).unwrap_or_default();
            // SAFETY: `at..at + n` lies within the vector's `len` values, and `block` is ours.
            unsafe { std::ptr::copy_nonoverlapping(start.add(at), read.as_mut_ptr(), n) };
            // SAFETY: float32 values `at..at + n` take bytes `4 at..4 (at + n)` of the allocation,
            // which overlap only float64 values below `at + n`: all read already (before `at` by
            // earlier blocks, the rest into `block`), so nothing unread is overwritten; no other
            // reference to the allocation is alive (the vector is not used again).
            let written = unsafe { std::slice::from_raw_parts_mut(out.add(at), n) };
            for (w, &s) in written.iter_mut().zip(read.iter()) {
                *w = (s / divisor) as f32;
                finite &= w.is_finite();
            }
            at += n;
        }
        let size = len * std::mem::size_of::<f32>();
        let Ok(shrunk_layout) = Layout::from_size_align(size, old.align()) else {
            // not reached (smaller than a valid layout): keep the block as it was allocated
            return Float32s {
                ptr: NonNull::new(out).unwrap_or(NonNull::dangling()),
                len,
                layout: old,
                finite,
            };
        };
        if size == 0 {
            // SAFETY: the block was allocated by the global allocator with `old`.
            unsafe { alloc::dealloc(start.cast::<u8>(), old) };
            return Float32s::empty();
        }
        // SAFETY: the block was allocated by the global allocator with `old`; `size` is non-zero
        // and no larger, so its first `size` bytes (the float32 values) are kept.
        let shrunk = unsafe { alloc::realloc(start.cast::<u8>(), old, size) };
        match NonNull::new(shrunk.cast::<f32>()) {
            Some(ptr) => Float32s { ptr, len, layout: shrunk_layout, finite },
            // a failed realloc leaves the block as it was: keep it whole
            None => {
                Float32s { ptr: NonNull::new(out).unwrap_or(NonNull::dangling()), len, layout: old, finite }
            }
        }
    }

    /// Whether every value is known to be finite: checked as they were written (or so the caller
    /// of [`Float32s::from_vec`] said). False means unknown or not.
    pub fn finite(&self) -> bool {
        self.finite
    }

    /// The values.
    pub fn as_slice(&self) -> &[f32] {
        // SAFETY: `ptr` holds `len` initialized float32 values owned by `self` (or is dangling
        // and well aligned with `len` 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The values' bytes.
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: as `as_slice`; float32 values have no padding, and bytes no alignment to meet.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u8>(), self.len * 4) }
    }
}

impl Drop for Float32s {
    fn drop(&mut self) {
        if self.layout.size() != 0 {
            // SAFETY: the memory was allocated by the global allocator with `layout` and is
            // freed once, here.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), self.layout) };
        }
    }
}

impl std::fmt::Debug for Float32s {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_in_place_is_dividing_then_rounding() {
        for len in [0usize, 1, 2, 3, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 7, 1 << 20] {
            let sums: Vec<f64> = (0..len).map(|i| (i as f64).sin() * 1e3 + 1.0 / 3.0).collect();
            let want: Vec<f32> = sums.iter().map(|&s| (s / 7.0) as f32).collect();
            let rounded = Float32s::rounded_in_place(sums, 7.0);
            assert_eq!(rounded.as_slice(), want.as_slice(), "{len}");
            assert!(rounded.finite());
        }
        let mut spare = Vec::with_capacity(100);
        spare.extend([1.0f64, 2.0, 3.0]);
        assert_eq!(Float32s::rounded_in_place(spare, 2.0).as_slice(), [0.5f32, 1.0, 1.5]);
        assert!(Float32s::rounded_in_place(Vec::new(), 1.0).as_slice().is_empty());
        // a mean past float32's range (sums from elsewhere: a cluster's partial sums) is infinite
        // in float32, and said so
        let past = Float32s::rounded_in_place(vec![1.0, 1e300, 2.0], 2.0);
        assert_eq!(past.as_slice(), [0.5f32, f32::INFINITY, 1.0]);
        assert!(!past.finite());
    }

    #[test]
    fn a_vector_is_kept_as_it_is() {
        let v: Vec<f32> = (0..1000).map(|i| i as f32 / 3.0).collect();
        let kept = Float32s::from_vec(v.clone(), true);
        assert_eq!(kept.as_slice(), v.as_slice());
        assert_eq!(kept.as_bytes().len(), 4000);
        assert!(Float32s::from_vec(Vec::new(), true).as_slice().is_empty());
    }
}
