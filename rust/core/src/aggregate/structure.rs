//! What every upload must match (the reference's [`Layout`]) and the check of an upload's index
//! against it. Messages keep names, shapes and weights as values ([`Message`]): each binding
//! spells them (Python's: `'name'`, `(5, 6)`); data types are numpy's names (`float32`).

use super::rejection::RejectionKind;
use std::ops::Range;

use super::rejection::Rejection;
use crate::message::Message;
use crate::values::Lanes;
use crate::{CheckpointIndex, DataType, PropertyValue, Storage, TensorRef};

/// A parameter of the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedParam {
    /// Its name.
    pub name: String,
    /// Whether it is trainable (and so averaged).
    pub trainable: bool,
    /// Its element type.
    pub data_type: DataType,
    /// Its shape.
    pub dims: Vec<i64>,
}

/// A momentum of the reference's optimizer state (averaged when optimizer state is included).
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedMomentum {
    /// Optimizer group name.
    pub group: String,
    /// Parameter name.
    pub param: String,
    /// Momentum name (e.g. `momentum0`).
    pub momentum: String,
    /// Its element type.
    pub data_type: DataType,
    /// Its shape.
    pub dims: Vec<i64>,
}

/// The structure of the reference. The averaged tensors ("slots") are the trainable parameters in
/// `params` order, then every momentum in `momentums` order.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// Every parameter.
    pub params: Vec<ExpectedParam>,
    /// The momentums to average (empty when optimizer state is not averaged).
    pub momentums: Vec<ExpectedMomentum>,
}

/// Where an averaged tensor's bytes are in an upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The element storage.
    pub lanes: Lanes,
    /// The byte range.
    pub bytes: Range<u64>,
    /// True when the range is in the external data file, else in the checkpoint.
    pub external: bool,
}

impl Layout {
    /// Number of averaged tensors.
    pub fn slot_count(&self) -> usize {
        self.params.iter().filter(|p| p.trainable).count() + self.momentums.len()
    }

    /// Float64 lanes of each averaged tensor (elements, twice for complex), in slot order.
    pub fn slot_lanes(&self) -> Vec<usize> {
        let trainable = self.params.iter().filter(|p| p.trainable).map(|p| (p.data_type, &p.dims));
        let moms = self.momentums.iter().map(|m| (m.data_type, &m.dims));
        trainable.chain(moms).map(|(t, dims)| lanes_of(t, dims)).collect()
    }

    /// The element type of each averaged tensor, in slot order.
    pub fn slot_types(&self) -> Vec<DataType> {
        let trainable = self.params.iter().filter(|p| p.trainable).map(|p| p.data_type);
        trainable.chain(self.momentums.iter().map(|m| m.data_type)).collect()
    }

    /// How slot `i` is named after "the aggregate of": `'w'` or `momentum 'group/param/momentum0'`.
    pub fn slot_name(&self, slot: usize) -> Message {
        self.slot_naming(slot, false)
    }

    /// How slot `i` is named in messages: `parameter 'w'` or `momentum 'group/param/momentum0'`.
    pub fn slot_label(&self, slot: usize) -> Message {
        self.slot_naming(slot, true)
    }

    fn slot_naming(&self, slot: usize, parameter_word: bool) -> Message {
        let trainable = self.params.iter().filter(|p| p.trainable).count();
        match slot.checked_sub(trainable) {
            None => {
                let name = self.params.iter().filter(|p| p.trainable).nth(slot).map_or("", |p| &p.name);
                if parameter_word {
                    Message::text_first("parameter ").name(name)
                } else {
                    Message::name_first(name)
                }
            }
            Some(m) => match self.momentums.get(m) {
                Some(m) => momentum_label(m),
                None => Message::text_first(format!("tensor #{slot}")),
            },
        }
    }
}

fn lanes_of(data_type: DataType, dims: &[i64]) -> usize {
    let elements = dims.iter().map(|&d| usize::try_from(d).unwrap_or(0)).product::<usize>();
    let complex = matches!(data_type, DataType::Complex64 | DataType::Complex128);
    elements * if complex { 2 } else { 1 }
}

/// numpy's name of a type (`float32`, `bfloat16`, ...): [`DataType::numpy_name`].
pub fn type_name(data_type: DataType) -> String {
    data_type.numpy_name().into()
}

fn first_of(names: &[&str], what: &str) -> Message {
    let more = if names.len() > 1 { format!(" (and {} more)", names.len() - 1) } else { String::new() };
    parameter(names.first().copied().unwrap_or("")).text(format!(" {what}{more}"))
}

/// `parameter 'name'`.
fn parameter(name: &str) -> Message {
    Message::text_first("parameter ").name(name)
}

