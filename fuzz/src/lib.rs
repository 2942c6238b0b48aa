//! Oracles shared by the fuzz targets in `fuzz_targets/`.
//!
//! * [`check_bytes`]: `index_checkpoint` on arbitrary bytes, agreement with the flatbuffers
//!   crate's own verifier and accessors whenever those accept the bytes, the invariants of what it
//!   returns, `check_external_ranges`, and a write → read round trip of whatever it accepted.
//! * [`check_spec`]: `serialize_checkpoint` on arbitrary specs ([`gen::FuzzSpec`]); whatever it
//!   writes must read back with the same contents, and it must accept exactly the valid specs.
//! * [`legacy::check_legacy`]: the ORT 1.15 folder decoder on arbitrary `.pbseq` bytes.
//!
//! Issues these oracles found, all fixed in ortckpt-core since (tests/oracles.rs keeps repros):
//! empty tensors of a nominal checkpoint read back as nominal (momentums too, which the writer then
//! refused); `check_external_ranges` missed an overlap when an empty external tensor sorted between
//! the two; `-0.0` learning rates and float properties read back as `+0.0`. And one in this
//! harness: the spec generator's byte size plus a few overflowed near `u64::MAX`.

use ortckpt_core::test_support::oracle::{reference_index, same_result};
use ortckpt_core::test_support::spec_from_index;
use ortckpt_core::{
    check_external_ranges, index_checkpoint, index_checkpoint_raw, serialize_checkpoint, CheckpointIndex,
    CheckpointSpec, DataType, Error, LengthCheck, ParamKind, Property, PropertyValue, Storage, TensorPayload,
    TensorRef, TensorSpec, DATA_ALIGNMENT,
};

pub mod craft;
pub mod gen;
pub mod legacy;

/// External tensors of a fuzzed input are re-serialized inline with zero bytes; beyond this many
/// bytes in total the round trip is skipped instead (an external range can claim up to 2^63 bytes).
const MAX_EXTERNAL_ZEROS: u64 = 1 << 16;

// ---------------------------------------------------------------------------------------------
// Contents in a canonical, comparable form: every list sorted by name, floats as bits.

