//! The flatbuffer primitives both hand-written readers share (checkpoints: `reader.rs`; ORT
//! adapters: `adapter/read.rs`): offsets, tables, vtables, scalars, vectors and strings, each read
//! exactly once through [`Input`], checked against the input length when read, with checked
//! arithmetic, under two budgets that bound the work on buffers whose objects share or overlap (at
//! most `len / 4 + 1` tables, and `2 × len` bytes of structure visited).
//!
//! The rules are those of the flatbuffers C++ verifier, which ORT runs on both formats (facts from
//! google/flatbuffers' `verifier.h`), so that ortckpt accepts no structure ORT refuses:
//! * an offset (`uoffset_t`) is aligned to 4 and inside the buffer, is not 0 ("may not point to
//!   itself"), is below 2^31 (negative as a signed offset), and points at a byte inside the buffer;
//! * a table's signed vtable offset leads inside the buffer; the vtable is 2-aligned, its length
//!   even and inside the buffer; fields beyond it are absent;
//! * scalars, lengths and offsets are aligned to their size (safety does not need it: every read
//!   is an unaligned copy);
//! * a vector's `len × size` bytes lie inside the buffer; a string is followed by a zero byte.

use crate::input::Input;
use crate::{Error, Result};

/// The message for a read past the end of the buffer.
pub(crate) const OUTSIDE: &str = "a value lies outside the buffer";

/// The message for an offset the flatbuffers verifier refuses for its value (0, or 2^31 and up).
pub(crate) const OFFSET_ZERO_OR_NEGATIVE: &str = "an offset is 0 or negative";

/// A table: its position and the vtable entries of its first `N` fields (0 = absent), read once.
pub(crate) struct Table<const N: usize> {
    pub(crate) pos: usize,
    fields: [u16; N],
}

impl<const N: usize> Table<N> {
    /// Position of the field at vtable offset `slot` (a generated `VT_*`: 4 + 2 × field id),
    /// `None` when absent.
    pub(crate) fn field(&self, slot: u16) -> Option<usize> {
        let id = usize::from(slot).checked_sub(4)? / 2;
        match self.fields.get(id) {
            Some(&off) if off != 0 => Some(self.pos.saturating_add(usize::from(off))),
            _ => None,
        }
    }
}

/// A walk over one flatbuffer, with its budgets and the error its format reports.
pub(crate) struct Walker<'i> {
    pub(crate) input: Input<'i>,
    tables_left: usize,
    bytes_left: usize,
    /// The format's "malformed" error (what, offset).
    malformed: fn(&'static str, usize) -> Error,
    /// The message when shared or overlapping objects exhaust the byte budget.
    over_budget: &'static str,
}

impl<'i> Walker<'i> {
    pub(crate) fn new(
        input: Input<'i>,
        malformed: fn(&'static str, usize) -> Error,
        over_budget: &'static str,
    ) -> Walker<'i> {
        // A table takes at least 4 bytes (its vtable offset), so no valid buffer has more tables.
        // Shared sub-objects can make a small buffer look huge; neither format's writers share
        // objects, so the structure visited is bounded by twice the buffer's real size.
        let len = input.len();
        Walker { input, tables_left: len / 4 + 1, bytes_left: len.saturating_mul(2), malformed, over_budget }
    }

    /// The format's error for `what` at `pos`.
    pub(crate) fn fail(&self, what: &'static str, pos: usize) -> Error {
        (self.malformed)(what, pos)
    }

    /// Counts `n` bytes of structure against the budget.
    pub(crate) fn charge(&mut self, n: usize, pos: usize) -> Result<()> {
        match self.bytes_left.checked_sub(n) {
            Some(left) => {
                self.bytes_left = left;
                Ok(())
            }
            None => Err(self.fail(self.over_budget, pos)),
        }
    }

    pub(crate) fn aligned(&self, pos: usize, align: usize) -> Result<()> {
        if pos.is_multiple_of(align) {
            Ok(())
        } else {
            Err(self.fail("a value is not aligned to its size", pos))
        }
    }

    pub(crate) fn u16(&mut self, pos: usize) -> Result<u16> {
        self.aligned(pos, 2)?;
        self.charge(2, pos)?;
        self.input.u16(pos).ok_or_else(|| self.fail(OUTSIDE, pos))
    }

