//! ORT adapter files (`.onnx_adapter`): the binding of the core's adapter reader and writer.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::convert::BorrowedBytes;
use crate::errors::{core_error, guarded, GuardedError};
use crate::mapped::{interruptible, path_arg, show};

/// One parameter: (name, ORT data type code, dims, values as little-endian bytes).
type AdapterTensor = (String, i32, Vec<i64>, Py<PyBytes>);

/// (format_version, adapter_version, model_version, parameters in file order).
type AdapterContents = (i32, i32, i32, Vec<AdapterTensor>);

/// The contents of the adapter `index` describes, values copied out of `data` (what was indexed).
fn contents(py: Python<'_>, index: &ortckpt_core::AdapterIndex, data: &[u8]) -> AdapterContents {
    let tensors = index
        .parameters
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                p.data_type as i32,
                p.dims.clone(),
                PyBytes::new(py, data.get(p.offset..p.offset + p.len).unwrap_or_default()).unbind(),
            )
        })
        .collect();
    (index.format_version, index.adapter_version, index.model_version, tensors)
}

/// Reads the adapter file `path` (regular files only) into private memory and checks it.
#[pyfunction]
fn read_adapter(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<AdapterContents> {
    let path = path_arg(path)?;
    let file =
        interruptible(py, &show(&path), |keep_going| ortckpt_core::read_adapter_file(&path, keep_going))?;
    Ok(contents(py, &file.index, file.bytes()))
}

/// Checks `data` (any buffer; copied first, so it cannot change while it is read) as an adapter
/// file; `source` names it in error messages.
#[pyfunction]
fn read_adapter_bytes(py: Python<'_>, data: &Bound<'_, PyAny>, source: &str) -> PyResult<AdapterContents> {
    let owned = BorrowedBytes::get(data)?.view().slice().to_vec();
    let index =
        py.detach(|| guarded(|| ortckpt_core::index_adapter(&owned))).map_err(|e| core_error(source, e))?;
    Ok(contents(py, &index, &owned))
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
