//! Index a checkpoint in one pass over its bytes, without touching tensor bytes.
//!
//! A hand-written flatbuffer parser for the checkpoint schema (`schema/*.fbs`), safe on input that
//! changes while it is read: every structural value (root offset, vtable offsets and sizes, field
//! offsets, vector lengths, string bytes, scalars) is read exactly once through [`Input`], checked
//! against the input length when it is read, with checked arithmetic, and copied into owned
//! values; nothing is read twice to be used again. No allocation is sized by a value that was not
//! checked against the input length first (a vector of `n` tables needs `4n` bytes of input, a
//! string of `n` bytes needs `n` bytes, `n` dims need `8n` bytes). The schema is not recursive, so
//! tables are parsed in a fixed nesting without recursion, and two budgets bound the work on
//! buffers whose objects share or overlap: at most `len / 4 + 1` tables, and at most `2 × len`
//! bytes of structure visited (the limits the flatbuffers verifier was run with before).
//!
//! Order of checks: length and identifier first (cheap, and the clearest message for files that
//! are not checkpoints at all), then the version, then each table in file order, the rules ORT
//! relies on (`assemble.rs`) applied to each value as soon as it is read.
//!
//! The flatbuffer primitives (offsets, tables, scalars, vectors, strings, the budgets) are
//! `flatbuf.rs`, shared with the adapter reader. Rules kept from the flatbuffers verifier: every
//! offset and range inside the buffer, offsets neither 0 nor 2^31 or more (as the C++ verifier ORT
//! runs refuses them), signed
//! vtable offsets, strings UTF-8 and zero-terminated, fields beyond a vtable absent (so files
//! written with a newer schema read as flatbuffers would), absent fields take schema defaults, and
//! alignment (tables, offsets, lengths and scalars on a multiple of their size), which safety does
//! not need (every read is an unaligned copy) but ORT's verifier enforces, with one relaxation:
//! `[int64]` dims need only the 4-byte alignment of their length prefix, as ORT 1.19.2 writes them
//! (its nominal checkpoints have them) and ORT's C++ verifier accepts.

pub use crate::versions::SUPPORTED_VERSIONS;
use std::ops::{Deref, DerefMut};

use crate::assemble::{Assembler, RawData, Role, TensorFields};
use crate::flatbuf::{Table, Walker, OUTSIDE};
use crate::input::Input;
use crate::schema::{fbs, field_count};
use crate::shape::byte_size;
use crate::{CheckpointIndex, DataType, Error, PropertyValue, Result};

/// The flatbuffer file identifier of ORT training checkpoints (from the generated code).
pub const FILE_IDENTIFIER: &[u8; 4] = crate::schema::FILE_IDENTIFIER;

/// A root offset (4 bytes) and the file identifier (4 bytes).
const HEADER_LEN: usize = 8;

/// When the reader compares an inline tensor's stored byte count (the length prefix of its
/// `raw_data`, the 4 bytes just before its values) with the count its shape and type call for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthCheck {
    /// While indexing: a mismatch fails the index.
    WhenIndexing,
    /// When the tensor's bytes are first used ([`CheckpointIndex::check_inline_length`]): indexing
    /// touches no page of tensor data, which for a file mapped from a cold page cache saves one
    /// disk read per tensor. The range the shape calls for, prefix included, is still checked to
    /// lie inside the buffer while indexing; only the comparison waits. Nominal checkpoints and
    /// string, external and mixed-storage tensors are checked while indexing regardless.
    OnFirstUse,
}

/// Indexes `buf` as an ORT training checkpoint, every check done while indexing. See
/// [`index_checkpoint_raw`] for memory that may change while it is read.
pub fn index_checkpoint(buf: &[u8]) -> Result<CheckpointIndex> {
    parse(Input::from_slice(buf), LengthCheck::WhenIndexing)
}

/// Indexes the `len` bytes at `base` as an ORT training checkpoint, for memory that another
/// process may change while it is read (a shared file mapping). Changed bytes give an error or
/// different values, never a panic, an abort or an unbounded allocation.
/// `lengths` says when inline tensors' stored byte counts are compared ([`LengthCheck`]).
///
/// # Safety
/// `base..base + len` must stay mapped and readable until this returns. Its contents may change.
pub unsafe fn index_checkpoint_raw(
    base: *const u8,
    len: usize,
    lengths: LengthCheck,
) -> Result<CheckpointIndex> {
    // SAFETY: the caller guarantees the range stays readable for the duration of the call.
    parse(unsafe { Input::from_raw(base, len) }, lengths)
}

