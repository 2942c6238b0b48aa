//! Building a checkpoint from JavaScript values and serializing it with the core's writer.
//!
//! The builder only converts: names, types and shapes become a `CheckpointSpec`, and the core
//! validates it (shapes against byte lengths, unique names, versions) when it is serialized.

use js_sys::{Array, ArrayBuffer, Reflect, Uint8Array};
use ortckpt_core::{
    serialize_checkpoint, CheckpointSpec, DataType, OptimizerGroupSpec, ParameterStateSpec, Property,
    PropertyValue, TensorPayload, TensorSpec, WRITTEN_VERSION,
};
use wasm_bindgen::prelude::*;

use crate::js::{core_error, dtype_from_name, error, MAX_SAFE_INTEGER};

/// A tensor's values owned by the builder until it serializes.
enum Owned {
    Bytes(Vec<u8>),
    Strings(Vec<String>),
    Nominal,
}

struct Tensor {
    name: String,
    data_type: DataType,
    dims: Vec<i64>,
    values: Owned,
}

impl Tensor {
    fn spec(&self) -> TensorSpec<'_> {
        let data = match &self.values {
            Owned::Bytes(b) => TensorPayload::Bytes(b),
            Owned::Strings(s) => TensorPayload::Strings(s.clone()),
            Owned::Nominal => TensorPayload::Nominal,
        };
        TensorSpec {
            name: self.name.clone(),
            data_type: self.data_type,
            dims: self.dims.clone(),
            data,
            doc_string: None,
        }
    }
}

struct Group {
    name: String,
    step: i64,
    initial_learning_rate: f32,
    states: Vec<(String, Vec<Tensor>)>,
}

/// Collects a checkpoint's contents; `toBytes()` writes them as ORT does (sorted, every tensor
/// inline). Tensor values are given as any typed array (or ArrayBuffer) holding the little-endian
/// element bytes — for float16 / bfloat16 a `Uint16Array` of the bit patterns —, a `string[]` for
/// a string tensor, or `null` for a tensor of a nominal checkpoint.
#[wasm_bindgen]
pub struct CheckpointBuilder {
    version: i32,
    nominal: bool,
    trainable: Vec<Tensor>,
    frozen: Vec<Tensor>,
    groups: Vec<Group>,
    properties: Vec<Property>,
}

impl Default for CheckpointBuilder {
    fn default() -> Self {
        CheckpointBuilder::new()
    }
}

#[wasm_bindgen]
impl CheckpointBuilder {
    /// An empty checkpoint of format version 2 (what ORT 1.18+ writes).
    #[wasm_bindgen(constructor)]
    pub fn new() -> CheckpointBuilder {
        CheckpointBuilder {
            version: WRITTEN_VERSION,
            nominal: false,
            trainable: Vec::new(),
            frozen: Vec::new(),
            groups: Vec::new(),
            properties: Vec::new(),
        }
    }

    /// The format version to write: 2 (default) or 1 (ORT 1.16-1.17).
    #[wasm_bindgen(js_name = setVersion)]
    pub fn set_version(&mut self, version: i32) {
        self.version = version;
    }

    /// Marks the checkpoint nominal (parameters may have `null` values).
    #[wasm_bindgen(js_name = setNominal)]
    pub fn set_nominal(&mut self, nominal: bool) {
        self.nominal = nominal;
    }

    /// Adds a parameter (`trainable`: it has `requires_grad`).
    #[wasm_bindgen(js_name = addParameter)]
    pub fn add_parameter(
        &mut self,
        name: String,
        dtype: &str,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: Vec<f64>,
        #[wasm_bindgen(unchecked_param_type = "ArrayBufferView | ArrayBuffer | string[] | null")]
        values: JsValue,
        trainable: bool,
    ) -> Result<(), JsValue> {
        let tensor = tensor(name, dtype, &shape, &values)?;
        if trainable { &mut self.trainable } else { &mut self.frozen }.push(tensor);
        Ok(())
    }

    /// Adds an optimizer group (ORT names its one group `group0`).
    #[wasm_bindgen(js_name = addOptimizerGroup)]
    pub fn add_optimizer_group(
        &mut self,
        name: String,
        step: f64,
        initial_learning_rate: f32,
    ) -> Result<(), JsValue> {
        let step = integer(step, "the optimizer step")?;
        self.groups.push(Group { name, step, initial_learning_rate, states: Vec::new() });
        Ok(())
    }

