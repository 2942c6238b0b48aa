//! What a caller asks the writer to write: the input model of a save ([`CheckpointSpec`] and its
//! parts), its validation, and the order tensors take in the file.
//!
//! Nothing here knows about flatbuffers or files: `placement` decides where each tensor's bytes go,
//! `writer` lays the file out, `save` writes it.

use crate::index::Property;
use crate::names::ensure_unique;
use crate::shape::{byte_size, element_count};
use crate::{DataType, Error, Result};

/// The checkpoint version ORT 1.19.2 writes, and the default of [`CheckpointSpec::version`].
pub const WRITTEN_VERSION: i32 = 2;

/// Versions the writer can produce: 1 for ORT 1.16–1.17 (no `is_nominal_state`), 2 for ORT ≥ 1.18.
pub const WRITABLE_VERSIONS: [i32; 2] = [1, 2];

/// A tensor to write; `data` borrows the caller's bytes, nothing is copied before writing.
#[derive(Clone, Debug)]
pub struct TensorSpec<'a> {
    /// The tensor's name (unique among parameters, or among one parameter's momentums).
    pub name: String,
    /// Its element type.
    pub data_type: DataType,
    /// Its shape; every dim must be non-negative.
    pub dims: Vec<i64>,
    /// Its values (or none, for a nominal checkpoint's parameters).
    pub data: TensorPayload<'a>,
    /// Written to the Tensor's `doc_string` field when present (ORT's TensorProto path keeps the
    /// TensorProto's doc string there).
    pub doc_string: Option<String>,
}

/// The values of a [`TensorSpec`].
#[derive(Clone, Debug)]
pub enum TensorPayload<'a> {
    /// Little-endian element bytes, `element count × element size` long.
    Bytes(&'a [u8]),
    /// The values of a string tensor.
    Strings(Vec<String>),
    /// No values: a tensor of a nominal checkpoint.
    Nominal,
}

/// Everything a checkpoint to write holds; the writer sorts every list by name.
#[derive(Clone, Debug)]
pub struct CheckpointSpec<'a> {
    /// The format version to write: [`WRITTEN_VERSION`] (2) by default, or 1 for ORT 1.16–1.17.
    pub version: i32,
    /// A nominal checkpoint: parameters may have no values (names and data types only).
    pub is_nominal: bool,
    /// Parameters with `requires_grad`.
    pub trainable: Vec<TensorSpec<'a>>,
    /// Frozen parameters.
    pub frozen: Vec<TensorSpec<'a>>,
    /// Optimizer groups (empty: no optimizer state).
    pub optimizer_groups: Vec<OptimizerGroupSpec<'a>>,
    /// Integer, float and string properties.
    pub properties: Vec<Property>,
}

impl Default for CheckpointSpec<'_> {
    fn default() -> Self {
        CheckpointSpec {
            version: WRITTEN_VERSION,
            is_nominal: false,
            trainable: Vec::new(),
            frozen: Vec::new(),
            optimizer_groups: Vec::new(),
            properties: Vec::new(),
        }
    }
}

/// One optimizer group to write.
#[derive(Clone, Debug)]
pub struct OptimizerGroupSpec<'a> {
    /// The group's name (ORT's is `group0`).
    pub name: String,
    /// The optimizer's step count.
    pub step: i64,
    /// The learning rate the group started with.
    pub initial_learning_rate: f32,
    /// The optimizer state of each parameter of the group.
    pub states: Vec<ParameterStateSpec<'a>>,
}

/// The optimizer state of one parameter: its momentum tensors (e.g. `momentum0`, `momentum1`).
#[derive(Clone, Debug)]
pub struct ParameterStateSpec<'a> {
    /// The parameter's name.
    pub param_name: String,
    /// Its momentums, which always hold values.
    pub momentums: Vec<TensorSpec<'a>>,
}

/// Where a tensor sits in a checkpoint: the placement rule treats parameters and momentums
/// differently (ORT keeps momentums inline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Parameter,
    Momentum,
}

