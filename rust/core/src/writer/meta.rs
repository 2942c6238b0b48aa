//! The metadata part of a checkpoint, emitted front to back into one owned buffer: tables (with
//! their vtables, shared between tables of one shape), strings and vectors, every parent before
//! its children so every `uoffset` points forward.

use flatbuffers::VOffsetT;

use super::limits::MAX_FLATBUFFER_BYTES;
use crate::schema::{field_count, field_id};
use crate::{Error, Result};

/// A scalar or offset field of a table, by its vtable offset (a generated `VT_*` constant).
#[derive(Clone, Copy)]
pub(super) enum Field {
    /// A `uoffset` to a child emitted later; its position is returned for patching.
    Ref(VOffsetT),
    Bool(VOffsetT, bool),
    I32(VOffsetT, i32),
    I64(VOffsetT, i64),
    F32(VOffsetT, f32),
}

impl Field {
    /// The field's id (its index in the vtable).
    fn id(self) -> usize {
        match self {
            Field::Ref(s) | Field::Bool(s, _) | Field::I32(s, _) | Field::I64(s, _) | Field::F32(s, _) => {
                field_id(s)
            }
        }
    }

    fn size(self) -> usize {
        match self {
            Field::Bool(..) => 1,
            Field::I64(..) => 8,
            _ => 4,
        }
    }

    fn bytes(self) -> ([u8; 8], usize) {
        let mut b = [0u8; 8];
        match self {
            Field::Ref(_) => {}
            Field::Bool(_, v) => b[0] = v as u8,
            Field::I32(_, v) => b[..4].copy_from_slice(&v.to_le_bytes()),
            Field::I64(_, v) => b.copy_from_slice(&v.to_le_bytes()),
            Field::F32(_, v) => b[..4].copy_from_slice(&v.to_le_bytes()),
        }
        (b, self.size())
    }
}

/// Fields whose value equals the schema default are not written (as flatbuffers builders do);
/// comparing bits keeps `-0.0`, which equals the default `0.0` but is not the same value.
pub(super) fn unless_default<T: PartialEq>(field: Field, value: T, default: T) -> Option<Field> {
    (value != default).then_some(field)
}

pub(super) fn f32_unless_zero(slot: VOffsetT, value: f32) -> Option<Field> {
    unless_default(Field::F32(slot, value), value.to_bits(), 0)
}

/// The most fields any table of the schema has.
const MAX_FIELDS: usize = field_count::MAX;

/// A vtable's u16 entries (size, table size, field offsets), zero-padded to a fixed length.
type VTable = [u16; 2 + MAX_FIELDS];

/// Positions of a table's `Ref` fields, by field id.
pub(super) struct Refs([usize; MAX_FIELDS]);

impl Refs {
    /// The position of the `Ref` field at vtable offset `vt` (a generated `VT_*` constant).
    pub(super) fn at(&self, vt: VOffsetT) -> usize {
        self.0[field_id(vt)]
    }
}

/// The metadata part of the file, emitted front to back.
pub(super) struct Meta {
    pub(super) buf: Vec<u8>,
    /// Vtables already written (content, position), so tables of one shape share one vtable.
    /// A checkpoint has a handful of table shapes, so a linear search beats hashing.
    pub(super) vtables: Vec<(VTable, usize)>,
    /// Positions of the non-empty raw_data `uoffset`s, in tail order: resolved once the metadata
    /// is complete and the data tail can be placed.
    pub(super) raw: Vec<usize>,
}

impl Meta {
    pub(super) fn pos(&self) -> usize {
        self.buf.len()
    }

    /// Pads with zeros until `(pos + skew) % align == 0`.
    pub(super) fn align(&mut self, align: usize, skew: usize) {
        while !(self.buf.len() + skew).is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    fn u32_at(&mut self, at: usize, value: u32) {
        self.buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Points the `uoffset` at `at` to `target`, which must lie after it.
    pub(super) fn patch(&mut self, at: usize, target: usize) -> Result<()> {
        // Metadata alone past 2 GiB (millions of long names or strings) cannot be addressed.
        if target as u64 > MAX_FLATBUFFER_BYTES {
            return Err(Error::TooLarge { bytes: target as u64 });
        }
        let delta =
            target.checked_sub(at).filter(|d| *d > 0).and_then(|d| u32::try_from(d).ok()).ok_or_else(
                || Error::Internal { detail: format!("offset at {at} does not point forward to {target}") },
            )?;
        self.u32_at(at, delta);
        Ok(())
    }

    /// Writes a table with `fields` (absent ones left out), reusing or writing its vtable first.
    /// Returns the table's position and the positions of its `Ref` fields.
    pub(super) fn table(&mut self, fields: &[Option<Field>]) -> Result<(usize, Refs)> {
        let mut present: Vec<Field> = fields.iter().flatten().copied().collect();
        // Largest first: 8-byte fields right after the 4-byte soffset, on an 8-byte boundary.
        present.sort_by_key(|f| std::cmp::Reverse(f.size()));
        let slots = present.iter().map(|f| f.id() + 1).max().unwrap_or(0);
        let mut offsets = [0u16; MAX_FIELDS];
        let mut table_size = 4usize;
        for f in &present {
            offsets[f.id()] = table_size as u16;
            table_size += f.size();
        }
        let mut vtable: VTable = [0; 2 + MAX_FIELDS];
        vtable[0] = (4 + 2 * slots) as u16;
        vtable[1] = table_size as u16;
        vtable[2..2 + slots].copy_from_slice(&offsets[..slots]);
        let vtable_pos = match self.vtables.iter().find(|(v, _)| *v == vtable) {
            Some(&(_, p)) => p,
            None => {
                self.align(2, 0);
                let p = self.pos();
                for v in &vtable[..2 + slots] {
                    self.buf.extend_from_slice(&v.to_le_bytes());
                }
                self.vtables.push((vtable, p));
                p
            }
        };
        let wide = present.first().is_some_and(|f| f.size() == 8);
        if wide {
            self.align(8, 4);
        } else {
            self.align(4, 0);
        }
        let table = self.pos();
        let soffset = i32::try_from(table - vtable_pos)
            .map_err(|_| Error::Internal { detail: "vtable too far from its table".into() })?;
        self.buf.extend_from_slice(&soffset.to_le_bytes());
        let mut refs = Refs([0; MAX_FIELDS]);
        for f in &present {
            if let Field::Ref(_) = f {
                refs.0[f.id()] = self.pos();
            }
            let (bytes, n) = f.bytes();
            self.buf.extend_from_slice(&bytes[..n]);
        }
        Ok((table, refs))
    }

    /// Writes a NUL-terminated string and points `at` to it.
    pub(super) fn string(&mut self, at: usize, s: &str) -> Result<()> {
        self.align(4, 0);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(s.len())?.to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.patch(at, pos)
    }

    /// Writes a vector of `n` `uoffset`s (to be patched) and points `at` to it; returns the
    /// position of its first element.
    pub(super) fn offset_vector(&mut self, at: usize, n: usize) -> Result<usize> {
        self.align(4, 0);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(n)?.to_le_bytes());
        self.buf.resize(self.buf.len() + 4 * n, 0);
        self.patch(at, pos)?;
        Ok(pos + 4)
    }

    /// Writes an `[int64]` vector with 8-byte aligned elements and points `at` to it.
    pub(super) fn i64_vector(&mut self, at: usize, values: &[i64]) -> Result<()> {
        self.align(8, 4);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(values.len())?.to_le_bytes());
        for v in values {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.patch(at, pos)
    }
}

pub(super) fn len_u32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooLarge { bytes: n as u64 })
}
