//! Lays a checkpoint out as a flatbuffer, front to back, without building it in memory.
//!
//! The small metadata (root table, module state, tensor tables, names, dims, optimizer state,
//! properties) is emitted forward into one owned buffer: every parent before its children, so
//! every `uoffset` points forward as flatbuffers require. Each inline tensor's `raw_data` vector
//! comes after all of that, its first data byte on a [`DATA_ALIGNMENT`] boundary of the file;
//! its bytes are never copied: the file is described as a list of [`Pieces`] (owned runs of
//! metadata, length prefixes and padding, and borrowed slices of the caller's tensors) that
//! `save` streams to disk. See docs/format.md, "The layout ortckpt writes".
//!
//! Output is deterministic: parameters, optimizer groups, parameter states, momentums and
//! properties are sorted by name (ORT sorts the same lists when it saves). A scalar field is left
//! out exactly when its bits equal the schema default, so `-0.0` is kept.

use crate::index::{Property, PropertyValue};
use crate::placement::{plan, Place, SaveOptions};
use crate::spec::{
    sorted_by_name, tensors_in_file_order, validate, CheckpointSpec, OptimizerGroupSpec, Role, TensorPayload,
    TensorSpec,
};
use crate::{Error, Result};

/// Byte alignment of every tensor's `raw_data` in files this library writes: enough for any
/// element type, so memory-mapped readers get aligned views.
pub const DATA_ALIGNMENT: usize = 16;

/// The largest buffer a flatbuffer can address with its 32-bit signed offsets.
const MAX_FLATBUFFER_BYTES: u64 = (1 << 31) - 1;

const FILE_IDENTIFIER: &[u8; 4] = b"ODTC";

/// One run of bytes of a file being written.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Piece<'a> {
    /// `owned[start..end]` of the [`Pieces`] that holds it.
    Owned { start: usize, end: usize },
    /// Bytes of a caller's tensor, written as they are.
    Borrowed(&'a [u8]),
}

/// A file as a sequence of pieces: what the writer produces and `save` streams out.
#[derive(Debug, Default)]
pub(crate) struct Pieces<'a> {
    owned: Vec<u8>,
    list: Vec<Piece<'a>>,
    len: u64,
}

impl<'a> Pieces<'a> {
    /// Total length of the file in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces in file order, as byte slices.
    pub(crate) fn slices(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.list.iter().map(|p| match *p {
            Piece::Owned { start, end } => &self.owned[start..end],
            Piece::Borrowed(b) => b,
        })
    }

    fn push_owned(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let start = self.owned.len();
        self.owned.extend_from_slice(bytes);
        let end = self.owned.len();
        self.len += bytes.len() as u64;
        // Consecutive owned runs become one piece (metadata + first prefix, padding + prefix).
        if let Some(Piece::Owned { end: last_end, .. }) = self.list.last_mut() {
            if *last_end == start {
                *last_end = end;
                return;
            }
        }
        self.list.push(Piece::Owned { start, end });
    }

    fn push_zeros(&mut self, count: usize) {
        const ZEROS: [u8; DATA_ALIGNMENT] = [0; DATA_ALIGNMENT];
        debug_assert!(count < DATA_ALIGNMENT);
        self.push_owned(&ZEROS[..count.min(DATA_ALIGNMENT)]);
    }

    fn push_borrowed(&mut self, bytes: &'a [u8]) {
        if !bytes.is_empty() {
            self.len += bytes.len() as u64;
            self.list.push(Piece::Borrowed(bytes));
        }
    }

    /// The whole file in one buffer (copies every tensor).
    pub(crate) fn concat(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        for s in self.slices() {
            out.extend_from_slice(s);
        }
        out
    }
}

/// Both files of a save, laid out: the checkpoint, and the external data file (empty when the
/// plan put nothing there).
#[derive(Debug)]
pub(crate) struct FileLayout<'a> {
    pub checkpoint: Pieces<'a>,
    pub external: Pieces<'a>,
}