/// Indexes an input filled on demand (`paged.rs`), lengths compared as `lengths` says.
#[cfg(feature = "fs")]
pub(crate) fn index_input(input: Input<'_>, lengths: LengthCheck) -> Result<CheckpointIndex> {
    parse(input, lengths)
}

fn malformed(what: &'static str, offset: usize) -> Error {
    Error::Malformed { what, offset }
}

/// Reusable buffers for the strings and dims of one tensor.
#[derive(Default)]
struct Scratch {
    name: Vec<u8>,
    doc: Vec<u8>,
    text: Vec<u8>,
    dims: Vec<i64>,
}

/// The checkpoint walk: the shared flatbuffer primitives (`flatbuf.rs`, reached through
/// `Deref`) and when tensor byte counts are compared.
struct Parser<'i> {
    walker: Walker<'i>,
    lengths: LengthCheck,
}

impl<'i> Deref for Parser<'i> {
    type Target = Walker<'i>;
    fn deref(&self) -> &Walker<'i> {
        &self.walker
    }
}

impl DerefMut for Parser<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.walker
    }
}

fn utf8(bytes: &[u8], pos: usize) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|_| malformed("a string is not valid UTF-8", pos))
}

impl Parser<'_> {
    fn bool_field<const N: usize>(&mut self, t: &Table<N>, slot: u16) -> Result<bool> {
        self.scalar(t, slot, false, |[b]: [u8; 1]| b != 0)
    }

    /// The string field in `slot` of `t` copied into `out`; its position, `None` when absent.
    fn string_field<const N: usize>(
        &mut self,
        t: &Table<N>,
        slot: u16,
        out: &mut Vec<u8>,
    ) -> Result<Option<usize>> {
        let Some(field) = t.field(slot) else { return Ok(None) };
        let pos = self.follow(field)?;
        self.string(pos, out)?;
        Ok(Some(pos))
    }

    /// The byte vector field in `slot` of `t`, whose length prefix is left unread: `expected`
    /// bytes after it, prefix included, are checked to lie inside the input ([`RawData::Deferred`]).
    fn deferred_vector<const N: usize>(&mut self, t: &Table<N>, slot: u16, expected: u64) -> Result<RawData> {
        let Some(field) = t.field(slot) else { return Ok(RawData::Absent) };
        let pos = self.follow(field)?;
        self.aligned(pos, 4)?;
        // `contains` fails on a saturated sum: no input is `usize::MAX` bytes long.
        match usize::try_from(expected).ok().filter(|&len| self.input.contains(pos, len.saturating_add(4))) {
            Some(len) => {
                self.charge(len.saturating_add(4), pos)?;
                Ok(RawData::Deferred { offset: pos + 4, len })
            }
            // The file cannot be right: read the prefix after all, so the error is the one eager
            // indexing gives (the vector runs past the end, or its length mismatches the shape).
            None => Ok(match self.vector(t, slot, 1)? {
                Some((offset, len)) => RawData::Read { offset, len },
                None => RawData::Absent,
            }),
        }
    }

    /// The positions of the tables in the vector of tables at `slot` of `t`, one by one.
    fn each_table<const N: usize>(
        &mut self,
        t: &Table<N>,
        slot: u16,
        mut visit: impl FnMut(&mut Self, usize) -> Result<()>,
    ) -> Result<()> {
        let Some((start, count)) = self.vector(t, slot, 4)? else { return Ok(()) };
        for i in 0..count {
            // In range: the vector's `4 × count` bytes were checked to lie inside the input.
            let pos = self.follow(start + 4 * i)?;
            visit(self, pos)?;
        }
        Ok(())
    }

    fn tensors<const N: usize>(
        &mut self,
        t: &Table<N>,
        slot: u16,
        role: Role,
        asm: &mut Assembler,
        s: &mut Scratch,
    ) -> Result<()> {
        let Some((start, count)) = self.vector(t, slot, 4)? else { return Ok(()) };
        asm.reserve_tensors(count)?;
        for i in 0..count {
            // In range: the vector's `4 × count` bytes were checked to lie inside the input.
            let pos = self.follow(start + 4 * i)?;
            self.tensor(pos, role, asm, s)?;
        }
        Ok(())
    }

    fn tensor(&mut self, pos: usize, role: Role, asm: &mut Assembler, s: &mut Scratch) -> Result<()> {
        use fbs::Tensor as T;
        let t: Table<{ field_count::TENSOR }> = self.table(pos)?;
        let name = self.string_field(&t, T::VT_NAME, &mut s.name)?;
        let doc = self.string_field(&t, T::VT_DOC_STRING, &mut s.doc)?;
        s.dims.clear();
        if let Some((start, count)) = self.vector(&t, T::VT_DIMS, 8)? {
            // `count` dims were checked to fit in the input (8 bytes each).
            crate::alloc::reserve(&mut s.dims, count)?;
            for i in 0..count {
                let at = start + 8 * i;
                s.dims.push(self.input.i64(at).ok_or_else(|| malformed(OUTSIDE, at))?);
            }
        }
        let data_type = self.scalar(&t, T::VT_DATA_TYPE, 0, i32::from_le_bytes)?;
        let (strings_start, string_count) = self.vector(&t, T::VT_STRING_DATA, 4)?.unwrap_or((0, 0));
        let external_data_offset = self.scalar(&t, T::VT_EXTERNAL_DATA_OFFSET, -1, i64::from_le_bytes)?;
        // Only a plain inline numeric tensor of a checkpoint with values may wait for its length
        // check: every other combination needs the stored length to decide or refuse its storage.
        // (A name that is not UTF-8 fails below, as it always did.)
        let valid_name = name.and_then(|_| std::str::from_utf8(&s.name).ok());
        let expected = match (valid_name, DataType::from_code(data_type)) {
            (Some(name), Some(dtype))
                if self.lengths == LengthCheck::OnFirstUse
                    && string_count == 0
                    && external_data_offset == -1
                    && !asm.is_nominal() =>
            {
                byte_size(name, dtype, &s.dims)?
            }
            _ => None,
        };
        let raw_data = match expected {
            Some(expected) => self.deferred_vector(&t, T::VT_RAW_DATA, expected)?,
            None => match self.vector(&t, T::VT_RAW_DATA, 1)? {
                Some((offset, len)) => RawData::Read { offset, len },
                None => RawData::Absent,
            },
        };

        let fields = TensorFields {
            name: name.map(|p| utf8(&s.name, p)).transpose()?,
            doc_string: doc.map(|p| utf8(&s.doc, p)).transpose()?,
            dims: &s.dims,
            data_type,
            raw_data,
            string_count,
            external_data_offset,
        };
        let text = &mut s.text;
        asm.tensor(&fields, role, &mut |out| {
            for i in 0..string_count {
                let pos = self.follow(strings_start + 4 * i)?;
                self.string(pos, text)?;
                out.push(utf8(text, pos)?.to_owned());
            }
            Ok(())
        })
    }

    fn module_state(&mut self, pos: usize, asm: &mut Assembler, s: &mut Scratch) -> Result<()> {
        use fbs::ModuleState as T;
        let t: Table<{ field_count::MODULE_STATE }> = self.table(pos)?;
        let is_nominal = self.bool_field(&t, T::VT_IS_NOMINAL_STATE)?;
        let has_external_data = self.bool_field(&t, T::VT_HAS_EXTERNAL_DATA)?;
        asm.module_state(is_nominal, has_external_data);
        self.tensors(&t, T::VT_REQUIRES_GRAD_PARAMS, Role::Parameter, asm, s)?;
        asm.end_trainable();
        self.tensors(&t, T::VT_FROZEN_PARAMS, Role::Parameter, asm, s)
    }

    fn optimizer_group(&mut self, pos: usize, asm: &mut Assembler, s: &mut Scratch) -> Result<()> {
        use fbs::OptimizerGroup as T;
        let t: Table<{ field_count::OPTIMIZER_GROUP }> = self.table(pos)?;
        let name = self.string_field(&t, T::VT_GROUP_NAME, &mut s.name)?;
        let step = self.scalar(&t, T::VT_STEP, 0, i64::from_le_bytes)?;
        let lr = self.scalar(&t, T::VT_INITIAL_LEARNING_RATE, 0.0, f32::from_le_bytes)?;
        asm.begin_group(name.map(|p| utf8(&s.name, p)).transpose()?, step, lr)?;
        self.each_table(&t, T::VT_OPTIMIZER_STATES, |p, pos| {
            use fbs::ParameterOptimizerState as S;
            let state: Table<{ field_count::PARAMETER_STATE }> = p.table(pos)?;
            let name = p.string_field(&state, S::VT_PARAM_NAME, &mut s.name)?;
            asm.begin_state(name.map(|at| utf8(&s.name, at)).transpose()?)?;
            p.tensors(&state, S::VT_MOMENTUMS, Role::Momentum, asm, s)?;
            asm.end_state()
        })?;
        asm.end_group()
    }

    fn property_bag(&mut self, pos: usize, asm: &mut Assembler, s: &mut Scratch) -> Result<()> {
        use fbs::PropertyBag as T;
        // The three property tables put `name` and `value` in the same slots (tested in schema.rs).
        const NAME: u16 = fbs::IntProperty::VT_NAME;
        const VALUE: u16 = fbs::IntProperty::VT_VALUE;
        let bag: Table<{ field_count::PROPERTY_BAG }> = self.table(pos)?;
        for (slot, kind) in [(T::VT_INTS, "int"), (T::VT_FLOATS, "float"), (T::VT_STRINGS, "string")] {
            self.each_table(&bag, slot, |p, pos| {
                let t: Table<{ field_count::PROPERTY }> = p.table(pos)?;
                let name = p.string_field(&t, NAME, &mut s.name)?;
                let value = match slot {
                    T::VT_INTS => Some(PropertyValue::Int(p.scalar(&t, VALUE, 0, i64::from_le_bytes)?)),
                    T::VT_FLOATS => {
                        Some(PropertyValue::Float(p.scalar(&t, VALUE, 0.0, f32::from_le_bytes)?))
                    }
                    _ => match p.string_field(&t, VALUE, &mut s.doc)? {
                        Some(at) => Some(PropertyValue::Str(utf8(&s.doc, at)?.to_owned())),
                        None => None,
                    },
                };
                asm.property(kind, name.map(|at| utf8(&s.name, at)).transpose()?, value)
            })?;
        }
        Ok(())
    }
}

