//! `ortckpt._native`: the PyO3 face of `ortckpt-core`. It converts types, releases the GIL for
//! verification, copies and writes, and maps errors; the format logic lives in the core crate.

mod arrays;
mod atomic;
mod convert;
mod errors;
mod index;
mod mapped;
mod npz;

use std::ffi::OsString;
use std::path::PathBuf;

use ortckpt_core::LengthCheck;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::convert::{spec_from_py, BorrowedBytes};
use crate::errors::{core_error, guarded, GuardedError};
use crate::index::{Index, TensorRecord};
use crate::mapped::{interruptible, path_arg, show, MappedFile};

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
    source: &Bound<'_, PyString>,
    external: Option<&Bound<'_, PyAny>>,
    external_source: Option<&Bound<'_, PyString>>,
) -> PyResult<Index> {
    // Names for messages only: lossy, so a non-UTF-8 file name (surrogate escapes) still works.
    let source = source.to_string_lossy().into_owned();
    let external_source = external_source.map(|s| s.to_string_lossy().into_owned());
    let bytes = BorrowedBytes::get_immutable(data)?;
    let view = bytes.view();
    // A mapped file's tensor lengths sit beside their values, one page per tensor: comparing
    // them on first use (`Index.prepare`) lets loading read the structure alone.
    let mapped = data.cast::<MappedFile>().is_ok_and(|file| file.get().core().is_mapped());
    let lengths = if mapped { LengthCheck::OnFirstUse } else { LengthCheck::WhenIndexing };
    let external_len =
        external.map(|e| BorrowedBytes::get_immutable(e).map(|b| b.view().len())).transpose()?;
    let missing = match external_source {
        Some(name) => format!("its external data file {name} is missing"),
        None => "no external data was given (pass external_data=)".to_owned(),
    };
    let index = py
        .detach(|| {
            guarded(|| {
                // A MappedFile's pages can be rewritten by another process while they are read:
                // the core's raw entry point reads each byte once, through copies.
                // SAFETY: `bytes` holds the buffer (and so keeps the range mapped) until this
                // closure has returned.
                let index =
                    unsafe { ortckpt_core::index_checkpoint_raw(view.as_ptr(), view.len(), lengths) }?;
                if index.has_external_data {
                    match external_len {
                        Some(len) => ortckpt_core::check_external_ranges(&index, len as u64)?,
                        None => return Err(ortckpt_core::Error::ExternalDataMissing { detail: missing }),
                    }
                }
                Ok(index)
            })
        })
        .map_err(|e| core_error(&source, e))?;
    Ok(Index::new(index, source, data.clone().unbind(), external.map(|e| e.clone().unbind())))
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

/// Saves a checkpoint spec to `path` crash-consistently (see docs/format.md, "Crash
/// consistency"), streaming tensor bytes from the spec's buffers. When the tensor data exceed
/// `external_data_threshold` bytes, parameters go to `path + ".data"` (momentums too with
/// `external_momentums`), committed together with the checkpoint; `None` keeps everything inline
/// (and removes a stale `.data`).
#[pyfunction]
#[pyo3(signature = (path, spec, external_data_threshold=None, external_momentums=false))]
fn save_checkpoint(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    spec: &Bound<'_, PyDict>,
    external_data_threshold: Option<u64>,
    external_momentums: bool,
) -> PyResult<()> {
    let path = path_arg(path)?;
    let held = spec_from_py(spec)?;
    let spec = held.spec();
    let options = ortckpt_core::SaveOptions { external_data_threshold, external_momentums };
    // Interruptible: the wait for another process's directory lock checks for Ctrl-C.
    interruptible(py, &show(&path), |keep_going| {
        ortckpt_core::save_checkpoint_interruptible(&path, spec, &options, keep_going)
    })?;
    Ok(())
}

/// Opens a checkpoint and its external data file (when present) as one consistent pair, even
/// while other programs save over it: memory-mapped (`mmap=True`) or read fully into private
/// memory. Returns (checkpoint, external or None).
#[pyfunction]
#[pyo3(signature = (path, mmap=true))]
fn open_checkpoint(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    mmap: bool,
) -> PyResult<(MappedFile, Option<MappedFile>)> {
    let path = path_arg(path)?;
    let mode = if mmap { ortckpt_core::OpenMode::Map } else { ortckpt_core::OpenMode::Read };
    let opened =
        interruptible(py, &show(&path), |keep_going| ortckpt_core::open_checkpoint(&path, mode, keep_going))?;
    Ok((MappedFile::wrap(opened.checkpoint), opened.external.map(MappedFile::wrap)))
}

/// Completes or undoes an interrupted save of `path` and removes the files it left; returns
/// "clean", "leftovers", "new" or "old" (see `ortckpt.recover`).
#[pyfunction]
fn recover(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let path = path_arg(path)?;
    let outcome =
        interruptible(py, &show(&path), |keep_going| ortckpt_core::recover_interruptible(&path, keep_going))?;
    Ok(outcome.as_str())
}

/// The helper files (journal, backups, temporary files) of interrupted or running saves of
/// `path`.
#[pyfunction]
fn helper_files(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Vec<OsString>> {
    let path = path_arg(path)?;
    let files = py
        .detach(|| guarded(|| ortckpt_core::helper_files(&path)))
        .map_err(|e| core_error(&show(&path), e))?;
    Ok(files.into_iter().map(PathBuf::into_os_string).collect())
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
fn external_data_path(path: &Bound<'_, PyAny>) -> PyResult<OsString> {
    Ok(ortckpt_core::external_data_path(&path_arg(path)?).into_os_string())
}

// Every class is frozen and every function works on its arguments alone, so the module is safe
// without the GIL (free-threaded CPython); work on file bytes runs with the GIL released.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::silence_panic_output();
    m.add_class::<MappedFile>()?;
    m.add_class::<atomic::AtomicOutput>()?;
    m.add_class::<atomic::StagedOutput>()?;
    m.add_class::<Index>()?;
    m.add_class::<TensorRecord>()?;
    m.add_function(wrap_pyfunction!(index_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(external_data_path, m)?)?;
    m.add_function(wrap_pyfunction!(open_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(recover, m)?)?;
    m.add_function(wrap_pyfunction!(helper_files, m)?)?;
    m.add_function(wrap_pyfunction!(pbseq_messages, m)?)?;
    m.add_function(wrap_pyfunction!(legacy_file_kind, m)?)?;
    m.add_function(wrap_pyfunction!(npz::read_npz, m)?)?;
    m.add("LEGACY_LR_PROPERTY", ortckpt_core::LEGACY_LR_PROPERTY)?;
    m.add("LEGACY_STEP_PROPERTY", ortckpt_core::LEGACY_STEP_PROPERTY)?;
    m.add("CRASH_STEPS", ortckpt_core::CRASH_STEPS.to_vec())?;
    m.add("NPZ_BUDGET_RATIO", ortckpt_core::NPZ_BUDGET_RATIO)?;
    m.add("NPZ_MIN_BUDGET", ortckpt_core::NPZ_MIN_BUDGET)?;
    errors::register(m)?;
    m.add("WRITTEN_VERSION", ortckpt_core::WRITTEN_VERSION)?;
    m.add("WRITABLE_VERSIONS", ortckpt_core::WRITABLE_VERSIONS.to_vec())?;
    m.add("SUPPORTED_VERSIONS", ortckpt_core::SUPPORTED_VERSIONS.to_vec())?;
    m.add("DEFAULT_EXTERNAL_DATA_THRESHOLD", ortckpt_core::DEFAULT_EXTERNAL_DATA_THRESHOLD)?;
    Ok(())
}
