//! `ortckpt._native`: the PyO3 face of `ortckpt-core`. It converts types, releases the GIL for
//! verification, copies and writes, and maps errors; the format logic lives in the core crate.

mod convert;
mod errors;
mod mapped;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::convert::{index_to_py, spec_from_py, BorrowedBytes};
use crate::errors::{core_error, guarded};
use crate::mapped::MappedFile;

/// Verifies `data` (a MappedFile, bytes, or any C-contiguous buffer) as a checkpoint and returns
/// its index as plain Python objects; see docs/architecture.md. `source` names the input in error
/// messages.
#[pyfunction]
fn index_checkpoint(py: Python<'_>, data: &Bound<'_, PyAny>, source: &str) -> PyResult<Py<PyDict>> {
    let bytes = BorrowedBytes::get(data)?;
    let view = bytes.view();
    let index = py
        .detach(|| guarded(|| ortckpt_core::index_checkpoint(view.slice())))
        .map_err(|e| core_error(source, e))?;
    index_to_py(py, &index)
}

/// Serializes a checkpoint spec (see docs/architecture.md) and returns the file's bytes.
#[pyfunction]
fn serialize_checkpoint(py: Python<'_>, spec: &Bound<'_, PyDict>) -> PyResult<Py<PyBytes>> {
    let held = spec_from_py(spec)?;
    let spec = held.spec();
    let bytes = py
        .detach(|| guarded(|| ortckpt_core::serialize_checkpoint(spec)))
        .map_err(|e| core_error("<bytes>", e))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

/// Serializes a checkpoint spec and writes it to `path` atomically (temp file, fsync, rename).
#[pyfunction]
fn write_checkpoint(py: Python<'_>, path: PathBuf, spec: &Bound<'_, PyDict>) -> PyResult<()> {
    let held = spec_from_py(spec)?;
    let spec = held.spec();
    let source = path.display().to_string();
    py.detach(|| guarded(|| ortckpt_core::write_checkpoint(&path, spec))).map_err(|e| core_error(&source, e))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MappedFile>()?;
    m.add_function(wrap_pyfunction!(index_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(write_checkpoint, m)?)?;
    errors::register(m)?;
    m.add("WRITTEN_VERSION", ortckpt_core::WRITTEN_VERSION)?;
    m.add("DATA_ALIGNMENT", ortckpt_core::DATA_ALIGNMENT)?;
    m.add("SUPPORTED_VERSIONS", ortckpt_core::SUPPORTED_VERSIONS.to_vec())?;
    Ok(())
}