/// Validates `spec`, places its tensors for `options` and lays out both files.
pub(crate) fn plan_and_layout<'a>(
    spec: &CheckpointSpec<'a>,
    options: &SaveOptions,
) -> Result<FileLayout<'a>> {
    let tensors = tensors_in_file_order(spec);
    validate(spec, &tensors)?;
    let plan = plan(&tensors, spec.is_nominal, options);
    if spec.version < 2 && plan.has_external() {
        return Err(Error::InvalidSpec {
            detail: format!(
                "format version {} (ONNX Runtime 1.16-1.17) cannot hold external data, and these tensors \
                 exceed the external data threshold; write version 2, or raise the threshold if the \
                 data fit in 2 GiB",
                spec.version
            ),
        });
    }
    let mut external = Pieces::default();
    for ((_, t), place) in tensors.iter().zip(&plan.places) {
        if let (Place::External { offset }, TensorPayload::Bytes(bytes)) = (place, &t.data) {
            let pad = offset.checked_sub(external.len()).ok_or_else(|| Error::Internal {
                detail: format!("external offsets out of order at tensor {:?}", t.name),
            })?;
            external.push_zeros(pad as usize);
            external.push_borrowed(bytes);
        }
    }
    if external.len() != plan.external_len {
        return Err(Error::Internal { detail: "external data length disagrees with the placement".into() });
    }
    let places: Vec<(&TensorSpec<'a>, Place)> =
        tensors.iter().map(|(_, t)| *t).zip(plan.places.iter().copied()).collect();
    let estimate = metadata_estimate(spec, &tensors);
    let checkpoint = layout_checkpoint(spec, &places, plan.has_external(), estimate)?;
    Ok(FileLayout { checkpoint, external })
}

/// Serializes `spec` to checkpoint bytes with every tensor inline.
pub fn serialize_checkpoint(spec: &CheckpointSpec<'_>) -> Result<Vec<u8>> {
    let layout =
        plan_and_layout(spec, &SaveOptions { external_data_threshold: None, external_momentums: false })?;
    Ok(layout.checkpoint.concat())
}

// ------------------------------------------------------------------------------------------------
// The metadata buffer
// ------------------------------------------------------------------------------------------------

/// A scalar or offset field of a table, by vtable slot (field id).
#[derive(Clone, Copy)]
enum Field {
    /// A `uoffset` to a child emitted later; its position is returned for patching.
    Ref(u16),
    Bool(u16, bool),
    I32(u16, i32),
    I64(u16, i64),
    F32(u16, f32),
}

