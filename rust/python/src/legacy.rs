//! The ORT 1.15 checkpoint folder: read by the core into an index and one buffer of values,
//! handed to Python as an [`Index`] like a flatbuffer checkpoint's.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use ortckpt_core::{Error, LoadedCheckpoint};

use crate::errors::{core_error, with_attributes, GuardedError, TensorDataError};
use crate::index::{Held, Index};
use crate::mapped::{interruptible, path_arg, show};

/// Reads the ORT 1.15 checkpoint folder `path` (Ctrl-C interrupts it) and returns its index (version
/// 0), whose inline tensors point into a `bytes` of decoded values; `None` when the directory holds
/// none of the folder's files. SourceTooLargeError when its files hold more than `max_bytes`.
#[pyfunction]
#[pyo3(signature = (path, max_bytes=None))]
pub(crate) fn read_legacy_folder(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    max_bytes: Option<u64>,
) -> PyResult<Option<Index>> {
    let path = path_arg(path)?;
    let source = show(&path);
    let read = interruptible(py, &source, |keep_going| {
        ortckpt_core::read_legacy_folder(&path, max_bytes, keep_going)
    })?;
    let Some(folder) = read else { return Ok(None) };
    // One copy into a `bytes` (the index's buffers are `bytes` or mapped files); the decoded
    // values are freed when this returns.
    let values = Held::of(PyBytes::new(py, &folder.values).as_any())?;
    let loaded = LoadedCheckpoint::from_index(folder.index, values)
        .map_err(|e| core_error(&source, GuardedError::Core(e)))?;
    Ok(Some(Index::new(loaded, source)))
}

/// The values of one serialized `onnx.TensorProto` (`data`; `tensor` names it in errors) as
/// little-endian bytes of its data type, decoded by the core bit-exactly.
#[pyfunction]
pub(crate) fn tensor_proto_values(py: Python<'_>, data: &[u8], tensor: &str) -> PyResult<Py<PyBytes>> {
    let values =
        py.detach(|| ortckpt_core::tensor_proto_values(data)).map_err(|e| proto_error(py, tensor, e))?;
    Ok(PyBytes::new(py, &values).unbind())
}

/// The checkpoint bytes of TensorProto `tensor` whose values are in the typed field `field` (`None`: none holds values), given
/// as that field's values in little-endian order (`values`), decoded by the core's rules.
#[pyfunction]
pub(crate) fn tensor_proto_field_values(
    py: Python<'_>,
    tensor: &str,
    data_type: i32,
    dims: Vec<i64>,
    field: Option<&str>,
    values: &[u8],
) -> PyResult<Py<PyBytes>> {
    let bytes = py
        .detach(|| ortckpt_core::tensor_proto_field_values(tensor, data_type, &dims, field, values))
        .map_err(|e| proto_error(py, tensor, e))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// A TensorProto's decoding error, naming the tensor as Python shows a name (`tensor 'w': ...`).
fn proto_error(py: Python<'_>, tensor: &str, e: Error) -> PyErr {
    let shown = PyString::new(py, tensor).repr().map_or_else(|_| format!("{tensor:?}"), |r| r.to_string());
    match e {
        // the tensor's name once, in Python's spelling
        Error::TensorProtoValues { detail, .. } => with_attributes(
            TensorDataError::new_err(format!("tensor {shown}: {detail}")),
            "<TensorProto>",
            Some(tensor),
        ),
        e => core_error(&format!("tensor {shown}"), GuardedError::Core(e)),
    }
}
