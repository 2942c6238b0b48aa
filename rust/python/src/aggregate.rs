//! The aggregation's Python face besides the round (`round.rs`): `AggregationLayout` (the
//! reference's structure, as the round takes it) and `UploadBytes` (a read-only view of an
//! upload's private memory, which a state loaded from it keeps instead of a copy).

use std::ffi::c_int;
use std::sync::Arc;

use ortckpt_core::aggregate::{Buffer, ExpectedMomentum, ExpectedParam, Layout};
use ortckpt_core::DataType;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::mapped::export_read_only;

fn data_type(code: i32) -> PyResult<DataType> {
    DataType::from_code(code).ok_or_else(|| PyValueError::new_err(format!("unknown data type code {code}")))
}

type ParamRow = (String, bool, i32, Vec<i64>);
type MomentumRow = (String, String, String, i32, Vec<i64>);

/// What every upload must match: the reference's parameters `(name, trainable, data type, dims)`
/// and the momentums to average `(group, parameter, momentum, data type, dims)`.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct AggregationLayout {
    inner: Layout,
}

#[pymethods]
impl AggregationLayout {
    #[new]
    fn new(params: Vec<ParamRow>, momentums: Vec<MomentumRow>) -> PyResult<Self> {
        let params = params
            .into_iter()
            .map(|(name, trainable, code, dims)| {
                Ok(ExpectedParam { name, trainable, data_type: data_type(code)?, dims })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let momentums = momentums
            .into_iter()
            .map(|(group, param, momentum, code, dims)| {
                Ok(ExpectedMomentum { group, param, momentum, data_type: data_type(code)?, dims })
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(AggregationLayout { inner: Layout { params, momentums } })
    }

    /// Float64 lanes of each averaged tensor (elements; twice that for complex), in slot order.
    fn slot_lanes(&self) -> Vec<usize> {
        self.inner.slot_lanes()
    }
}

impl AggregationLayout {
    /// The core's layout.
    pub(crate) fn layout(&self) -> &Layout {
        &self.inner
    }
}

/// A read-only buffer over a file upload's private memory (its checkpoint or its external data):
/// what a state loaded from the upload holds instead of a copy. It shares the memory (not the
/// upload: its open files are not kept), which is neither freed nor reused for another upload
/// while a view exists; nothing writes it after the read, so it is memory that cannot change (a
/// state keeps it without copying).
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct UploadBytes {
    bytes: Arc<Buffer>,
}

impl UploadBytes {
    /// The shared memory.
    pub(crate) fn buffer(&self) -> Arc<Buffer> {
        Arc::clone(&self.bytes)
    }

    pub(crate) fn of(py: Python<'_>, bytes: &Arc<Buffer>) -> Py<PyAny> {
        bytes.leave_pool(); // a state may keep it past the round
        match Py::new(py, UploadBytes { bytes: Arc::clone(bytes) }) {
            Ok(view) => view.into_any(),
            // allocation failure of a small object: fall back to a copy (never a panic)
            Err(_) => PyBytes::new(py, bytes.bytes()).into_any().unbind(),
        }
    }
}

#[pymethods]
impl UploadBytes {
    fn __len__(&self) -> usize {
        self.bytes.bytes().len()
    }

    /// Exports the bytes as a read-only 1-D buffer of unsigned bytes.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        // SAFETY: `view` comes from Python's buffer protocol; `slf` shares the private memory (an
        // anonymous mapping that does not move and is never written after the read), which
        // therefore stays valid and unchanged while it lives.
        unsafe { export_read_only(slf.as_any(), slf.get().bytes.bytes(), view, flags, "an upload's bytes") }
    }
}

/// Why `value` cannot be an upload's weight (a phrase completing "weight ... "), or `None`: the
/// core's one rule for given weights and weight properties alike.
#[pyfunction]
fn weight_problem(value: f64) -> Option<&'static str> {
    ortckpt_core::aggregate::weight_problem(value)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(weight_problem, m)?)?;
    m.add("MAX_WEIGHT", ortckpt_core::aggregate::MAX_WEIGHT)?;
    m.add("MIN_WEIGHT", ortckpt_core::aggregate::MIN_WEIGHT)?;
    m.add_class::<AggregationLayout>()?;
    m.add_class::<UploadBytes>()?;
    Ok(())
}