impl Field {
    fn slot(self) -> u16 {
        match self {
            Field::Ref(s) | Field::Bool(s, _) | Field::I32(s, _) | Field::I64(s, _) | Field::F32(s, _) => s,
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
fn unless_default<T: PartialEq>(field: Field, value: T, default: T) -> Option<Field> {
    (value != default).then_some(field)
}

fn f32_unless_zero(slot: u16, value: f32) -> Option<Field> {
    unless_default(Field::F32(slot, value), value.to_bits(), 0)
}

/// Field slots (ids) of the schema's tables (`schema/*.fbs`).
mod slot {
    pub const CHECKPOINT_VERSION: u16 = 0;
    pub const CHECKPOINT_MODULE_STATE: u16 = 1;
    pub const CHECKPOINT_OPTIMIZER_GROUPS: u16 = 2;
    pub const CHECKPOINT_PROPERTY_BAG: u16 = 3;
    pub const MODULE_TRAINABLE: u16 = 0;
    pub const MODULE_FROZEN: u16 = 1;
    pub const MODULE_IS_NOMINAL: u16 = 2;
    pub const MODULE_HAS_EXTERNAL: u16 = 3;
    pub const TENSOR_NAME: u16 = 0;
    pub const TENSOR_DOC_STRING: u16 = 1;
    pub const TENSOR_DIMS: u16 = 2;
    pub const TENSOR_DATA_TYPE: u16 = 3;
    pub const TENSOR_RAW_DATA: u16 = 4;
    pub const TENSOR_STRING_DATA: u16 = 5;
    pub const TENSOR_EXTERNAL_OFFSET: u16 = 6;
    pub const GROUP_NAME: u16 = 0;
    pub const GROUP_STEP: u16 = 1;
    pub const GROUP_LR: u16 = 2;
    pub const GROUP_STATES: u16 = 3;
    pub const STATE_PARAM_NAME: u16 = 0;
    pub const STATE_MOMENTUMS: u16 = 1;
    pub const BAG_INTS: u16 = 0;
    pub const BAG_FLOATS: u16 = 1;
    pub const BAG_STRINGS: u16 = 2;
    pub const PROPERTY_NAME: u16 = 0;
    pub const PROPERTY_VALUE: u16 = 1;
}

/// The most fields any table of the schema has (Tensor: 7).
const MAX_SLOTS: usize = 7;

/// A vtable's u16 entries (size, table size, field offsets), zero-padded to a fixed length.
type VTable = [u16; 2 + MAX_SLOTS];

/// Positions of a table's `Ref` fields, by slot.
struct Refs([usize; MAX_SLOTS]);

impl Refs {
    fn at(&self, slot: u16) -> usize {
        self.0[slot as usize]
    }
}

/// The metadata part of the file, emitted front to back.
struct Meta {
    buf: Vec<u8>,
    /// Vtables already written (content, position), so tables of one shape share one vtable.
    /// A checkpoint has a handful of table shapes, so a linear search beats hashing.
    vtables: Vec<(VTable, usize)>,
    /// Positions of the non-empty raw_data `uoffset`s, in tail order: resolved once the metadata
    /// is complete and the data tail can be placed.
    raw: Vec<usize>,
}

impl Meta {
    fn pos(&self) -> usize {
        self.buf.len()
    }

    /// Pads with zeros until `(pos + skew) % align == 0`.
    fn align(&mut self, align: usize, skew: usize) {
        while (self.buf.len() + skew) % align != 0 {
            self.buf.push(0);
        }
    }

    fn u32_at(&mut self, at: usize, value: u32) {
        self.buf[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Points the `uoffset` at `at` to `target`, which must lie after it.
    fn patch(&mut self, at: usize, target: usize) -> Result<()> {
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
    fn table(&mut self, fields: &[Option<Field>]) -> Result<(usize, Refs)> {
        let mut present: Vec<Field> = fields.iter().flatten().copied().collect();
        // Largest first: 8-byte fields right after the 4-byte soffset, on an 8-byte boundary.
        present.sort_by_key(|f| std::cmp::Reverse(f.size()));
        let slots = present.iter().map(|f| f.slot() as usize + 1).max().unwrap_or(0);
        let mut offsets = [0u16; MAX_SLOTS];
        let mut table_size = 4usize;
        for f in &present {
            offsets[f.slot() as usize] = table_size as u16;
            table_size += f.size();
        }
        let mut vtable: VTable = [0; 2 + MAX_SLOTS];
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
        let mut refs = Refs([0; MAX_SLOTS]);
        for f in &present {
            if let Field::Ref(s) = f {
                refs.0[*s as usize] = self.pos();
            }
            let (bytes, n) = f.bytes();
            self.buf.extend_from_slice(&bytes[..n]);
        }
        Ok((table, refs))
    }

    /// Writes a NUL-terminated string and points `at` to it.
    fn string(&mut self, at: usize, s: &str) -> Result<()> {
        self.align(4, 0);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(s.len())?.to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.patch(at, pos)
    }

    /// Writes a vector of `n` `uoffset`s (to be patched) and points `at` to it; returns the
    /// position of its first element.
    fn offset_vector(&mut self, at: usize, n: usize) -> Result<usize> {
        self.align(4, 0);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(n)?.to_le_bytes());
        self.buf.resize(self.buf.len() + 4 * n, 0);
        self.patch(at, pos)?;
        Ok(pos + 4)
    }

    /// Writes an `[int64]` vector with 8-byte aligned elements and points `at` to it.
    fn i64_vector(&mut self, at: usize, values: &[i64]) -> Result<()> {
        self.align(8, 4);
        let pos = self.pos();
        self.buf.extend_from_slice(&len_u32(values.len())?.to_le_bytes());
        for v in values {
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.patch(at, pos)
    }
}

fn len_u32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooLarge { bytes: n as u64 })
}

// ------------------------------------------------------------------------------------------------
// The checkpoint's tables
// ------------------------------------------------------------------------------------------------

/// Lays out the checkpoint file; `places` are the tensors in file order with their places.
fn layout_checkpoint<'a>(
    spec: &CheckpointSpec<'a>,
    places: &[(&TensorSpec<'a>, Place)],
    has_external: bool,
    estimate: usize,
) -> Result<Pieces<'a>> {
    let mut m = Meta { buf: Vec::with_capacity(estimate), vtables: Vec::new(), raw: Vec::new() };
    // The bytes of the inline tensors with data, in the order of `m.raw`.
    let mut data: Vec<&'a [u8]> = Vec::new();

    m.buf.extend_from_slice(&[0; 4]); // root uoffset
    m.buf.extend_from_slice(FILE_IDENTIFIER);
    let has_groups = !spec.optimizer_groups.is_empty();
    let has_properties = !spec.properties.is_empty();
    let (root_table, root_refs) = m.table(&[
        Some(Field::I32(slot::CHECKPOINT_VERSION, spec.version)),
        Some(Field::Ref(slot::CHECKPOINT_MODULE_STATE)),
        has_groups.then_some(Field::Ref(slot::CHECKPOINT_OPTIMIZER_GROUPS)),
        has_properties.then_some(Field::Ref(slot::CHECKPOINT_PROPERTY_BAG)),
    ])?;
    m.patch(0, root_table)?;

    let (ms_table, ms) = m.table(&[
        Some(Field::Ref(slot::MODULE_TRAINABLE)),
        Some(Field::Ref(slot::MODULE_FROZEN)),
        // Version 1 has no nominal flag (validate refuses nominal v1 specs).
        (spec.is_nominal && spec.version >= 2).then_some(Field::Bool(slot::MODULE_IS_NOMINAL, true)),
        has_external.then_some(Field::Bool(slot::MODULE_HAS_EXTERNAL, true)),
    ])?;
    m.patch(root_refs.at(slot::CHECKPOINT_MODULE_STATE), ms_table)?;
    let mut next = places.iter();
    let n_trainable = spec.trainable.len();
    let trainable_at = m.offset_vector(ms.at(slot::MODULE_TRAINABLE), n_trainable)?;
    let frozen_at = m.offset_vector(ms.at(slot::MODULE_FROZEN), spec.frozen.len())?;
    tensor_tables(&mut m, trainable_at, n_trainable, &mut next, &mut data)?;
    tensor_tables(&mut m, frozen_at, spec.frozen.len(), &mut next, &mut data)?;

    if has_groups {
        optimizer_groups(
            &mut m,
            root_refs.at(slot::CHECKPOINT_OPTIMIZER_GROUPS),
            &spec.optimizer_groups,
            &mut next,
            &mut data,
        )?;
    }
    if has_properties {
        property_bag(&mut m, root_refs.at(slot::CHECKPOINT_PROPERTY_BAG), &spec.properties)?;
    }
    if next.next().is_some() {
        return Err(Error::Internal { detail: "placement lists more tensors than the spec".into() });
    }
    tail(m, data)
}

/// Places every inline `raw_data` vector after the metadata and resolves the offsets to them.
fn tail<'a>(mut m: Meta, data: Vec<&'a [u8]>) -> Result<Pieces<'a>> {
    let mut cursor = m.pos() as u64;
    let mut prefixes = Vec::with_capacity(data.len());
    for bytes in &data {
        // The 4-byte length prefix ends where the data start, on a DATA_ALIGNMENT boundary.
        let start = (cursor + 4).next_multiple_of(DATA_ALIGNMENT as u64);
        prefixes.push(start - 4);
        cursor = start + bytes.len() as u64;
    }
    if cursor > MAX_FLATBUFFER_BYTES {
        return Err(Error::TooLarge { bytes: cursor });
    }
    let raw = std::mem::take(&mut m.raw);
    if raw.len() != prefixes.len() {
        return Err(Error::Internal { detail: "raw_data offsets and tensor data disagree".into() });
    }
    for (at, prefix) in raw.iter().zip(&prefixes) {
        m.patch(*at, *prefix as usize)?;
    }
    let mut pieces = Pieces::default();
    pieces.push_owned(&m.buf);
    for (bytes, prefix) in data.iter().zip(prefixes) {
        let pad = prefix - pieces.len();
        pieces.push_zeros(pad as usize);
        pieces.push_owned(&len_u32(bytes.len())?.to_le_bytes());
        pieces.push_borrowed(bytes);
    }
    Ok(pieces)
}

/// Writes the tables of the next `n` tensors of `next` and points the `n` offsets at `first` to
/// them.
fn tensor_tables<'s, 'a: 's>(
    m: &mut Meta,
    first: usize,
    n: usize,
    next: &mut impl Iterator<Item = &'s (&'s TensorSpec<'a>, Place)>,
    data: &mut Vec<&'a [u8]>,
) -> Result<()> {
    for i in 0..n {
        let (t, place) = next.next().ok_or_else(|| Error::Internal {
            detail: "placement lists fewer tensors than the spec".into(),
        })?;
        let table = tensor(m, t, *place, data)?;
        m.patch(first + 4 * i, table)?;
    }
    Ok(())
}

/// Writes one Tensor table and its name, doc string, dims and strings; returns its position.
fn tensor<'a>(m: &mut Meta, t: &TensorSpec<'a>, place: Place, data: &mut Vec<&'a [u8]>) -> Result<usize> {
    let external = match place {
        Place::External { offset } => Some(
            i64::try_from(offset)
                .map_err(|_| Error::Internal { detail: "external offset overflow".into() })?,
        ),
        Place::Inline => None,
    };
    let (raw, strings) = match (&t.data, external) {
        // External tensors have no raw_data field at all, as ORT writes them.
        (TensorPayload::Bytes(_), Some(_)) => (false, false),
        (TensorPayload::Bytes(_), None) => (true, false),
        (TensorPayload::Strings(_), _) => (false, true),
        // ORT requires raw_data to be present (if empty) on every numeric tensor, nominal ones too.
        (TensorPayload::Nominal, _) => (true, false),
    };
    let (table, refs) = m.table(&[
        Some(Field::Ref(slot::TENSOR_NAME)),
        t.doc_string.as_ref().map(|_| Field::Ref(slot::TENSOR_DOC_STRING)),
        Some(Field::Ref(slot::TENSOR_DIMS)),
        unless_default(Field::I32(slot::TENSOR_DATA_TYPE, t.data_type.code()), t.data_type.code(), 0),
        raw.then_some(Field::Ref(slot::TENSOR_RAW_DATA)),
        strings.then_some(Field::Ref(slot::TENSOR_STRING_DATA)),
        external.map(|o| Field::I64(slot::TENSOR_EXTERNAL_OFFSET, o)),
    ])?;
    m.string(refs.at(slot::TENSOR_NAME), &t.name)?;
    if let Some(doc) = &t.doc_string {
        m.string(refs.at(slot::TENSOR_DOC_STRING), doc)?;
    }
    // Readers tell a nominal tensor (no values) from a zero-element one (no values either) by
    // its element count, so a nominal tensor never gets a zero-element shape: it is written
    // without dims then, as ORT writes every nominal tensor.
    let nominal = matches!(t.data, TensorPayload::Nominal);
    let dims: &[i64] = if nominal && t.dims.contains(&0) { &[] } else { &t.dims };
    m.i64_vector(refs.at(slot::TENSOR_DIMS), dims)?;
    match &t.data {
        TensorPayload::Strings(values) => {
            let first = m.offset_vector(refs.at(slot::TENSOR_STRING_DATA), values.len())?;
            for (i, s) in values.iter().enumerate() {
                m.string(first + 4 * i, s)?;
            }
        }
        TensorPayload::Bytes(bytes) if raw && !bytes.is_empty() => {
            m.raw.push(refs.at(slot::TENSOR_RAW_DATA));
            data.push(*bytes);
        }
        // An empty raw_data vector needs no alignment and stays with the metadata.
        _ if raw => {
            m.align(4, 0);
            let pos = m.pos();
            m.buf.extend_from_slice(&0u32.to_le_bytes());
            m.patch(refs.at(slot::TENSOR_RAW_DATA), pos)?;
        }
        _ => {}
    }
    Ok(table)
}

