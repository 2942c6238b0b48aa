//! `ortckpt._native`: the PyO3 face of `ortckpt-core`. It converts types, releases the GIL for
//! verification, copies and writes, and maps errors; the format logic lives in the core crate.

mod convert;
mod errors;
mod index;
mod mapped;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::convert::{spec_from_py, BorrowedBytes};
use crate::errors::{core_error, guarded};
use crate::index::{Index, TensorRecord};
use crate::mapped::MappedFile;

/// Verifies `data` as a checkpoint and returns its [`Index`]. `data` must be `bytes` or a
/// `MappedFile`: memory nobody else can change through Python, since it is read with the GIL
/// released (the Python layer copies any other buffer first). `source` names the input in error
/// messages. When the checkpoint has external data, `external` must be the external data file's
/// bytes (named `external_source`): every external range is checked against it.
#[pyfunction]
#[pyo3(signature = (data, source, external=None, external_source=None))]
fn index_checkpoint(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    source: &str,
    external: Option<&Bound<'_, PyAny>>,
    external_source: Option<&str>,
) -> PyResult<Index> {
    let bytes = BorrowedBytes::get_immutable(data)?;
    let view = bytes.view();
    let external_len =
        external.map(|e| BorrowedBytes::get_immutable(e).map(|b| b.view().len())).transpose()?;
    let missing = match external_source {
        Some(name) => format!("its external data file {name} is missing"),
        None => "no external data was given (pass external_data=)".to_owned(),
    };
    let index = py
        .detach(|| {
            guarded(|| {
                let index = ortckpt_core::index_checkpoint(view.slice())?;
                if index.has_external_data {
                    match external_len {
                        Some(len) => ortckpt_core::check_external_ranges(&index, len as u64)?,
                        None => return Err(ortckpt_core::Error::ExternalDataMissing { detail: missing }),
                    }
                }
                Ok(index)
            })
        })
        .map_err(|e| core_error(source, e))?;
    Ok(Index::new(index, source.to_owned(), data.clone().unbind(), external.map(|e| e.clone().unbind())))
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

/// Saves a checkpoint spec to `path` atomically (temp file, fsync, rename), streaming tensor
/// bytes from the spec's buffers. When the tensor data exceed `external_data_threshold` bytes,
/// parameters go to `path + ".data"` (momentums too with `external_momentums`), written and
/// renamed together with the checkpoint; `None` keeps everything inline.
#[pyfunction]
#[pyo3(signature = (path, spec, external_data_threshold=None, external_momentums=false))]
fn save_checkpoint(
    py: Python<'_>,
    path: PathBuf,
    spec: &Bound<'_, PyDict>,
    external_data_threshold: Option<u64>,
    external_momentums: bool,
) -> PyResult<()> {
    let held = spec_from_py(spec)?;
    let spec = held.spec();
    let source = path.display().to_string();
    let options = ortckpt_core::SaveOptions { external_data_threshold, external_momentums };
    py.detach(|| guarded(|| ortckpt_core::save_checkpoint(&path, spec, &options)))
        .map_err(|e| core_error(&source, e))?;
    Ok(())
}

/// ORT's `ExternalCheckpointDataPath`: the checkpoint path with ".data" appended.
#[pyfunction]
fn external_data_path(path: PathBuf) -> String {
    ortckpt_core::external_data_path(&path).display().to_string()
}

// Every class is frozen and every function works on its arguments alone, so the module is safe
// without the GIL (free-threaded CPython); work on file bytes runs with the GIL released.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::silence_panic_output();
    m.add_class::<MappedFile>()?;
    m.add_class::<Index>()?;
    m.add_class::<TensorRecord>()?;
    m.add_function(wrap_pyfunction!(index_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(external_data_path, m)?)?;
    errors::register(m)?;
    m.add("WRITTEN_VERSION", ortckpt_core::WRITTEN_VERSION)?;
    m.add("DEFAULT_EXTERNAL_DATA_THRESHOLD", ortckpt_core::DEFAULT_EXTERNAL_DATA_THRESHOLD)?;
    Ok(())
}