/// Every tensor of `spec` in the order the file lists them: sorted trainable, sorted frozen,
/// then momentums by sorted group, parameter and momentum name.
pub(crate) fn tensors_in_file_order<'s, 'a>(spec: &'s CheckpointSpec<'a>) -> Vec<(Role, &'s TensorSpec<'a>)> {
    let mut out: Vec<_> = sorted_by_name(&spec.trainable, |t| &t.name)
        .into_iter()
        .chain(sorted_by_name(&spec.frozen, |t| &t.name))
        .map(|t| (Role::Parameter, t))
        .collect();
    for g in sorted_by_name(&spec.optimizer_groups, |g| &g.name) {
        for s in sorted_by_name(&g.states, |s| &s.param_name) {
            out.extend(sorted_by_name(&s.momentums, |m| &m.name).into_iter().map(|m| (Role::Momentum, m)));
        }
    }
    out
}

/// `items` sorted by name, byte-wise (ORT sorts `std::string`s).
pub(crate) fn sorted_by_name<T>(items: &[T], name: impl Fn(&T) -> &str) -> Vec<&T> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by(|a, b| name(a).cmp(name(b)));
    sorted
}

/// Checks what ORT relies on: a version it reads, consistent dims, types and data, unique names.
/// `tensors` is [`tensors_in_file_order`] of `spec` (computed once per save: sorting 100,000
/// names is a noticeable part of a save).
pub(crate) fn validate(spec: &CheckpointSpec<'_>, tensors: &[(Role, &TensorSpec<'_>)]) -> Result<()> {
    if !WRITABLE_VERSIONS.contains(&spec.version) {
        return Err(Error::InvalidSpec {
            detail: format!(
                "cannot write checkpoint format version {}: the writable versions are 1 (ONNX Runtime \
                 1.16-1.17) and 2 (ONNX Runtime 1.18 and later)",
                spec.version
            ),
        });
    }
    if spec.is_nominal && spec.version < 2 {
        return Err(Error::InvalidSpec {
            detail: format!(
                "a nominal checkpoint cannot be written as format version {}: version 1 (ONNX Runtime \
                 1.16-1.17) has no nominal flag; write version 2 or a complete checkpoint",
                spec.version
            ),
        });
    }
    for (role, t) in tensors {
        validate_tensor(t, spec.is_nominal && *role == Role::Parameter)?;
    }
    // Sorted trainable, then sorted frozen: a name twice in one list is adjacent, and one in both
    // lists is found by walking the two in step.
    let (trainable, frozen) = tensors.split_at(spec.trainable.len().min(tensors.len()));
    let frozen = &frozen[..spec.frozen.len().min(frozen.len())];
    let duplicate = |list: &[(Role, &TensorSpec<'_>)]| {
        list.windows(2).find(|w| w[0].1.name == w[1].1.name).map(|w| w[0].1.name.clone())
    };
    if let Some(name) =
        duplicate(trainable).or_else(|| duplicate(frozen)).or_else(|| in_both(trainable, frozen))
    {
        return Err(Error::DuplicateName { kind: "parameter", name });
    }
    for g in &spec.optimizer_groups {
        for s in &g.states {
            ensure_unique("momentum", s.momentums.iter().map(|m| m.name.as_str()))?;
        }
        ensure_unique("optimizer state parameter", g.states.iter().map(|s| s.param_name.as_str()))?;
    }
    ensure_unique("optimizer group", spec.optimizer_groups.iter().map(|g| g.name.as_str()))?;
    ensure_unique("property", spec.properties.iter().map(|p| p.name.as_str()))?;
    Ok(())
}

/// A name in both of two lists sorted by name.
fn in_both(a: &[(Role, &TensorSpec<'_>)], b: &[(Role, &TensorSpec<'_>)]) -> Option<String> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].1.name.cmp(&b[j].1.name) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return Some(a[i].1.name.clone()),
        }
    }
    None
}