/// `momentum 'group/param/momentum'`.
fn momentum_label(m: &ExpectedMomentum) -> Message {
    Message::text_first("momentum ").name(format!("{}/{}/{}", m.group, m.param, m.momentum))
}

/// `label` is called only for the message (names are formatted on rejections, not per upload).
fn range_of(tensor: &TensorRef<'_>, label: impl Fn() -> Message) -> Result<(Range<u64>, bool), Rejection> {
    match tensor.storage {
        Storage::Inline { offset, len, .. } => Ok((offset as u64..(offset + len) as u64, false)),
        Storage::External { offset, len } => Ok((offset..offset + len, true)),
        _ => Err(Rejection::new(RejectionKind::Nominal, label().text(" has no values"))),
    }
}

/// Checks `index` against the layout in the documented order (nominal, missing and extra
/// parameters, then each parameter's flag, type and shape, then the momentums) and returns where
/// each averaged tensor's bytes are, in slot order.
pub fn check_structure(index: &CheckpointIndex, layout: &Layout) -> Result<Vec<Located>, Rejection> {
    if index.is_nominal {
        return Err(Rejection::new(
            RejectionKind::Nominal,
            "the checkpoint is nominal (names and types only, no values)",
        ));
    }
    // the layout's parameters are in name order (a state's), as `find_parameter_ranked` hopes
    let positions: Vec<Option<usize>> =
        layout.params.iter().enumerate().map(|(i, p)| index.find_parameter_ranked(&p.name, i)).collect();
    let mut missing: Vec<&str> = layout
        .params
        .iter()
        .zip(&positions)
        .filter(|(_, at)| at.is_none())
        .map(|(p, _)| p.name.as_str())
        .collect();
    missing.sort_unstable();
    if !missing.is_empty() {
        return Err(Rejection::new(RejectionKind::MissingParameter, first_of(&missing, "is missing")));
    }
    if index.parameter_count() != layout.params.len() {
        let known: std::collections::HashSet<&str> = layout.params.iter().map(|p| p.name.as_str()).collect();
        let mut extra: Vec<&str> = (0..index.parameter_count())
            .filter_map(|i| index.tensor(i))
            .map(|t| t.name)
            .filter(|n| !known.contains(n))
            .collect();
        extra.sort_unstable();
        return Err(Rejection::new(
            RejectionKind::ExtraParameter,
            first_of(&extra, "is not in the reference"),
        ));
    }
    let mut located = Vec::with_capacity(layout.slot_count());
    for (p, at) in layout.params.iter().zip(&positions) {
        let position = at.unwrap_or(usize::MAX);
        let (Some(tensor), Some(kind)) = (index.tensor(position), index.param_kind(position)) else {
            return Err(Rejection::new(RejectionKind::MissingParameter, first_of(&[&p.name], "is missing")));
        };
        let name = || parameter(&p.name);
        if (kind == crate::ParamKind::Trainable) != p.trainable {
            let want = if p.trainable { "trainable" } else { "frozen" };
            return Err(Rejection::new(
                RejectionKind::TrainableFlag,
                name().text(format!(" should be {want}, as in the reference")),
            ));
        }
        if tensor.data_type != p.data_type {
            return Err(Rejection::new(
                RejectionKind::Dtype,
                name().text(format!(
                    " is {}; the reference has {}",
                    type_name(tensor.data_type),
                    type_name(p.data_type)
                )),
            ));
        }
        if tensor.dims != p.dims.as_slice() {
            return Err(Rejection::new(
                RejectionKind::Shape,
                name().text(" has shape ").shape(tensor.dims).text("; the reference has ").shape(&p.dims),
            ));
        }
        if p.trainable {
            let (bytes, external) = range_of(&tensor, name)?;
            let lanes = Lanes::of(p.data_type)
                .ok_or_else(|| Rejection::new(RejectionKind::Dtype, name().text(" cannot be averaged")))?;
            located.push(Located { lanes, bytes, external });
        }
    }
    for m in &layout.momentums {
        let label = || momentum_label(m);
        let found = index
            .optimizer_groups
            .iter()
            .find(|g| g.name == m.group)
            .and_then(|g| g.states.iter().find(|s| s.param_name == m.param))
            .and_then(|s| index.momentums(s).find(|t| t.name == m.momentum));
        let Some(tensor) = found else {
            return Err(Rejection::new(RejectionKind::Optimizer, label().text(" is missing")));
        };
        if tensor.data_type != m.data_type || tensor.dims != m.dims.as_slice() {
            let list =
                |d: &[i64]| format!("[{}]", d.iter().map(i64::to_string).collect::<Vec<_>>().join(", "));
            return Err(Rejection::new(
                RejectionKind::Optimizer,
                label().text(format!(
                    " is {}{}; the reference has {}{}",
                    type_name(tensor.data_type),
                    list(tensor.dims),
                    type_name(m.data_type),
                    list(&m.dims)
                )),
            ));
        }
        let (bytes, external) = range_of(&tensor, label)?;
        let lanes = Lanes::of(m.data_type)
            .ok_or_else(|| Rejection::new(RejectionKind::Optimizer, label().text(" cannot be averaged")))?;
        located.push(Located { lanes, bytes, external });
    }
    Ok(located)
}