#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bytes(Vec<u8>),
    Strings(Vec<String>),
    Nominal,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub code: i32,
    pub dims: Vec<i64>,
    pub data: Data,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: String,
    pub step: i64,
    pub lr_bits: u32,
    pub states: Vec<(String, Vec<Tensor>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    FloatBits(u32),
    Str(String),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Contents {
    pub is_nominal: bool,
    pub trainable: Vec<Tensor>,
    pub frozen: Vec<Tensor>,
    pub groups: Vec<Group>,
    pub properties: Vec<(String, Value)>,
}

fn sorted<T>(mut v: Vec<T>, key: impl Fn(&T) -> &str) -> Vec<T> {
    v.sort_by(|a, b| key(a).cmp(key(b)));
    v
}

fn value_of(p: &PropertyValue) -> Value {
    match p {
        PropertyValue::Int(i) => Value::Int(*i),
        PropertyValue::Float(f) => Value::FloatBits(f.to_bits()),
        PropertyValue::Str(s) => Value::Str(s.clone()),
    }
}

fn properties_of(props: &[Property]) -> Vec<(String, Value)> {
    sorted(props.iter().map(|p| (p.name.clone(), value_of(&p.value))).collect(), |p| &p.0)
}

fn spec_tensors(ts: &[TensorSpec<'_>]) -> Vec<Tensor> {
    let out = ts
        .iter()
        .map(|t| Tensor {
            name: t.name.clone(),
            code: t.data_type.code(),
            dims: t.dims.clone(),
            data: match &t.data {
                TensorPayload::Bytes(b) => Data::Bytes(b.to_vec()),
                TensorPayload::Strings(s) => Data::Strings(s.clone()),
                TensorPayload::Nominal => Data::Nominal,
            },
        })
        .collect();
    sorted(out, |t| &t.name)
}

/// What `spec` should read back as once written.
pub fn contents_of_spec(spec: &CheckpointSpec<'_>) -> Contents {
    let groups = spec
        .optimizer_groups
        .iter()
        .map(|g| Group {
            name: g.name.clone(),
            step: g.step,
            lr_bits: g.initial_learning_rate.to_bits(),
            states: sorted(
                g.states.iter().map(|s| (s.param_name.clone(), spec_tensors(&s.momentums))).collect(),
                |s| &s.0,
            ),
        })
        .collect();
    Contents {
        is_nominal: spec.is_nominal,
        trainable: spec_tensors(&spec.trainable),
        frozen: spec_tensors(&spec.frozen),
        groups: sorted(groups, |g| &g.name),
        properties: properties_of(&spec.properties),
    }
}

fn index_tensors<'a>(ts: impl Iterator<Item = TensorRef<'a>>, buf: &[u8]) -> Vec<Tensor> {
    let out = ts
        .map(|t| Tensor {
            name: t.name.to_owned(),
            code: t.data_type.code(),
            dims: t.dims.to_vec(),
            data: match t.storage {
                Storage::Inline { offset, len, .. } => Data::Bytes(buf[offset..offset + len].to_vec()),
                Storage::Strings(s) => Data::Strings(s.to_vec()),
                Storage::Nominal => Data::Nominal,
                Storage::External { .. } => {
                    panic!("tensor {:?}: serialize_checkpoint wrote external data", t.name)
                }
            },
        })
        .collect();
    sorted(out, |t| &t.name)
}

/// The contents of `index`, an index of `buf` that [`serialize_checkpoint`] wrote (all inline).
pub fn contents_of_index(index: &CheckpointIndex, buf: &[u8]) -> Contents {
    let groups = index
        .optimizer_groups
        .iter()
        .map(|g| Group {
            name: g.name.clone(),
            step: g.step,
            lr_bits: g.initial_learning_rate.to_bits(),
            states: sorted(
                g.states
                    .iter()
                    .map(|s| (s.param_name.clone(), index_tensors(index.momentums(s), buf)))
                    .collect(),
                |s| &s.0,
            ),
        })
        .collect();
    Contents {
        is_nominal: index.is_nominal,
        trainable: index_tensors(index.trainable(), buf),
        frozen: index_tensors(index.frozen(), buf),
        groups: sorted(groups, |g| &g.name),
        properties: properties_of(&index.properties),
    }
}

/// What the writer documents it changes: a nominal tensor whose dims have zero elements is
/// written without dims (readers tell nominal tensors from zero-element ones by element count).
pub fn as_written(mut c: Contents) -> Contents {
    for t in c.trainable.iter_mut().chain(c.frozen.iter_mut()) {
        if t.data == Data::Nominal && t.dims.contains(&0) {
            t.dims.clear();
        }
    }
    c
}

/// Panics unless `bytes`, written from `spec`, reads back with the contents of `spec`; returns the
/// index of `bytes`.
pub fn check_written(spec: &CheckpointSpec<'_>, bytes: &[u8]) -> CheckpointIndex {
    let index = match index_checkpoint(bytes) {
        Ok(index) => index,
        Err(e) => panic!("index_checkpoint refused what serialize_checkpoint wrote: {e}"),
    };
    assert_eq!(index.version, spec.version);
    assert!(!index.has_external_data, "serialize_checkpoint set has_external_data");
    check_index_invariants(&index, bytes);
    for t in index.tensors() {
        if let Storage::Inline { offset, len, .. } = t.storage {
            if len > 0 {
                assert_eq!(offset % DATA_ALIGNMENT, 0, "tensor {:?} is not aligned", t.name);
            }
        }
    }
    let expected = as_written(contents_of_spec(spec));
    let found = contents_of_index(&index, bytes);
    assert_eq!(expected, found, "serialize_checkpoint -> index_checkpoint changed the contents");
    index
}

// ---------------------------------------------------------------------------------------------
// Invariants of an index of untrusted bytes.

/// Element count of `dims`, `None` when negative or overflowing (then the reader must refuse).
pub fn element_count(dims: &[i64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))
}

pub fn byte_size(data_type: DataType, dims: &[i64]) -> Option<u64> {
    element_count(dims)?.checked_mul(data_type.element_size().unwrap_or(0))
}

