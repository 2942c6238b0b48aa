//! `ortckpt._native`: the PyO3 face of `ortckpt-core`. It converts types, releases the GIL for
//! verification, copies and writes, and maps errors; the format logic lives in the core crate.

mod adapter;
mod aggregate;
mod arrays;
mod atomic;
mod convert;
mod errors;
mod index;
mod legacy;
mod mapped;
mod npz;
mod pyobj;
mod remote;
mod reserve;
mod round;
mod safetensors;
mod sniff;
mod spelling;

use std::ffi::OsString;

use ortckpt_core::{DataType, LoadedCheckpoint};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::convert::spec_from_py;
use crate::errors::{core_error, guarded};
use crate::index::{Held, Index, TensorRecord};
use crate::mapped::{interruptible, path_arg, show, ExternalDataDir, MappedFile};

/// Rust's allocations in this extension: the system's, with an emergency reserve so that a
/// reader out of memory raises MemoryError rather than aborting (see `reserve`).
#[global_allocator]
static ALLOCATOR: reserve::WithReserve = reserve::WithReserve;

/// Verifies `data` (any buffer) as a checkpoint and returns its [`Index`]. Memory that cannot
/// change (`convert::unchanging_owner`: `bytes`, a `MappedFile`, ...) is used zero-copy; any other
/// buffer is copied first, since the state must not change with it. `source` names the input in
/// error messages. When the checkpoint has external data, `external` must be the external data file's
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
    let checkpoint = Held::of(data)?;
    let external = external.map(Held::of).transpose()?;
    let loaded = py
        .detach(|| guarded(|| LoadedCheckpoint::new(checkpoint, external, external_source.as_deref())))
        .map_err(|e| core_error(&source, e))?;
    Ok(Index::new(loaded, source))
}

/// Indexes a checkpoint of `size` bytes read on demand with `read(offset, length) -> bytes`
/// (`block_size` bytes at a time, runs of blocks in one call): only its structure is read now,
/// each tensor's bytes before their first use. `external_read` and `external_size` give the
/// external data file the same way. `source` and `external_source` name them in messages.
#[pyfunction]
#[pyo3(signature = (read, size, source, block_size, external_read=None, external_size=0, external_source=None))]
#[allow(clippy::too_many_arguments)]
fn index_paged(
    py: Python<'_>,
    read: Py<PyAny>,
    size: u64,
    source: &Bound<'_, PyString>,
    block_size: usize,
    external_read: Option<Py<PyAny>>,
    external_size: u64,
    external_source: Option<&Bound<'_, PyString>>,
) -> PyResult<Index> {
    let source = source.to_string_lossy().into_owned();
    let external_source = external_source.map(|s| s.to_string_lossy().into_owned());
    let checkpoint = remote::paged(read, size, block_size, &source)?;
    let external = match external_read {
        Some(read) => Some(remote::paged(
            read,
            external_size,
            block_size,
            external_source.as_deref().unwrap_or(&source),
        )?),
        None => None,
    };
    index::paged(py, checkpoint, external, source, external_source)
}

/// Opens the checkpoint `path` and its external data file (when present) as one consistent
/// pair, even while other programs save over it — memory-mapped (`mmap=True`) or read fully into
/// private memory — and verifies them; `source` names it in error messages. SourceTooLargeError
/// when the two opened files hold more than `max_bytes`, before a byte is read.
#[pyfunction]
#[pyo3(signature = (path, source, mmap=true, max_bytes=None))]
fn load_checkpoint(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    source: &Bound<'_, PyString>,
    mmap: bool,
    max_bytes: Option<u64>,
) -> PyResult<Index> {
    let path = path_arg(path)?;
    let source = source.to_string_lossy().into_owned();
    let mode = if mmap { ortckpt_core::OpenMode::Map } else { ortckpt_core::OpenMode::Read };
    let loaded =
        interruptible(py, &source, |keep_going| LoadedCheckpoint::open(&path, mode, max_bytes, keep_going))?;
    Ok(Index::new(loaded.map_bytes(|file| Held::file(py, file))?, source))
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

/// Completes or undoes an interrupted save of `path` and removes the files it left; returns
/// "clean", "leftovers", "new" or "old" (see `ortckpt.recover`).
#[pyfunction]
fn recover(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    let path = path_arg(path)?;
    let outcome =
        interruptible(py, &show(&path), |keep_going| ortckpt_core::recover_interruptible(&path, keep_going))?;
    Ok(outcome.as_str())
}

/// ORT's `ExternalCheckpointDataPath`: the checkpoint path with ".data" appended.
#[pyfunction]
fn external_data_path(path: &Bound<'_, PyAny>) -> PyResult<OsString> {
    Ok(ortckpt_core::external_data_path(&path_arg(path)?).into_os_string())
}

/// Where a load finds the external data of the checkpoint at `path` (beside a symlink's target
/// when `<path>.data` does not exist).
#[pyfunction]
fn external_data_location(path: &Bound<'_, PyAny>) -> PyResult<OsString> {
    Ok(ortckpt_core::external_data_location(&path_arg(path)?).into_os_string())
}

/// The SIMD level the core's hot loops run at in this process: "plain", "avx2" or "avx512" (what
/// the CPU has, capped by the `ORTCKPT_SIMD` environment variable; decided on first use).
#[pyfunction]
fn simd_level() -> &'static str {
    ortckpt_core::simd_level().name()
}

