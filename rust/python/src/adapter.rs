//! ORT adapter files (`.onnx_adapter`): the binding of the core's adapter reader and writer.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::BorrowedBytes;
use crate::errors::{core_error, guarded, GuardedError};
use crate::index::{Held, Index};
use crate::mapped::{interruptible, path_arg, show};

/// (format_version, adapter_version, model_version, the adapter as a checkpoint index).
type AdapterContents = (i32, i32, i32, Index);

/// The adapter `adapter` over `held` (the bytes it was indexed from) as a lazy checkpoint index:
/// no value is copied, and no Python object is made per tensor until one is asked for.
fn contents(adapter: &ortckpt_core::AdapterIndex, held: Held, source: &str) -> PyResult<AdapterContents> {
    let built = guarded(|| {
        let index = adapter.to_checkpoint_index()?;
        ortckpt_core::LoadedCheckpoint::from_index(index, held)
    });
    let loaded = built.map_err(|e| core_error(source, e))?;
    let index = Index::new(loaded, source.to_owned());
    Ok((adapter.format_version, adapter.adapter_version, adapter.model_version, index))
}

/// Reads the adapter file `path` (regular files only) into private memory and checks it.
#[pyfunction]
fn read_adapter(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<AdapterContents> {
    let path = path_arg(path)?;
    let source = show(&path);
    let file = interruptible(py, &source, |keep_going| ortckpt_core::read_adapter_file(&path, keep_going))?;
    let (adapter, bytes) = file.into_parts();
    contents(&adapter, Held::file(py, bytes)?, &source)
}

/// Checks `data` (any buffer; used in place when its memory cannot change, else copied first, so
/// it cannot change while it is read) as an adapter file; `source` names it in error messages.
#[pyfunction]
fn read_adapter_bytes(data: &Bound<'_, PyAny>, source: &str) -> PyResult<AdapterContents> {
    let py = data.py();
    let held = Held::of(data)?;
    let (base, len) = ortckpt_core::CheckpointBytes::raw(&held);
    // SAFETY: `held` keeps these bytes alive and unchanged while it lives, past this call.
    let bytes = unsafe { std::slice::from_raw_parts(base, len) };
    let adapter =
        py.detach(|| guarded(|| ortckpt_core::index_adapter(bytes))).map_err(|e| core_error(source, e))?;
    contents(&adapter, held, source)
}

/// Serializes `parameters` — (name, ORT data type code, dims, values as any buffer) — as an
/// adapter file and returns its bytes.
#[pyfunction]
fn serialize_adapter(
    py: Python<'_>,
    parameters: Vec<(String, i32, Vec<i64>, Bound<'_, PyAny>)>,
    adapter_version: i32,
    model_version: i32,
) -> PyResult<Py<PyBytes>> {
    let mut held = Vec::with_capacity(parameters.len());
    for (name, code, dims, data) in &parameters {
        let Some(data_type) = ortckpt_core::DataType::from_code(*code) else {
            let detail = format!("adapter parameter {name:?}: unknown data type code {code}");
            return Err(core_error(
                "<adapter>",
                GuardedError::Core(ortckpt_core::Error::InvalidSpec { detail }),
            ));
        };
        held.push((name.as_str(), data_type, dims.as_slice(), BorrowedBytes::get(data)?));
    }
    let views: Vec<_> = held.iter().map(|h| h.3.view()).collect();
    let specs: Vec<_> = held
        .iter()
        .zip(&views)
        .map(|((name, data_type, dims, _), view)| ortckpt_core::AdapterParameterSpec {
            name,
            data_type: *data_type,
            dims,
            data: view.slice(),
        })
        .collect();
    let bytes = guarded(|| ortckpt_core::serialize_adapter(&specs, adapter_version, model_version))
        .map_err(|e| core_error("<adapter>", e))?;
    Ok(PyBytes::new(py, &bytes).unbind())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_adapter, m)?)?;
    m.add_function(wrap_pyfunction!(read_adapter_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(serialize_adapter, m)?)?;
    Ok(())
}