/// Validates one tensor's dims, type and data against each other.
fn validate_tensor(t: &TensorSpec<'_>, nominal_allowed: bool) -> Result<()> {
    let name = t.name.as_str();
    match (&t.data, t.data_type.element_size()) {
        (TensorPayload::Nominal, _) => {
            element_count(name, &t.dims)?;
            if !nominal_allowed {
                return Err(Error::InvalidSpec {
                    detail: format!(
                        "tensor {name:?} has no values; only parameters of a nominal checkpoint may omit them"
                    ),
                });
            }
        }
        (TensorPayload::Bytes(bytes), Some(_)) => {
            let expected = byte_size(name, t.data_type, &t.dims)?.unwrap_or(0);
            let found = bytes.len() as u64;
            if found != expected {
                return Err(Error::DataLengthMismatch {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                    expected,
                    found,
                });
            }
        }
        (TensorPayload::Strings(values), None) => {
            let expected = element_count(name, &t.dims)?;
            let found = values.len() as u64;
            if found != expected {
                return Err(Error::StringCountMismatch {
                    tensor: t.name.clone(),
                    dims: t.dims.clone(),
                    expected,
                    found,
                });
            }
        }
        (TensorPayload::Bytes(_), None) => {
            return Err(Error::WrongStorage {
                tensor: t.name.clone(),
                detail: "string tensor given raw bytes; give its values as strings",
            })
        }
        (TensorPayload::Strings(_), Some(_)) => {
            return Err(Error::WrongStorage {
                tensor: t.name.clone(),
                detail: "numeric tensor given string values",
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::u8_tensor as tensor;

    fn validate(spec: &CheckpointSpec<'_>) -> Result<()> {
        super::validate(spec, &tensors_in_file_order(spec))
    }

    #[test]
    fn duplicate_parameters_within_and_across_lists() {
        let within = CheckpointSpec {
            trainable: vec![tensor("b", b"1"), tensor("a", b"2"), tensor("b", b"3")],
            ..Default::default()
        };
        let across = CheckpointSpec {
            trainable: vec![tensor("c", b"1"), tensor("a", b"2")],
            frozen: vec![tensor("b", b"1"), tensor("c", b"1")],
            ..Default::default()
        };
        for spec in [within, across] {
            let e = validate(&spec).unwrap_err();
            assert!(matches!(&e, Error::DuplicateName { kind: "parameter", .. }), "{e}");
        }
        let ok = CheckpointSpec {
            trainable: vec![tensor("c", b"1")],
            frozen: vec![tensor("b", b"1"), tensor("d", b"1")],
            ..Default::default()
        };
        validate(&ok).unwrap();
    }

    #[test]
    fn versions_other_than_1_and_2_are_refused() {
        for version in [0, 3, -1] {
            let spec = CheckpointSpec { version, ..Default::default() };
            let e = validate(&spec).unwrap_err();
            assert!(matches!(e, Error::InvalidSpec { .. }), "{e}");
            assert!(e.to_string().contains(&format!("version {version}")), "{e}");
        }
        validate(&CheckpointSpec { version: 1, ..Default::default() }).unwrap();
        assert_eq!(CheckpointSpec::default().version, WRITTEN_VERSION);
    }

    #[test]
    fn nominal_version_1_is_refused_with_the_reason() {
        let spec = CheckpointSpec { version: 1, is_nominal: true, ..Default::default() };
        let e = validate(&spec).unwrap_err();
        assert!(e.to_string().contains("no nominal flag"), "{e}");
        validate(&CheckpointSpec { version: 2, is_nominal: true, ..Default::default() }).unwrap();
    }

    #[test]
    fn file_order_is_sorted_parameters_then_momentums() {
        let spec = CheckpointSpec {
            trainable: vec![tensor("b", b"1"), tensor("a", b"2")],
            frozen: vec![tensor("0", b"3")],
            optimizer_groups: vec![OptimizerGroupSpec {
                name: "g".into(),
                step: 0,
                initial_learning_rate: 0.0,
                states: vec![ParameterStateSpec {
                    param_name: "a".into(),
                    momentums: vec![tensor("m1", b"4"), tensor("m0", b"5")],
                }],
            }],
            ..Default::default()
        };
        let order: Vec<_> =
            tensors_in_file_order(&spec).into_iter().map(|(r, t)| (r, t.name.as_str())).collect();
        assert_eq!(
            order,
            [
                (Role::Parameter, "a"),
                (Role::Parameter, "b"),
                (Role::Parameter, "0"),
                (Role::Momentum, "m0"),
                (Role::Momentum, "m1")
            ]
        );
    }
}