fn parse(input: Input<'_>, lengths: LengthCheck) -> Result<CheckpointIndex> {
    let len = input.len();
    let found: [u8; 4] = match input.array(4) {
        Some(found) if len >= HEADER_LEN => found,
        _ => return Err(Error::TooShort { len }),
    };
    if &found != FILE_IDENTIFIER {
        return Err(crate::kind_check::not_a(
            crate::FileKind::Checkpoint,
            input.kind(),
            Error::WrongIdentifier { found },
        ));
    }
    let walker = Walker::new(input, malformed, "objects share or overlap more than a checkpoint can");
    let mut p = Parser { walker, lengths };
    let mut s = Scratch::default();

    use fbs::Checkpoint as T;
    let root_pos = p.follow(0)?;
    let root: Table<{ field_count::CHECKPOINT }> = p.table(root_pos)?;
    let version = p.scalar(&root, T::VT_VERSION, 0, i32::from_le_bytes)?;
    let mut asm = Assembler::new(version)?;
    // ORT writes no module state at all for a state without parameters.
    if let Some(field) = root.field(T::VT_MODULE_STATE) {
        let pos = p.follow(field)?;
        p.module_state(pos, &mut asm, &mut s)?;
    } else {
        asm.end_trainable();
    }
    asm.end_parameters()?;
    p.each_table(&root, T::VT_OPTIMIZER_GROUPS, |p, pos| p.optimizer_group(pos, &mut asm, &mut s))?;
    asm.end_groups()?;
    if let Some(field) = root.field(T::VT_PROPERTY_BAG) {
        let pos = p.follow(field)?;
        p.property_bag(pos, &mut asm, &mut s)?;
    }
    asm.finish()
}