    /// Adds a momentum tensor (e.g. `momentum0`) of parameter `param` to the group named `group`.
    #[wasm_bindgen(js_name = addMomentum)]
    pub fn add_momentum(
        &mut self,
        group: &str,
        param: &str,
        name: String,
        dtype: &str,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: Vec<f64>,
        #[wasm_bindgen(unchecked_param_type = "ArrayBufferView | ArrayBuffer")] values: JsValue,
    ) -> Result<(), JsValue> {
        let tensor = tensor(name, dtype, &shape, &values)?;
        let Some(g) = self.groups.iter_mut().find(|g| g.name == group) else {
            let detail = format!("no optimizer group {group:?}: add it with addOptimizerGroup first");
            return Err(error(&detail, "InvalidSpec"));
        };
        match g.states.iter_mut().find(|(p, _)| p == param) {
            Some((_, momentums)) => momentums.push(tensor),
            None => g.states.push((param.to_owned(), vec![tensor])),
        }
        Ok(())
    }

    /// Adds an integer property (a whole number within ±(2^53 − 1)).
    #[wasm_bindgen(js_name = addIntProperty)]
    pub fn add_int_property(&mut self, name: String, value: f64) -> Result<(), JsValue> {
        let value = PropertyValue::Int(integer(value, "an int property")?);
        self.properties.push(Property { name, value });
        Ok(())
    }

    /// Adds a float property (stored as float32, as ORT does).
    #[wasm_bindgen(js_name = addFloatProperty)]
    pub fn add_float_property(&mut self, name: String, value: f32) {
        self.properties.push(Property { name, value: PropertyValue::Float(value) });
    }

    /// Adds a string property.
    #[wasm_bindgen(js_name = addStringProperty)]
    pub fn add_string_property(&mut self, name: String, value: String) {
        self.properties.push(Property { name, value: PropertyValue::Str(value) });
    }

    /// The checkpoint's bytes, written by the core's writer; throws a `CheckpointError` when the
    /// contents are invalid (duplicate names, values not matching their shape, ...).
    #[wasm_bindgen(js_name = toBytes)]
    pub fn to_bytes(&self) -> Result<Vec<u8>, JsValue> {
        let optimizer_groups = self
            .groups
            .iter()
            .map(|g| OptimizerGroupSpec {
                name: g.name.clone(),
                step: g.step,
                initial_learning_rate: g.initial_learning_rate,
                states: g
                    .states
                    .iter()
                    .map(|(param, m)| ParameterStateSpec { param_name: param.clone(), momentums: specs(m) })
                    .collect(),
            })
            .collect();
        let spec = CheckpointSpec {
            version: self.version,
            is_nominal: self.nominal,
            trainable: specs(&self.trainable),
            frozen: specs(&self.frozen),
            optimizer_groups,
            properties: self.properties.clone(),
        };
        serialize_checkpoint(&spec).map_err(core_error)
    }
}

fn specs(list: &[Tensor]) -> Vec<TensorSpec<'_>> {
    list.iter().map(Tensor::spec).collect()
}

/// `v` as an integer, when it is one a JavaScript number holds exactly.
fn integer(v: f64, what: &str) -> Result<i64, JsValue> {
    if v.fract() == 0.0 && v.abs() <= MAX_SAFE_INTEGER as f64 {
        Ok(v as i64)
    } else {
        Err(error(&format!("{what} must be a whole number within ±(2^53 - 1), not {v}"), "InvalidSpec"))
    }
}

fn tensor(name: String, dtype: &str, shape: &[f64], values: &JsValue) -> Result<Tensor, JsValue> {
    let data_type = dtype_from_name(dtype)?;
    let dims = shape
        .iter()
        .map(|&d| integer(d, &format!("tensor {name:?}: each dim")))
        .collect::<Result<Vec<_>, _>>()?;
    let values = if values.is_null() || values.is_undefined() {
        Owned::Nominal
    } else if Array::is_array(values) {
        let strings = Array::from(values).iter().map(|v| v.as_string()).collect::<Option<Vec<_>>>();
        Owned::Strings(strings.ok_or_else(|| {
            error(&format!("tensor {name:?}: an array of values must hold strings only"), "InvalidSpec")
        })?)
    } else if let Some(buffer) = values.dyn_ref::<ArrayBuffer>() {
        Owned::Bytes(Uint8Array::new(buffer).to_vec())
    } else if ArrayBuffer::is_view(values) {
        // The view's own bytes, not its elements converted: read buffer, byteOffset, byteLength.
        let field = |k: &str| Reflect::get(values, &k.into());
        let (buffer, offset, length) = (field("buffer")?, field("byteOffset")?, field("byteLength")?);
        let (offset, length) = (offset.as_f64().unwrap_or(0.0) as u32, length.as_f64().unwrap_or(0.0) as u32);
        Owned::Bytes(Uint8Array::new_with_byte_offset_and_length(&buffer, offset, length).to_vec())
    } else {
        let detail =
            format!("tensor {name:?}: values must be a typed array, an ArrayBuffer, a string[] or null");
        return Err(error(&detail, "InvalidSpec"));
    };
    Ok(Tensor { name, data_type, dims, values })
}
