//! Conversions between Python objects and the core crate's index and spec types.

use numpy::PyUntypedArray;
use ortckpt_core::{
    CheckpointSpec, DataType, OptimizerGroupSpec, ParameterStateSpec, Property, PropertyValue, TensorPayload,
    TensorSpec,
};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple};

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
// SAFETY: as for Send: the bytes are only read, and outlive every use.
unsafe impl Sync for BytesView {}

impl BytesView {
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

    /// The bytes' address and length.
    pub(crate) fn raw(&self) -> (*const u8, usize) {
        (self.buffer.buf_ptr() as *const u8, self.buffer.len_bytes())
    }

    pub(crate) fn view(&self) -> BytesView {
        BytesView { ptr: self.buffer.buf_ptr() as *const u8, len: self.buffer.len_bytes() }
    }

    /// Whether the bytes are read-only as exported (a writable exporter may still be written).
    fn readonly(&self) -> bool {
        self.buffer.readonly()
    }
}

/// THE rule for "memory that cannot change", shared by loading (`index_checkpoint` keeps such
/// input zero-copy and copies any other) and states (`from_array` keeps such arrays zero-copy and
/// copies others; saves then stream them with the GIL released): `obj` itself is read-only, and
/// the object that owns its memory — found through numpy bases and memoryview owners — is either
/// an exporter that only ever gives read-only buffers (`bytes`, ortckpt's `MappedFile`, a
/// read-only `mmap`) or a numpy array that owns its data and is flagged read-only (numpy's own
/// promise, which only whoever holds that array can break). A read-only view of writable memory
/// (`memoryview(bytearray).toreadonly()`, a read-only array over a bytearray or a writable array)
/// can still change. Returns that owner, or `None` when the memory may change.
pub(crate) fn unchanging_owner<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = obj.py();
    let mut current = obj.clone();
    // Each step goes one owner down; numpy collapses chains of views, so a few steps suffice,
    // and a cycle (impossible for these types) still ends.
    for _ in 0..64 {
        let next = if let Ok(array) = current.cast::<PyUntypedArray>() {
            if array.getattr(intern!(py, "flags"))?.getattr(intern!(py, "writeable"))?.is_truthy()? {
                return Ok(None);
            }
            array.getattr(intern!(py, "base"))?
        } else if let Ok(view) = current.cast::<PyMemoryView>() {
            if !BorrowedBytes::get(view.as_any()).is_ok_and(|b| b.readonly()) {
                return Ok(None);
            }
            view.getattr(intern!(py, "obj"))?
        } else {
            let readonly = BorrowedBytes::get(&current).is_ok_and(|b| b.readonly());
            return Ok(readonly.then_some(current));
        };
        if next.is_none() {
            // An array that owns its data (checked read-only above), or a memoryview of raw memory.
            return Ok(current.cast::<PyUntypedArray>().is_ok().then_some(current));
        }
        current = next;
    }
    Ok(None)
}

/// Whether `data`'s memory cannot change while a state holds it ([`unchanging_owner`]).
#[pyfunction]
pub(crate) fn is_unchanging(data: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(unchanging_owner(data)?.is_some())
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
    // The core validates the version (1 or 2) with a message that says what each one is for.
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

/// Converts a list of TensorSpec tuples `(name, data_type, dims, data[, doc_string])`. This is
/// the per-tensor hot path of a save (100,000 tensors are common), so it reads list and tuple
/// items directly instead of going through generic extraction.
fn tensors_from_py(
    list: &Bound<'_, PyAny>,
    buffers: &mut Vec<BorrowedBytes>,
) -> PyResult<Vec<TensorSpec<'static>>> {
    let list = list.cast::<PyList>().map_err(|_| PyTypeError::new_err("tensor specs must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    buffers.reserve(list.len());
    for item in list.iter() {
        let item = item.cast_into::<PyTuple>().map_err(|_| {
            PyTypeError::new_err("a tensor spec must be a tuple (name, data_type, dims, data[, doc_string])")
        })?;
        if !(4..=5).contains(&item.len()) {
            return Err(PyTypeError::new_err(format!(
                "a tensor spec must be a tuple (name, data_type, dims, data[, doc_string]), got {} items",
                item.len()
            )));
        }
        let name: String = item.get_borrowed_item(0)?.extract()?;
        let code: i32 = item.get_borrowed_item(1)?.extract()?;
        let dims: Vec<i64> = item.get_borrowed_item(2)?.extract()?;
        let data = item.get_borrowed_item(3)?;
        let doc_string: Option<String> =
            if item.len() == 5 { item.get_borrowed_item(4)?.extract()? } else { None };
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
        out.push(TensorSpec { name, data_type, dims, data, doc_string });
    }
    Ok(out)
}