/// The core's table of data types, one `(code, numpy name, ORT name, bytes per element)` each
/// (0 bytes for strings), in code order: what `ortckpt._dtypes` builds on.
fn data_types() -> Vec<(i32, &'static str, &'static str, u64)> {
    DataType::ALL
        .iter()
        .map(|t| (t.code(), t.numpy_name(), t.name(), t.element_size().unwrap_or(0)))
        .collect()
}

// Every class is frozen and every function works on its arguments alone, so the module is safe
// without the GIL (free-threaded CPython); work on file bytes runs with the GIL released.
#[pymodule(gil_used = false)]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::silence_panic_output();
    reserve::rearm();
    adapter::register(m)?;
    sniff::register(m)?;
    m.add_class::<MappedFile>()?;
    m.add_class::<ExternalDataDir>()?;
    m.add_class::<atomic::AtomicOutput>()?;
    m.add_class::<atomic::StagedOutput>()?;
    m.add_class::<Index>()?;
    m.add_class::<remote::PagedBuffer>()?;
    m.add_class::<TensorRecord>()?;
    aggregate::register(m)?;
    round::register(m)?;
    m.add_function(wrap_pyfunction!(index_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(index_paged, m)?)?;
    m.add_function(wrap_pyfunction!(convert::is_unchanging, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(save_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(external_data_path, m)?)?;
    m.add_function(wrap_pyfunction!(load_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(external_data_location, m)?)?;
    m.add_function(wrap_pyfunction!(recover, m)?)?;
    m.add_function(wrap_pyfunction!(legacy::read_legacy_folder, m)?)?;
    m.add_function(wrap_pyfunction!(legacy::tensor_proto_values, m)?)?;
    m.add_function(wrap_pyfunction!(legacy::tensor_proto_field_values, m)?)?;
    m.add_function(wrap_pyfunction!(npz::read_npz, m)?)?;
    m.add_function(wrap_pyfunction!(npz::parse_npy_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(npz::npz_member_problem, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors::read_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(simd_level, m)?)?;
    m.add("CRASH_STEPS", ortckpt_core::CRASH_STEPS.to_vec())?;
    m.add("DATA_TYPES", data_types())?;
    m.add("NPZ_BUDGET_RATIO", ortckpt_core::NPZ_BUDGET_RATIO)?;
    m.add("NPZ_MIN_BUDGET", ortckpt_core::NPZ_MIN_BUDGET)?;
    m.add("SAFETENSORS_DTYPES", safetensors::dtypes())?;
    m.add("SAFETENSORS_MAX_HEADER_BYTES", ortckpt_core::SAFETENSORS_MAX_HEADER_BYTES)?;
    errors::register(m)?;
    m.add("WRITTEN_VERSION", ortckpt_core::WRITTEN_VERSION)?;
    m.add("WRITABLE_VERSIONS", ortckpt_core::WRITABLE_VERSIONS.to_vec())?;
    m.add("SUPPORTED_VERSIONS", ortckpt_core::SUPPORTED_VERSIONS.to_vec())?;
    m.add("DEFAULT_EXTERNAL_DATA_THRESHOLD", ortckpt_core::DEFAULT_EXTERNAL_DATA_THRESHOLD)?;
    Ok(())
}