fn optimizer_groups<'s, 'a: 's>(
    m: &mut Meta,
    at: usize,
    groups: &[OptimizerGroupSpec<'a>],
    next: &mut impl Iterator<Item = &'s (&'s TensorSpec<'a>, Place)>,
    data: &mut Vec<&'a [u8]>,
) -> Result<()> {
    let sorted = sorted_by_name(groups, |g| &g.name);
    let first = m.offset_vector(at, sorted.len())?;
    for (i, g) in sorted.into_iter().enumerate() {
        let (table, refs) = m.table(&[
            Some(Field::Ref(slot::GROUP_NAME)),
            unless_default(Field::I64(slot::GROUP_STEP, g.step), g.step, 0),
            f32_unless_zero(slot::GROUP_LR, g.initial_learning_rate),
            Some(Field::Ref(slot::GROUP_STATES)),
        ])?;
        m.patch(first + 4 * i, table)?;
        m.string(refs.at(slot::GROUP_NAME), &g.name)?;
        let states = sorted_by_name(&g.states, |s| &s.param_name);
        let states_at = m.offset_vector(refs.at(slot::GROUP_STATES), states.len())?;
        for (j, s) in states.into_iter().enumerate() {
            let (table, refs) = m.table(&[
                Some(Field::Ref(slot::STATE_PARAM_NAME)),
                Some(Field::Ref(slot::STATE_MOMENTUMS)),
            ])?;
            m.patch(states_at + 4 * j, table)?;
            m.string(refs.at(slot::STATE_PARAM_NAME), &s.param_name)?;
            let momentums_at = m.offset_vector(refs.at(slot::STATE_MOMENTUMS), s.momentums.len())?;
            tensor_tables(m, momentums_at, s.momentums.len(), next, data)?;
        }
    }
    Ok(())
}