/// What the reader promises about every tensor it returns.
pub fn check_index_invariants(index: &CheckpointIndex, buf: &[u8]) {
    assert!(index.version == 1 || index.version == 2, "version {}", index.version);
    for t in index.tensors() {
        match t.storage {
            Storage::Inline { offset, len, .. } => {
                let end = offset.checked_add(len).expect("inline offset + len overflows");
                assert!(end <= buf.len(), "tensor {:?}: inline {offset}+{len} > {}", t.name, buf.len());
                assert!(t.data_type.element_size().is_some(), "string tensor {:?} stored inline", t.name);
                assert_eq!(byte_size(t.data_type, t.dims), Some(len as u64), "tensor {:?} size", t.name);
            }
            Storage::External { offset, len } => {
                assert!(index.has_external_data, "external tensor {:?} without the flag", t.name);
                assert!(t.data_type.element_size().is_some(), "string tensor {:?} stored externally", t.name);
                assert_eq!(byte_size(t.data_type, t.dims), Some(len), "tensor {:?} size", t.name);
                assert!(offset.checked_add(len).is_some_and(|e| e <= i64::MAX as u64));
            }
            Storage::Strings(values) => {
                assert!(t.data_type.element_size().is_none(), "numeric tensor {:?} has strings", t.name);
                assert_eq!(element_count(t.dims), Some(values.len() as u64), "tensor {:?} count", t.name);
            }
            Storage::Nominal => {
                assert!(index.is_nominal, "nominal tensor {:?} in a non-nominal checkpoint", t.name);
                let count = element_count(t.dims);
                assert!(count.is_some_and(|n| n > 0), "nominal tensor {:?} has dims {:?}", t.name, t.dims);
            }
        }
    }
    // Parameters come first, trainable then frozen; momentums are the ranges of the states.
    let (trainable, parameters) = (index.trainable_count(), index.parameter_count());
    assert!(trainable <= parameters && parameters <= index.tensor_count());
    assert_eq!(index.trainable().len() + index.frozen().len(), parameters);
    let mut next = parameters;
    for s in index.optimizer_groups.iter().flat_map(|g| &g.states) {
        assert_eq!(s.momentums.start, next, "momentums of {:?} are not in file order", s.param_name);
        next = s.momentums.end;
        for m in index.momentums(s) {
            assert!(m.storage != Storage::Nominal, "momentum {:?} of {:?} is nominal", m.name, s.param_name);
        }
    }
    assert_eq!(next, index.tensor_count(), "tensors beyond the parameters and momentums");
    // Parameter names: sorted, unique, and found by name.
    let by_name = index.parameters_by_name();
    assert_eq!(by_name.len(), parameters);
    let name = |p: u32| index.tensor(p as usize).expect("a parameter position is out of range").name;
    assert!(by_name.windows(2).all(|w| name(w[0]) < name(w[1])), "parameters_by_name is not sorted");
    for position in 0..parameters {
        let kind = if position < trainable { ParamKind::Trainable } else { ParamKind::Frozen };
        assert_eq!(index.param_kind(position), Some(kind));
        let t = index.tensor(position).unwrap();
        assert_eq!(index.find_parameter(t.name), Some(position));
    }
    assert_eq!(index.param_kind(parameters), None);
    assert!(index.tensor(index.tensor_count()).is_none());
}

/// External ranges `(offset, len)` of `index`.
fn external_ranges(index: &CheckpointIndex) -> Vec<(u64, u64)> {
    index
        .tensors()
        .filter_map(|t| match t.storage {
            Storage::External { offset, len } => Some((offset, len)),
            _ => None,
        })
        .collect()
}

/// Whether two non-empty external ranges overlap (a reference for `check_external_ranges`).
fn any_overlap(ranges: &[(u64, u64)]) -> bool {
    let mut r: Vec<(u64, u64)> = ranges.iter().copied().filter(|&(_, len)| len > 0).collect();
    r.sort_unstable();
    let mut end = 0u64;
    for (i, &(offset, len)) in r.iter().enumerate() {
        if i > 0 && offset < end {
            return true;
        }
        end = end.max(offset + len);
    }
    false
}