/// How an upload's weight is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightRule {
    /// This number (checked by [`weight_problem`] like a property's).
    Given(f64),
    /// The value of this property, which must pass [`weight_problem`].
    Property(String),
    /// The value of this property times a factor (a staleness discount).
    PropertyTimes(String, f64),
}

/// The largest weight an upload may have: 2^64, above any count of examples (Flower carries
/// them as 64-bit integers). With every weight at most this, a round's total weight is finite
/// whatever the number of uploads (float64 overflows past 2^1024: 2^960 uploads), so the mean is
/// never `sum / inf`.
pub const MAX_WEIGHT: f64 = 18_446_744_073_709_551_616.0;
/// The smallest weight: 2^-64. Weights are relative; a smaller one is a scale the caller chose
/// badly, and its products with the values would fall into float64's subnormal range.
pub const MIN_WEIGHT: f64 = 1.0 / MAX_WEIGHT;

/// Why `value` cannot be an upload's weight (a phrase completing "weight ... "), or `None`: a
/// weight is a finite number in [[`MIN_WEIGHT`], [`MAX_WEIGHT`]]. Zero is refused: an upload of no
/// examples adds nothing to a weighted mean, and a round of zero weights has none.
pub fn weight_problem(value: f64) -> Option<&'static str> {
    if !value.is_finite() {
        Some("is not a finite number")
    } else if value <= 0.0 {
        Some("is not a positive number")
    } else if !(MIN_WEIGHT..=MAX_WEIGHT).contains(&value) {
        Some("is outside [2^-64, 2^64] (weights are relative: scale them into that range)")
    } else {
        None
    }
}

/// The upload's weight under `rule`.
pub fn weight_of(index: &CheckpointIndex, rule: &WeightRule) -> Result<f64, Rejection> {
    let (name, factor) = match rule {
        WeightRule::Given(w) => {
            return match weight_problem(*w) {
                None => Ok(*w),
                Some(problem) => Err(Rejection::new(
                    RejectionKind::Weight,
                    Message::text_first("weight ").float(*w).text(format!(" {problem}")),
                )),
            }
        }
        WeightRule::Property(name) => (name, 1.0),
        WeightRule::PropertyTimes(name, factor) => (name, *factor),
    };
    let Some(property) = index.properties.iter().find(|p| &p.name == name) else {
        return Err(Rejection::new(
            RejectionKind::Weight,
            Message::text_first("property ").name(name.as_str()).text(" (the weight) is missing"),
        ));
    };
    let named = || Message::text_first("property ").name(name.as_str()).text(" = ");
    let (value, shown) = match &property.value {
        PropertyValue::Int(v) => (*v as f64, named().text(v.to_string())),
        PropertyValue::Float(v) => (f64::from(*v), named().float(f64::from(*v))),
        PropertyValue::Str(s) => (f64::NAN, named().name(s.as_str())),
    };
    match weight_problem(value) {
        None => {
            let weight = value * factor;
            match weight_problem(weight) {
                None => Ok(weight),
                Some(problem) => Err(Rejection::new(
                    RejectionKind::Weight,
                    shown.text(format!(" discounted by {factor}: weight {problem}")),
                )),
            }
        }
        Some(_) if matches!(property.value, PropertyValue::Str(_)) => {
            Err(Rejection::new(RejectionKind::Weight, shown.text(" is not a number")))
        }
        Some(problem) => Err(Rejection::new(RejectionKind::Weight, shown.text(format!(" {problem}")))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_type_names() {
        assert_eq!(type_name(DataType::Double), "float64");
        assert_eq!(type_name(DataType::Bfloat16), "bfloat16");
    }

    #[test]
    fn weights_are_finite_positive_and_bounded() {
        for good in [MIN_WEIGHT, 1.0, 0.5, 1e6, MAX_WEIGHT] {
            assert_eq!(weight_problem(good), None, "{good}");
        }
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e308, MIN_WEIGHT / 2.0] {
            assert!(weight_problem(bad).is_some(), "{bad}");
        }
    }
}
