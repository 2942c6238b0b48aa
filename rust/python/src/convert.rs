//! Conversions between Python objects and the core crate's index and spec types.

use ortckpt_core::{
    CheckpointIndex, CheckpointSpec, DataType, OptimizerGroupSpec, ParameterStateSpec, Property,
    PropertyValue, Storage, TensorIndex, TensorPayload, TensorSpec,
};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

/// A Python buffer held for as long as Rust reads it.
pub(crate) struct BorrowedBytes {
    buffer: PyUntypedBuffer,
}

/// A pointer and length into a held buffer, so the bytes can be read with the GIL released.
#[derive(Clone, Copy)]
pub(crate) struct BytesView {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a BytesView is only created from a BorrowedBytes that outlives every use of it, and the
// bytes are only read.
unsafe impl Send for BytesView {}
unsafe impl Sync for BytesView {}

impl BytesView {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: see `unsafe impl Send`; ptr/len come from a live, C-contiguous Py_buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl BorrowedBytes {
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> PyResult<BorrowedBytes> {
        let buffer = PyUntypedBuffer::get(obj).map_err(|_| {
            PyTypeError::new_err(format!(
                "expected bytes or an object supporting the buffer protocol, got {}",
                obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        if !buffer.is_c_contiguous() {
            return Err(PyValueError::new_err("buffer must be C-contiguous"));
        }
        Ok(BorrowedBytes { buffer })
    }

    pub(crate) fn view(&self) -> BytesView {
        BytesView { ptr: self.buffer.buf_ptr() as *const u8, len: self.buffer.len_bytes() }
    }
}

type TensorInfo = (String, i32, Vec<i64>, usize, u64, Option<Vec<String>>, Option<u64>);

fn tensor_info(t: &TensorIndex) -> TensorInfo {
    let (offset, nbytes, strings, external) = match &t.storage {
        Storage::Inline { offset, len } => (*offset, *len as u64, None, None),
        Storage::External { offset, len } => (0, *len, None, Some(*offset)),
        Storage::Strings(values) => (0, 0, Some(values.clone()), None),
        Storage::Nominal => (0, 0, None, None),
    };
    (t.name.clone(), t.data_type.code(), t.dims.clone(), offset, nbytes, strings, external)
}

fn tensor_infos<'py>(py: Python<'py>, tensors: &[TensorIndex]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, tensors.iter().map(tensor_info))
}

pub(crate) fn index_to_py(py: Python<'_>, index: &CheckpointIndex) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", index.version)?;
    d.set_item("is_nominal", index.is_nominal)?;
    d.set_item("has_external_data", index.has_external_data)?;
    d.set_item("trainable", tensor_infos(py, &index.trainable)?)?;
    d.set_item("frozen", tensor_infos(py, &index.frozen)?)?;
    let groups = PyList::empty(py);
    for g in &index.optimizer_groups {
        let gd = PyDict::new(py);
        gd.set_item("name", &g.name)?;
        gd.set_item("step", g.step)?;
        gd.set_item("initial_learning_rate", g.initial_learning_rate as f64)?;
        let states = PyList::empty(py);
        for s in &g.states {
            states.append((&s.param_name, tensor_infos(py, &s.momentums)?))?;
        }
        gd.set_item("states", states)?;
        groups.append(gd)?;
    }
    d.set_item("optimizer_groups", groups)?;
    let props = PyList::empty(py);
    for p in &index.properties {
        match &p.value {
            PropertyValue::Int(v) => props.append((&p.name, *v))?,
            PropertyValue::Float(v) => props.append((&p.name, *v as f64))?,
            PropertyValue::Str(v) => props.append((&p.name, v))?,
        }
    }
    d.set_item("properties", props)?;
    Ok(d.unbind())
}

/// A spec whose tensor bytes point into Python buffers that it keeps alive.
pub(crate) struct HeldSpec {
    // Declared first so it is dropped before the buffers its slices point into.
    spec: CheckpointSpec<'static>,
    _buffers: Vec<BorrowedBytes>,
}

impl HeldSpec {
    pub(crate) fn spec(&self) -> &CheckpointSpec<'_> {
        &self.spec
    }
}

fn required<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?.ok_or_else(|| PyValueError::new_err(format!("checkpoint spec is missing {key:?}")))
}

pub(crate) fn spec_from_py(d: &Bound<'_, PyDict>) -> PyResult<HeldSpec> {
    let mut buffers = Vec::new();
    let is_nominal: bool = match d.get_item("is_nominal")? {
        Some(v) => v.extract()?,
        None => false,
    };
    let version: i32 = match d.get_item("version")? {
        Some(v) => v.extract()?,
        None => ortckpt_core::WRITTEN_VERSION,
    };
    let trainable = tensors_from_py(&required(d, "trainable")?, &mut buffers)?;
    let frozen = tensors_from_py(&required(d, "frozen")?, &mut buffers)?;
    let mut optimizer_groups = Vec::new();
    if let Some(groups) = d.get_item("optimizer_groups")? {
        for g in groups.try_iter()? {
            let g = g?;
            let g = g.cast::<PyDict>().map_err(|_| PyTypeError::new_err("optimizer group must be a dict"))?;
            let mut states = Vec::new();
            for s in required(g, "states")?.try_iter()? {
                let (param_name, momentums): (String, Bound<'_, PyAny>) = s?.extract()?;
                let momentums = tensors_from_py(&momentums, &mut buffers)?;
                states.push(ParameterStateSpec { param_name, momentums });
            }
            optimizer_groups.push(OptimizerGroupSpec {
                name: required(g, "name")?.extract()?,
                step: required(g, "step")?.extract()?,
                initial_learning_rate: required(g, "initial_learning_rate")?.extract::<f64>()? as f32,
                states,
            });
        }
    }
    let mut properties = Vec::new();
    if let Some(props) = d.get_item("properties")? {
        for p in props.try_iter()? {
            let (name, value): (String, Bound<'_, PyAny>) = p?.extract()?;
            let value = property_value(&name, &value)?;
            properties.push(Property { name, value });
        }
    }
    Ok(HeldSpec {
        spec: CheckpointSpec { version, is_nominal, trainable, frozen, optimizer_groups, properties },
        _buffers: buffers,
    })
}

fn property_value(name: &str, value: &Bound<'_, PyAny>) -> PyResult<PropertyValue> {
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "property {name:?}: bool is not a property type; use int, float or str"
        )));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(PropertyValue::Int(value.extract()?));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(PropertyValue::Float(value.extract::<f64>()? as f32));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(PropertyValue::Str(value.extract()?));
    }
    Err(PyTypeError::new_err(format!(
        "property {name:?}: value must be int, float or str, got {}",
        value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
    )))
}

fn tensors_from_py(
    list: &Bound<'_, PyAny>,
    buffers: &mut Vec<BorrowedBytes>,
) -> PyResult<Vec<TensorSpec<'static>>> {
    let mut out = Vec::new();
    for item in list.try_iter()? {
        let (name, code, dims, data): (String, i32, Vec<i64>, Bound<'_, PyAny>) = item?.extract()?;
        let data_type = DataType::from_code(code).ok_or_else(|| {
            PyValueError::new_err(format!("tensor {name:?}: unknown data type code {code}"))
        })?;
        let data = if data.is_none() {
            TensorPayload::Nominal
        } else if data.is_instance_of::<PyList>() {
            TensorPayload::Strings(data.extract()?)
        } else {
            let held = BorrowedBytes::get(&data)?;
            let view = held.view();
            buffers.push(held);
            // SAFETY: the slice points into a buffer now owned by `buffers`, which HeldSpec keeps
            // alive for longer than the spec that holds the slice.
            let slice: &'static [u8] = unsafe { std::mem::transmute::<&[u8], &'static [u8]>(view.slice()) };
            TensorPayload::Bytes(slice)
        };
        out.push(TensorSpec { name, data_type, dims, data });
    }
    Ok(out)
}