/// The property bag: every property in the list of its type, sorted by name; all three lists are
/// written, empty ones too, as ORT does.
fn property_bag(m: &mut Meta, at: usize, properties: &[Property]) -> Result<()> {
    let sorted = sorted_by_name(properties, |p| &p.name);
    let (table, refs) = m.table(&[
        Some(Field::Ref(slot::BAG_INTS)),
        Some(Field::Ref(slot::BAG_FLOATS)),
        Some(Field::Ref(slot::BAG_STRINGS)),
    ])?;
    m.patch(at, table)?;
    let of_kind = |want: u8| {
        sorted
            .iter()
            .copied()
            .filter(move |p| match p.value {
                PropertyValue::Int(_) => want == 0,
                PropertyValue::Float(_) => want == 1,
                PropertyValue::Str(_) => want == 2,
            })
            .collect::<Vec<_>>()
    };
    for (kind, bag_slot) in [(0u8, slot::BAG_INTS), (1, slot::BAG_FLOATS), (2, slot::BAG_STRINGS)] {
        let list = of_kind(kind);
        let first = m.offset_vector(refs.at(bag_slot), list.len())?;
        for (i, p) in list.into_iter().enumerate() {
            let value = match p.value {
                PropertyValue::Int(v) => unless_default(Field::I64(slot::PROPERTY_VALUE, v), v, 0),
                PropertyValue::Float(v) => f32_unless_zero(slot::PROPERTY_VALUE, v),
                PropertyValue::Str(_) => Some(Field::Ref(slot::PROPERTY_VALUE)),
            };
            let (table, refs) = m.table(&[Some(Field::Ref(slot::PROPERTY_NAME)), value])?;
            m.patch(first + 4 * i, table)?;
            m.string(refs.at(slot::PROPERTY_NAME), &p.name)?;
            if let PropertyValue::Str(s) = &p.value {
                m.string(refs.at(slot::PROPERTY_VALUE), s)?;
            }
        }
    }
    Ok(())
}

/// A generous guess of the metadata size, so the buffer rarely grows.
fn metadata_estimate(spec: &CheckpointSpec<'_>, tensors: &[(Role, &TensorSpec<'_>)]) -> usize {
    let per_tensor: usize = tensors
        .iter()
        .map(|(_, t)| {
            let strings = match &t.data {
                TensorPayload::Strings(v) => v.iter().map(|s| s.len() + 8).sum(),
                _ => 0,
            };
            48 + t.name.len() + 8 * t.dims.len() + t.doc_string.as_ref().map_or(0, |d| d.len() + 8) + strings
        })
        .sum();
    let properties: usize = spec
        .properties
        .iter()
        .map(|p| {
            24 + p.name.len()
                + match &p.value {
                    PropertyValue::Str(s) => s.len() + 8,
                    _ => 0,
                }
        })
        .sum();
    let states: usize =
        spec.optimizer_groups.iter().flat_map(|g| &g.states).map(|s| 24 + s.param_name.len()).sum();
    (256 + per_tensor + properties + states).min(1 << 30)
}
