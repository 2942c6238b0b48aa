//! `ortckpt._native`: the PyO3 face of `ortckpt-core`. It converts types, releases the GIL for
//! verification, copies and writes, and maps errors; the format logic lives in the core crate.

mod convert;
mod errors;
mod mapped;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::convert::{index_to_py, spec_from_py, BorrowedBytes};
use crate::errors::{core_error, guarded, GuardedError};
use crate::mapped::MappedFile;

/// Verifies `data` (a MappedFile, bytes, or any C-contiguous buffer) as a checkpoint and returns
/// its index as plain Python objects; see docs/architecture.md. `source` names the input in error
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
) -> PyResult<Py<PyDict>> {
    let bytes = BorrowedBytes::get(data)?;
    let view = bytes.view();
    let external_len = external.map(|e| BorrowedBytes::get(e).map(|b| b.view().len())).transpose()?;
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

/// Writes a checkpoint spec to `path` atomically (temp file, fsync, rename). When the tensor data
/// exceed `external_data_threshold` bytes, tensors go to `path + ".data"`, written and renamed
/// together with the checkpoint; `None` keeps everything inline. Returns the number of bytes
/// written to the external file, or None when there is none.
#[pyfunction]
#[pyo3(signature = (path, spec, external_data_threshold=None))]
fn write_checkpoint(
    py: Python<'_>,
    path: PathBuf,
    spec: &Bound<'_, PyDict>,
    external_data_threshold: Option<u64>,
) -> PyResult<Option<u64>> {
    let held = spec_from_py(spec)?;
    let spec = held.spec();
    let source = path.display().to_string();
    let options = ortckpt_core::SaveOptions { external_data_threshold };
    let summary = py
        .detach(|| guarded(|| ortckpt_core::save_checkpoint(&path, spec, &options)))
        .map_err(|e| core_error(&source, e))?;
    Ok(summary.external_data_bytes)
}

/// The `(offset, length)` of every message of an ORT 1.15 `.pbseq` file (its framing only; the
/// messages are serialized TensorProtos). `source` names the file in error messages.
#[pyfunction]
fn pbseq_messages(py: Python<'_>, data: &Bound<'_, PyAny>, source: &str) -> PyResult<Vec<(usize, usize)>> {
    let bytes = BorrowedBytes::get(data)?;
    let view = bytes.view();
    let ranges = py
        .detach(|| guarded(|| ortckpt_core::pbseq_messages(view.slice())))
        .map_err(|e| core_error(source, e))?;
    Ok(ranges.into_iter().map(|r| (r.start, r.len())).collect())
}

/// (kind, group, momentum) of a file of an ORT 1.15 checkpoint folder.
type LegacyFileKind = (&'static str, Option<String>, Option<String>);

/// What the file `name` of an ORT 1.15 checkpoint folder holds: `None` (not part of the
/// checkpoint), `("trainable"|"frozen"|"custom_properties", None, None)`,
/// `("momentum", group, momentum)` or `("group_properties", group, None)`. `source` (the folder)
/// names the input in error messages.
#[pyfunction]
fn legacy_file_kind(name: &str, source: &str) -> PyResult<Option<LegacyFileKind>> {
    use ortckpt_core::LegacyFile::*;
    let kind =
        ortckpt_core::classify_legacy_file(name).map_err(|e| core_error(source, GuardedError::Core(e)))?;
    Ok(kind.map(|k| match k {
        Trainable => ("trainable", None, None),
        Frozen => ("frozen", None, None),
        CustomProperties => ("custom_properties", None, None),
        Momentum { group, momentum } => ("momentum", Some(group), Some(momentum)),
        GroupProperties { group } => ("group_properties", Some(group), None),
    }))
}

/// ORT's `ExternalCheckpointDataPath`: the checkpoint path with ".data" appended.
#[pyfunction]
fn external_data_path(path: PathBuf) -> String {
    ortckpt_core::external_data_path(&path).display().to_string()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MappedFile>()?;
    m.add_function(wrap_pyfunction!(index_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(write_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(external_data_path, m)?)?;
    m.add_function(wrap_pyfunction!(pbseq_messages, m)?)?;
    m.add_function(wrap_pyfunction!(legacy_file_kind, m)?)?;
    m.add("LEGACY_LR_PROPERTY", ortckpt_core::LEGACY_LR_PROPERTY)?;
    m.add("LEGACY_STEP_PROPERTY", ortckpt_core::LEGACY_STEP_PROPERTY)?;
    errors::register(m)?;
    m.add("WRITTEN_VERSION", ortckpt_core::WRITTEN_VERSION)?;
    m.add("DATA_ALIGNMENT", ortckpt_core::DATA_ALIGNMENT)?;
    m.add("WRITABLE_VERSIONS", ortckpt_core::WRITABLE_VERSIONS.to_vec())?;
    m.add("SUPPORTED_VERSIONS", ortckpt_core::SUPPORTED_VERSIONS.to_vec())?;
    m.add("DEFAULT_EXTERNAL_DATA_THRESHOLD", ortckpt_core::DEFAULT_EXTERNAL_DATA_THRESHOLD)?;
    m.add("EXTERNAL_ALIGNMENT", ortckpt_core::EXTERNAL_ALIGNMENT)?;
    m.add("MIN_EXTERNAL_BYTES", ortckpt_core::MIN_EXTERNAL_BYTES)?;
    Ok(())
}
