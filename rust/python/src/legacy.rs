//! The ORT 1.15 checkpoint folder: read by the core into an index and one buffer of values,
//! handed to Python as an [`Index`] like a flatbuffer checkpoint's.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use ortckpt_core::LoadedCheckpoint;

use crate::errors::{core_error, GuardedError};
use crate::index::{Held, Index};
use crate::mapped::{interruptible, path_arg, show};

/// Reads the ORT 1.15 checkpoint folder `path` (Ctrl-C interrupts it) and returns its index (version
/// 0), whose inline tensors point into a `bytes` of decoded values; `None` when the directory holds
/// none of the folder's files.
#[pyfunction]
pub(crate) fn read_legacy_folder(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Option<Index>> {
    let path = path_arg(path)?;
    let source = show(&path);
    let read = interruptible(py, &source, |keep_going| ortckpt_core::read_legacy_folder(&path, keep_going))?;
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
    let values = py
        .detach(|| ortckpt_core::tensor_proto_values(data))
        .map_err(|e| core_error(&format!("tensor {tensor:?}"), GuardedError::Core(e)))?;
    Ok(PyBytes::new(py, &values).unbind())
}
