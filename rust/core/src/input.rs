//! The only door to the bytes being read. The reader never holds a `&[u8]` of its input: the input
//! may change while it is read (another process rewriting a memory-mapped file in place), and a
//! shared reference promises it does not. Every read here copies a bounds-checked range out with
//! volatile loads, so the compiler can neither re-read a value it already checked nor assume two
//! reads of one place agree: each value the parser uses exists in exactly one owned copy.
//!
//! An input may also be filled on demand ([`Fill`]): the parser reads a file's structure without
//! the file being read whole first (the aggregation reads large uploads this way, then streams
//! their values; `paged.rs`).

use std::marker::PhantomData;
use std::ptr;

/// Makes parts of an input readable just before they are read (a paged file: `paged.rs`).
pub(crate) trait Fill {
    /// Makes `pos..pos + n` (inside the input) hold the bytes it stands for; false when they
    /// cannot be had (the read then fails as one outside the input would).
    fn fill(&self, pos: usize, n: usize) -> bool;
}

/// A readable region of memory whose contents may change while it is being read.
#[derive(Clone, Copy)]
pub(crate) struct Input<'a> {
    base: *const u8,
    len: usize,
    fill: Option<&'a dyn Fill>,
    _borrow: PhantomData<&'a [u8]>,
}

impl<'a> Input<'a> {
    /// Bytes that cannot change (a `&[u8]` guarantees it).
    pub(crate) fn from_slice(bytes: &'a [u8]) -> Input<'a> {
        Input { base: bytes.as_ptr(), len: bytes.len(), fill: None, _borrow: PhantomData }
    }

    /// # Safety
    /// `base..base + len` must stay allocated and readable for `'a`. Its contents may change
    /// at any time (by another process through a shared mapping, or by code outside Rust).
    pub(crate) unsafe fn from_raw(base: *const u8, len: usize) -> Input<'a> {
        Input { base, len, fill: None, _borrow: PhantomData }
    }

    /// Memory that `fill` fills before each read of a part of it.
    ///
    /// # Safety
    /// As [`Input::from_raw`]; `fill` may write into `base..base + len` during its calls only.
    #[cfg(feature = "fs")]
    pub(crate) unsafe fn paged(base: *const u8, len: usize, fill: &'a dyn Fill) -> Input<'a> {
        Input { base, len, fill: Some(fill), _borrow: PhantomData }
    }

    /// Whether `pos..pos + n` is inside the input and, for a paged input, filled.
    fn ready(&self, pos: usize, n: usize) -> bool {
        self.contains(pos, n) && self.fill.is_none_or(|f| n == 0 || f.fill(pos, n))
    }

    /// The `N` bytes at `pos`, which [`Input::ready`] said are there.
    fn load<const N: usize>(&self, pos: usize) -> [u8; N] {
        // SAFETY: callers checked pos + N <= len (`ready`), and `from_slice`/`from_raw`/`paged`
        // guarantee base..base + len is readable; `[u8; N]` has alignment 1, so any address is
        // aligned. A volatile load reads the memory exactly once, whatever changes it.
        unsafe { ptr::read_volatile(self.base.add(pos).cast::<[u8; N]>()) }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether `pos..pos + n` lies inside the input.
    pub(crate) fn contains(&self, pos: usize, n: usize) -> bool {
        pos.checked_add(n).is_some_and(|end| end <= self.len)
    }

    /// The `N` bytes at `pos`, or `None` when they are not all inside the input.
    pub(crate) fn array<const N: usize>(&self, pos: usize) -> Option<[u8; N]> {
        self.ready(pos, N).then(|| self.load(pos))
    }

    pub(crate) fn u8(&self, pos: usize) -> Option<u8> {
        self.array::<1>(pos).map(|[b]| b)
    }

    /// A copy of the first `n` bytes (fewer when the input is shorter), for telling what kind of
    /// file it is (`sniff.rs`); a byte that cannot be had ends the copy.
    pub(crate) fn head(&self, n: usize) -> Vec<u8> {
        (0..n.min(self.len)).map_while(|pos| self.u8(pos)).collect()
    }

    /// What kind of file the input is, when a rule of `sniff.rs` recognizes it.
    pub(crate) fn kind(&self) -> Option<crate::FileKind> {
        crate::sniff(&self.head(crate::SNIFF_LEN), self.len as u64)
    }

    pub(crate) fn u16(&self, pos: usize) -> Option<u16> {
        self.array(pos).map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&self, pos: usize) -> Option<u32> {
        self.array(pos).map(u32::from_le_bytes)
    }

    pub(crate) fn i32(&self, pos: usize) -> Option<i32> {
        self.array(pos).map(i32::from_le_bytes)
    }

    pub(crate) fn i64(&self, pos: usize) -> Option<i64> {
        self.array(pos).map(i64::from_le_bytes)
    }

    /// Appends the `n` bytes at `pos` to `out`; `None` (and `out` unchanged) when they are not all
    /// inside the input. `out` grows by at most `n`, and `n` was checked against the input first.
    pub(crate) fn copy_to(&self, pos: usize, n: usize, out: &mut Vec<u8>) -> Option<()> {
        if !self.ready(pos, n) {
            return None;
        }
        out.reserve(n);
        const CHUNK: usize = 8;
        let mut at = pos;
        let end = pos + n;
        while end - at >= CHUNK {
            out.extend_from_slice(&self.load::<CHUNK>(at));
            at += CHUNK;
        }
        while at < end {
            let [byte] = self.load::<1>(at);
            out.push(byte);
            at += 1;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_bounds_checked() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
        let input = Input::from_slice(&bytes);
        assert_eq!(input.u32(0), Some(0x0403_0201));
        assert_eq!(input.u32(7), Some(0x0b0a_0908));
        assert_eq!(input.u32(8), None);
        assert_eq!(input.u16(usize::MAX), None);
        assert_eq!(input.i64(3), Some(i64::from_le_bytes([4, 5, 6, 7, 8, 9, 10, 11])));
        let mut out = vec![0];
        assert_eq!(input.copy_to(1, 10, &mut out), Some(()));
        assert_eq!(out, [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(input.copy_to(2, 10, &mut out), None);
        assert_eq!(input.copy_to(usize::MAX, 2, &mut out), None);
        assert_eq!(out.len(), 11);
        assert_eq!(Input::from_slice(&[]).u8(0), None);
    }
}