/// `check_external_ranges` at a few file lengths, against a reference.
pub fn check_external(index: &CheckpointIndex, input_len: usize) {
    let ranges = external_ranges(index);
    let max_end = ranges.iter().map(|&(o, l)| o + l).max().unwrap_or(0);
    let overlap = any_overlap(&ranges);
    let lengths = [0, input_len as u64, max_end.saturating_sub(1), max_end, u64::MAX];
    for file_len in lengths {
        let result = check_external_ranges(index, file_len);
        let out_of_range = ranges.iter().any(|&(o, l)| o + l > file_len);
        match &result {
            Ok(()) => {
                assert!(!out_of_range, "check_external_ranges({file_len}) accepted a range past the end");
                assert!(!overlap, "check_external_ranges({file_len}) accepted overlapping ranges {ranges:?}");
            }
            Err(Error::ExternalOutOfRange { offset, len, .. }) => {
                assert!(out_of_range, "check_external_ranges({file_len}) refused ranges that fit");
                assert!(offset + len > file_len);
            }
            Err(Error::ExternalOverlap { .. }) => {
                assert!(!out_of_range, "overlap reported before out-of-range");
                assert!(overlap, "check_external_ranges reported an overlap that is not there: {ranges:?}");
            }
            Err(e) => panic!("check_external_ranges({file_len}): unexpected error {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Target (a): arbitrary bytes.

/// Indexes `data` with [`LengthCheck::OnFirstUse`], then compares every deferred length.
fn index_with_lengths_on_first_use(data: &[u8]) -> ortckpt_core::Result<CheckpointIndex> {
    // SAFETY: `data` is borrowed for the whole call.
    let index = unsafe { index_checkpoint_raw(data.as_ptr(), data.len(), LengthCheck::OnFirstUse) }?;
    for position in 0..index.tensor_count() {
        index.check_inline_length(position, data)?;
    }
    Ok(index)
}

/// Target (a): index arbitrary bytes; when accepted, check the index and round-trip it.
pub fn check_bytes(data: &[u8]) {
    let found = index_checkpoint(data);
    // Whenever the flatbuffers crate's own verifier accepts the bytes, its accessors fed to the
    // same rules give exactly what the hand-written parser gives.
    if let Some(reference) = reference_index(data) {
        assert!(same_result(&found, &reference), "reader: {found:?}\nflatbuffers oracle: {reference:?}");
    }
    // Lengths compared on first use (as for a mapped file) refuse exactly what eager indexing
    // refuses, and otherwise give the same index.
    let deferred = index_with_lengths_on_first_use(data);
    match (&found, &deferred) {
        (Ok(a), Ok(b)) => assert_eq!(
            format!("{a:?}"),
            format!("{b:?}").replace("InlineUnchecked", "Inline"),
            "deferred length checks changed the index"
        ),
        (Err(_), Err(_)) => {}
        _ => panic!("eager: {found:?}\ndeferred then checked: {deferred:?}"),
    }
    let index = match found {
        Ok(index) => index,
        Err(e) => {
            // Messages and kinds of errors from untrusted input must not panic either.
            let _ = (e.to_string(), e.kind());
            return;
        }
    };
    check_index_invariants(&index, data);
    check_external(&index, data.len());

    let external_total = external_ranges(&index).iter().fold(0u64, |n, &(_, l)| n.saturating_add(l));
    if external_total > MAX_EXTERNAL_ZEROS {
        return;
    }
    let max_len = external_ranges(&index).iter().map(|r| r.1).max().unwrap_or(0);
    let zeros = vec![0u8; max_len as usize];
    let mut spec = spec_from_index(&index, data, &|_, len| &zeros[..len as usize]);
    // A version-1 file carrying the nominal flag (a field ORT 1.16-1.17 never wrote) is read as
    // ORT >= 1.18 reads it, nominal; the writer writes nominal state only as version 2 (the one
    // documented difference between what is read and what can be written).
    if spec.is_nominal && spec.version == 1 {
        spec.version = 2;
    }
    let written = match serialize_checkpoint(&spec) {
        Ok(bytes) => bytes,
        // The reader and the writer apply the same rules.
        Err(e) => panic!("serialize_checkpoint refused an index it can read: {e}"),
    };
    let reread = check_written(&spec, &written);

    // Writing is deterministic and sorted, so writing what was read back gives the same bytes
    // (unless the contents changed on the way, as `check_written` allows in a few documented ways).
    let spec2 = spec_from_index(&reread, &written, &|_, _| unreachable!("written inline"));
    if contents_of_spec(&spec2) == contents_of_spec(&spec) {
        let again = serialize_checkpoint(&spec2).expect("serialize_checkpoint refused its own output");
        assert!(again == written, "serialize_checkpoint is not a fixpoint on its own output");
    }
}

// ---------------------------------------------------------------------------------------------
// Target (b): arbitrary specs.

/// Why a spec is invalid according to the documented rules, or `None` when it is valid.
pub fn expected_error(spec: &CheckpointSpec<'_>) -> Option<String> {
    fn tensor(t: &TensorSpec<'_>, nominal_allowed: bool) -> Option<String> {
        let count = element_count(&t.dims);
        let bad = |why: &str| Some(format!("tensor {:?}: {why}", t.name));
        match (&t.data, t.data_type.element_size()) {
            _ if count.is_none() => bad("bad dims"),
            (TensorPayload::Nominal, _) if !nominal_allowed => bad("nominal not allowed"),
            (TensorPayload::Nominal, _) => None,
            (TensorPayload::Bytes(b), Some(_)) => match byte_size(t.data_type, &t.dims) {
                Some(n) if n == b.len() as u64 => None,
                _ => bad("byte length"),
            },
            (TensorPayload::Strings(s), None) if count == Some(s.len() as u64) => None,
            (TensorPayload::Strings(_), None) => bad("string count"),
            _ => bad("wrong storage"),
        }
    }
    fn unique<'a>(names: impl Iterator<Item = &'a str>) -> Option<String> {
        let mut seen = std::collections::HashSet::new();
        names.filter(|n| !seen.insert(*n)).map(|n| format!("duplicate {n:?}")).next()
    }
    let params = spec.trainable.iter().chain(&spec.frozen);
    if let Some(e) = params.clone().find_map(|t| tensor(t, spec.is_nominal)) {
        return Some(e);
    }
    if let Some(e) = unique(params.map(|t| t.name.as_str())) {
        return Some(e);
    }
    for g in &spec.optimizer_groups {
        for s in &g.states {
            if let Some(e) = s.momentums.iter().find_map(|m| tensor(m, false)) {
                return Some(e);
            }
            if let Some(e) = unique(s.momentums.iter().map(|m| m.name.as_str())) {
                return Some(e);
            }
        }
        if let Some(e) = unique(g.states.iter().map(|s| s.param_name.as_str())) {
            return Some(e);
        }
    }
    unique(spec.optimizer_groups.iter().map(|g| g.name.as_str()))
        .or_else(|| unique(spec.properties.iter().map(|p| p.name.as_str())))
}

/// Target (b): serialize a spec; it must succeed exactly for valid specs and read back unchanged.
pub fn check_spec(spec: &CheckpointSpec<'_>) {
    let expected = expected_error(spec);
    let bytes = match (serialize_checkpoint(spec), expected) {
        (Ok(bytes), None) => bytes,
        (Err(_), Some(_)) => return,
        (Ok(_), Some(why)) => panic!("serialize_checkpoint accepted an invalid spec ({why})"),
        (Err(e), None) => panic!("serialize_checkpoint refused a valid spec: {e}"),
    };
    let index = check_written(spec, &bytes);
    // Writing what was read back gives the same bytes (deterministic, sorted output), unless a
    // known difference changed the contents.
    let spec2 = spec_from_index(&index, &bytes, &|_, _| unreachable!("written inline"));
    if contents_of_spec(&spec2) == contents_of_spec(spec) {
        let again = serialize_checkpoint(&spec2).expect("serialize_checkpoint refused its own output");
        assert!(again == bytes, "serialize_checkpoint is not a fixpoint on its own output");
    }
}
