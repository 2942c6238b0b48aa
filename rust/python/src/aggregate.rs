//! The aggregation kernel's Python face: `AggregationLayout` (the reference's structure), `Upload`
//! (one upload in private memory, indexed) and `accumulate` (check and add one upload, GIL
//! released). A rejection is returned as `(kind, message)`; reader errors are raised.

use numpy::{PyArray1, PyArrayMethods};
use ortckpt_core::aggregate::{
    self, ExpectedMomentum, ExpectedParam, Layout, Rejection, UploadError, WeightRule,
};
use ortckpt_core::{CheckpointIndex, DataType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{core_error, guarded};
use crate::mapped::{interruptible, path_arg, show, MappedFile};

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

/// One upload, indexed, its bytes in private memory (or a `bytes` object).
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct Upload {
    index: CheckpointIndex,
    checkpoint: Py<PyAny>,
    external: Option<Py<PyAny>>,
    identity: Option<(u64, u64)>,
    source: String,
}

fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> &'a [u8] {
    if let Ok(file) = obj.cast::<MappedFile>() {
        return file.get().core().bytes();
    }
    obj.cast::<PyBytes>().map(|b| b.as_bytes()).unwrap_or_default()
}

fn rejection(r: Rejection) -> (String, String) {
    (r.kind.to_owned(), r.message)
}

/// A value, or a rejection `(kind, message)`.
#[derive(IntoPyObject)]
pub(crate) enum Or<T> {
    Value(T),
    Rejected((String, String)),
}

#[pymethods]
impl Upload {
    /// Reads the local checkpoint `path` (and `path.data`) into private memory, at most
    /// `max_bytes` bytes in all, and indexes it. Returns `(kind, message)` for a rejection.
    #[staticmethod]
    #[pyo3(signature = (path, max_bytes=None))]
    fn read(py: Python<'_>, path: &Bound<'_, PyAny>, max_bytes: Option<u64>) -> PyResult<Or<Upload>> {
        let path = path_arg(path)?;
        let source = show(&path);
        let mut rejected = None;
        let read = interruptible(py, &source, |keep_going| {
            match aggregate::read_file(&path, max_bytes, keep_going) {
                Ok(file) => {
                    let index = aggregate::index_upload(
                        file.checkpoint.bytes(),
                        file.external.as_ref().map(|e| e.bytes()),
                    )?;
                    Ok(Some((file, index)))
                }
                Err(UploadError::Rejected(r)) => {
                    rejected = Some(r);
                    Ok(None)
                }
                Err(UploadError::Unreadable(e)) => Err(e),
            }
        })?;
        let Some((file, index)) = read else {
            return Ok(Or::Rejected(rejection(
                rejected.unwrap_or_else(|| Rejection::new("unreadable", "unreadable")),
            )));
        };
        Ok(Or::Value(Upload {
            index,
            checkpoint: Py::new(py, MappedFile::wrap(file.checkpoint))?.into_any(),
            external: file
                .external
                .map(|e| Py::new(py, MappedFile::wrap(e)).map(Py::into_any))
                .transpose()?,
            identity: Some(file.identity),
            source,
        }))
    }

    /// Indexes an upload given as `bytes` (and its external data as `bytes`); `source` names it.
    #[staticmethod]
    #[pyo3(signature = (data, source, external=None))]
    fn from_bytes(
        py: Python<'_>,
        data: Bound<'_, PyBytes>,
        source: String,
        external: Option<Bound<'_, PyBytes>>,
    ) -> PyResult<Upload> {
        let view = data.as_bytes();
        let ext = external.as_ref().map(|e| e.as_bytes());
        let index = py
            .detach(|| guarded(|| aggregate::index_upload(view, ext)))
            .map_err(|e| core_error(&source, e))?;
        Ok(Upload {
            index,
            checkpoint: data.into_any().unbind(),
            external: external.map(|e| e.into_any().unbind()),
            identity: None,
            source,
        })
    }

    /// (device, inode) of a file upload; None for bytes.
    #[getter]
    fn identity(&self) -> Option<(u64, u64)> {
        self.identity
    }

    /// The checkpoint's bytes (`bytes`, or a `MappedFile` read into private memory).
    #[getter]
    fn checkpoint(&self, py: Python<'_>) -> Py<PyAny> {
        self.checkpoint.clone_ref(py)
    }

    /// The external data file's bytes, when there is one.
    #[getter]
    fn external(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.external.as_ref().map(|e| e.clone_ref(py))
    }

    /// Whether the checkpoint is nominal.
    #[getter]
    fn is_nominal(&self) -> bool {
        self.index.is_nominal
    }
}

/// Checks `upload` against `layout` and adds it into `sums` (one float64 array per slot, as
/// `AggregationLayout.slot_lanes`) and `bounds` (one float64 per slot), weighted by `weight` or
/// else by the property `weight_property` (else 1). Returns the weight, or `(kind, message)` when
/// the upload is rejected (then nothing was added). Runs with the GIL released, on every core.
#[pyfunction]
#[pyo3(signature = (upload, layout, sums, bounds, weight=None, weight_property=None))]
pub(crate) fn accumulate(
    py: Python<'_>,
    upload: &Bound<'_, Upload>,
    layout: &Bound<'_, AggregationLayout>,
    sums: Vec<Bound<'_, PyArray1<f64>>>,
    bounds: Bound<'_, PyArray1<f64>>,
    weight: Option<f64>,
    weight_property: Option<String>,
) -> PyResult<Or<f64>> {
    let up = upload.get();
    let layout = &layout.get().inner;
    let rule = match (weight, weight_property) {
        (Some(w), _) => WeightRule::Given(w),
        (None, Some(p)) => WeightRule::Property(p),
        (None, None) => WeightRule::Given(1.0),
    };
    let checkpoint = up.checkpoint.bind(py);
    let external = up.external.as_ref().map(|e| e.bind(py));
    let data = bytes_of(checkpoint);
    let ext = external.map(bytes_of);
    let mut held = sums.iter().map(|s| s.try_readwrite()).collect::<Result<Vec<_>, _>>()?;
    let mut slices = held.iter_mut().map(|s| s.as_slice_mut()).collect::<Result<Vec<_>, _>>()?;
    let mut bounds_rw = bounds.try_readwrite()?;
    let bounds = bounds_rw.as_slice_mut()?;
    if bounds.len() != slices.len() {
        return Err(PyValueError::new_err("one bound per sum is needed"));
    }
    let index = &up.index;
    let outcome = py.detach(|| {
        guarded(|| Ok(aggregate::add_upload(layout, index, data, ext, &rule, &mut slices, bounds)))
    });
    match outcome {
        Ok(Ok(w)) => Ok(Or::Value(w)),
        Ok(Err(r)) => Ok(Or::Rejected(rejection(r))),
        Err(e) => Err(core_error(&up.source, e)),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AggregationLayout>()?;
    m.add_class::<Upload>()?;
    m.add_function(wrap_pyfunction!(accumulate, m)?)?;
    Ok(())
}