    /// An offset or a vector length (both 4-byte aligned).
    pub(crate) fn u32(&mut self, pos: usize) -> Result<u32> {
        self.aligned(pos, 4)?;
        self.charge(4, pos)?;
        self.input.u32(pos).ok_or_else(|| self.fail(OUTSIDE, pos))
    }

    /// Follows the unsigned offset stored at `pos`, with the verifier's rules on its value.
    pub(crate) fn follow(&mut self, pos: usize) -> Result<usize> {
        let offset = self.u32(pos)?;
        if offset == 0 || offset > i32::MAX as u32 {
            return Err(self.fail(OFFSET_ZERO_OR_NEGATIVE, pos));
        }
        match pos.checked_add(offset as usize) {
            Some(target) if target < self.input.len() => Ok(target),
            _ => Err(self.fail("an offset points outside the buffer", pos)),
        }
    }

    /// The table at `pos`, with the entries of its first `N` fields.
    pub(crate) fn table<const N: usize>(&mut self, pos: usize) -> Result<Table<N>> {
        self.tables_left = match self.tables_left.checked_sub(1) {
            Some(left) => left,
            None => return Err(self.fail("more tables than the buffer can hold", pos)),
        };
        self.aligned(pos, 4)?;
        self.charge(4, pos)?;
        let soffset = self.input.i32(pos).ok_or_else(|| self.fail("a table lies outside the buffer", pos))?;
        // The vtable is at `pos - soffset`.
        let vtable = i64::try_from(pos)
            .ok()
            .and_then(|p| p.checked_sub(i64::from(soffset)))
            .and_then(|v| usize::try_from(v).ok())
            .filter(|&v| v < self.input.len())
            .ok_or_else(|| self.fail("a table's vtable lies outside the buffer", pos))?;
        let vtable_len = usize::from(self.u16(vtable)?);
        self.aligned(vtable_len, 2)?;
        // (A vtable shorter than 4 bytes, without even the table's size, is valid: all fields absent.)
        if !self.input.contains(vtable, vtable_len) {
            return Err(self.fail("a vtable runs past the end of the buffer", vtable));
        }
        self.charge(vtable_len, vtable)?;
        let mut fields = [0u16; N];
        for (i, field) in fields.iter_mut().enumerate() {
            let slot = 4 + 2 * i;
            if slot < vtable_len {
                *field = self.u16(vtable + slot)?;
            }
        }
        Ok(Table { pos, fields })
    }

    /// The scalar of `S` bytes in `slot` of `t`, or `default` when absent.
    pub(crate) fn scalar<const N: usize, const S: usize, T>(
        &mut self,
        t: &Table<N>,
        slot: u16,
        default: T,
        convert: fn([u8; S]) -> T,
    ) -> Result<T> {
        let Some(pos) = t.field(slot) else { return Ok(default) };
        self.aligned(pos, S)?;
        self.charge(S, pos)?;
        self.input.array::<S>(pos).map(convert).ok_or_else(|| self.fail(OUTSIDE, pos))
    }

    /// The string at `pos` (after its offset was followed), copied into `out`.
    pub(crate) fn string(&mut self, pos: usize, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        let n = self.u32(pos)? as usize;
        let start = pos.saturating_add(4);
        if !self.input.contains(start, n) {
            return Err(self.fail("a string runs past the end of the buffer", pos));
        }
        self.charge(n, pos)?;
        crate::alloc::reserve(out, n)?; // copy_to's own reserve is then a no-op: never an abort
        self.input.copy_to(start, n, out).ok_or_else(|| self.fail(OUTSIDE, pos))?;
        if self.input.u8(start.saturating_add(n)) != Some(0) {
            return Err(self.fail("a string lacks its zero terminator", pos));
        }
        Ok(())
    }

    /// The vector field in `slot` of `t` with elements of `size` bytes: (first element, count),
    /// `None` when absent. The whole vector was checked to lie inside the input.
    pub(crate) fn vector<const N: usize>(
        &mut self,
        t: &Table<N>,
        slot: u16,
        size: usize,
    ) -> Result<Option<(usize, usize)>> {
        let Some(field) = t.field(slot) else { return Ok(None) };
        let pos = self.follow(field)?;
        let count = self.u32(pos)? as usize;
        let start = pos.saturating_add(4);
        let bytes = count.checked_mul(size).ok_or_else(|| self.fail("a vector is too long", pos))?;
        if !self.input.contains(start, bytes) {
            return Err(self.fail("a vector runs past the end of the buffer", pos));
        }
        self.charge(bytes, pos)?;
        Ok(Some((start, count)))
    }
}
