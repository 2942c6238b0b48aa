//! The aggregation kernel's Python face: `AggregationLayout` (the reference's structure), `Upload`
//! (one upload in private memory, indexed) and `accumulate` (check and add one upload, GIL
//! released). A rejection is returned as `(kind, message)`; reader errors are raised.

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use ortckpt_core::aggregate::{
    self, Buffer, ExpectedMomentum, ExpectedParam, HeldFiles, Lanes, Layout, Located, Rejection, RowSource,
    UploadError, WeightRule,
};
use ortckpt_core::{CheckpointIndex, DataType};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

use crate::errors::{core_error, guarded, GuardedError};
use crate::mapped::{export_read_only, interruptible, path_arg, show};

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
    contents: Contents,
    identity: Option<(u64, u64)>,
    source: String,
}

/// An upload's bytes: read from its files (kept open for `reader`), or given as `bytes`.
enum Contents {
    // shared with the `UploadBytes` views of a state loaded from the upload (Arc: the memory goes
    // back to the pool when the last of them is gone)
    File { checkpoint: Arc<Buffer>, external: Option<Arc<Buffer>>, files: Mutex<Option<Box<HeldFiles>>> },
    Bytes { checkpoint: Py<PyBytes>, external: Option<Py<PyBytes>> },
}

impl Contents {
    fn slices<'a>(&'a self, py: Python<'a>) -> (&'a [u8], Option<&'a [u8]>) {
        match self {
            Contents::File { checkpoint, external, .. } => {
                (checkpoint.bytes(), external.as_deref().map(Buffer::bytes))
            }
            Contents::Bytes { checkpoint, external } => {
                (checkpoint.bind(py).as_bytes(), external.as_ref().map(|e| e.bind(py).as_bytes()))
            }
        }
    }
}

/// Where an averaged tensor is in an upload: (start, end, in the external file, data type code).
type Location = (u64, u64, bool, i32);

fn location(loc: &Located, data_type: DataType) -> Location {
    (loc.bytes.start, loc.bytes.end, loc.external, data_type.code())
}

fn located(loc: Location) -> PyResult<Located> {
    let lanes = DataType::from_code(loc.3)
        .and_then(Lanes::of)
        .ok_or_else(|| PyValueError::new_err(format!("data type {} is not averaged", loc.3)))?;
    if loc.0 > loc.1 {
        return Err(PyValueError::new_err("a location's start is past its end"));
    }
    Ok(Located { lanes, bytes: loc.0..loc.1, external: loc.2 })
}

enum Held {
    Files(Box<HeldFiles>),
    Bytes(Py<PyBytes>, Option<Py<PyBytes>>),
}

/// An upload's values, read again chunk by chunk after its check: `pread` from its files (kept
/// open; `confirm_unchanged` tells whether they are still the versions that were checked), or
/// from its bytes.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct LaneReader {
    held: Held,
    source: String,
}

impl LaneReader {
    /// Fills `out` with lanes of the tensor at `loc` from lane `first`.
    fn fill(&self, py: Python<'_>, loc: &Located, first: usize, out: &mut [f64]) -> PyResult<()> {
        match &self.held {
            Held::Files(files) => {
                let mut buf = Vec::new();
                py.detach(|| guarded(|| files.read_lanes(loc, first, out, &mut buf)))
                    .map_err(|e| core_error(&self.source, e))?;
            }
            Held::Bytes(data, external) => {
                let width = loc.lanes.width();
                let owner = if loc.external { external.as_ref().unwrap_or(data) } else { data };
                let bytes = owner.bind(py).as_bytes();
                let start = (loc.bytes.start as usize).saturating_add(first.saturating_mul(width));
                let end = start.saturating_add(out.len().saturating_mul(width));
                let Some(part) = bytes.get(start..end).filter(|_| end as u64 <= loc.bytes.end) else {
                    return Err(PyValueError::new_err("a lane range outside the upload"));
                };
                aggregate::decode_into(loc.lanes, part, out);
            }
        }
        Ok(())
    }
}

#[pymethods]
impl LaneReader {
    /// Raises CheckpointChangedError when the upload's files are no longer the versions that were
    /// checked (size or modification time changed); nothing for bytes. Called once a round's
    /// reads are done.
    fn confirm_unchanged(&self, py: Python<'_>) -> PyResult<()> {
        match &self.held {
            Held::Files(files) => {
                py.detach(|| guarded(|| files.confirm_unchanged())).map_err(|e| core_error(&self.source, e))
            }
            Held::Bytes(..) => Ok(()),
        }
    }

    /// `len(out)` lanes of the tensor at `location`, from lane `first`, into the float64 array `out`.
    fn read_into(
        &self,
        py: Python<'_>,
        location: Location,
        first: usize,
        out: Bound<'_, PyArray1<f64>>,
    ) -> PyResult<()> {
        let mut held = out.try_readwrite()?;
        self.fill(py, &located(location)?, first, held.as_slice_mut()?)
    }

    /// `count` lanes of the tensor at `location` (from `Upload.locate`), from lane `first`, as a
    /// new float64 array.
    fn read<'py>(
        &self,
        py: Python<'py>,
        location: Location,
        first: usize,
        count: usize,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let mut out = vec![0.0f64; count];
        self.fill(py, &located(location)?, first, &mut out)?;
        Ok(PyArray1::from_vec(py, out))
    }
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
    fn of(py: Python<'_>, bytes: &Arc<Buffer>) -> Py<PyAny> {
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
            identity: Some(file.identity),
            contents: Contents::File {
                checkpoint: Arc::new(file.checkpoint),
                external: file.external.map(Arc::new),
                files: Mutex::new(Some(Box::new(file.files))),
            },
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
            identity: None,
            contents: Contents::Bytes { checkpoint: data.unbind(), external: external.map(Bound::unbind) },
            source,
        })
    }

    /// (device, inode) of a file upload; None for bytes.
    #[getter]
    fn identity(&self) -> Option<(u64, u64)> {
        self.identity
    }

    /// The checkpoint's bytes: the given `bytes`, or for a file upload a read-only view of the
    /// private memory it was read into (no copy), which keeps this upload alive.
    #[getter]
    fn checkpoint(slf: &Bound<'_, Self>) -> Py<PyAny> {
        match &slf.get().contents {
            Contents::Bytes { checkpoint, .. } => checkpoint.clone_ref(slf.py()).into_any(),
            Contents::File { checkpoint, .. } => UploadBytes::of(slf.py(), checkpoint),
        }
    }

    /// The external data file's bytes, when there is one (as `checkpoint`).
    #[getter]
    fn external(slf: &Bound<'_, Self>) -> Option<Py<PyAny>> {
        match &slf.get().contents {
            Contents::Bytes { external, .. } => external.as_ref().map(|e| e.clone_ref(slf.py()).into_any()),
            Contents::File { external: Some(external), .. } => Some(UploadBytes::of(slf.py(), external)),
            Contents::File { external: None, .. } => None,
        }
    }

    /// Where each averaged tensor of `layout` is in this upload (structure checked as by
    /// `accumulate`), or `(kind, message)` when it does not match.
    fn locate(&self, layout: &Bound<'_, AggregationLayout>) -> Or<Vec<Location>> {
        let layout = &layout.get().inner;
        match aggregate::check_structure(&self.index, layout) {
            Ok(found) => {
                Or::Value(found.iter().zip(layout.slot_types()).map(|(l, t)| location(l, t)).collect())
            }
            Err(r) => Or::Rejected(rejection(r)),
        }
    }

    /// A reader of this upload's values that outlives its bytes in memory: its files held open
    /// (confirmed to be the versions read), or its bytes.
    fn reader(&self, py: Python<'_>) -> PyResult<LaneReader> {
        let held = match &self.contents {
            Contents::File { files, .. } => {
                let taken = files.lock().ok().and_then(|mut f| f.take());
                Held::Files(taken.ok_or_else(|| PyValueError::new_err("reader() was already called"))?)
            }
            Contents::Bytes { checkpoint, external } => {
                Held::Bytes(checkpoint.clone_ref(py), external.as_ref().map(|e| e.clone_ref(py)))
            }
        };
        Ok(LaneReader { held, source: self.source.clone() })
    }

    /// Whether the checkpoint is nominal.
    #[getter]
    fn is_nominal(&self) -> bool {
        self.index.is_nominal
    }
}

/// How an upload's weight is chosen: `weight` when given, else the property `weight_property`,
/// else 1.
fn weight_rule(weight: Option<f64>, weight_property: Option<&str>) -> WeightRule {
    match (weight, weight_property) {
        (Some(w), _) => WeightRule::Given(w),
        (None, Some(name)) => WeightRule::Property(name.to_owned()),
        (None, None) => WeightRule::Given(1.0),
    }
}

/// A kernel call's outcome for Python: the value, `(kind, message)` for a rejection, or the
/// error (naming `source`).
fn verdict<T>(outcome: Result<Result<T, Rejection>, GuardedError>, source: &str) -> PyResult<Or<T>> {
    match outcome {
        Ok(Ok(value)) => Ok(Or::Value(value)),
        Ok(Err(r)) => Ok(Or::Rejected(rejection(r))),
        Err(e) => Err(core_error(source, e)),
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
    let rule = weight_rule(weight, weight_property.as_deref());
    let (data, ext) = up.contents.slices(py);
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
    verdict(outcome, &up.source)
}

/// `accumulate`'s checks without the addition (for the robust methods, which do not keep the
/// FedAvg sums): returns the weight, `None` when a bound would become infinite (nothing changed:
/// only the sums can tell whether this upload overflows, so make them and call `accumulate`),
/// or `(kind, message)` when the upload is rejected. GIL released, on every core.
#[pyfunction]
#[pyo3(signature = (upload, layout, bounds, weight=None, weight_property=None))]
pub(crate) fn check_upload(
    py: Python<'_>,
    upload: &Bound<'_, Upload>,
    layout: &Bound<'_, AggregationLayout>,
    bounds: Bound<'_, PyArray1<f64>>,
    weight: Option<f64>,
    weight_property: Option<String>,
) -> PyResult<Or<Option<f64>>> {
    let up = upload.get();
    let layout = &layout.get().inner;
    let rule = weight_rule(weight, weight_property.as_deref());
    let (data, ext) = up.contents.slices(py);
    let mut bounds_rw = bounds.try_readwrite()?;
    let bounds = bounds_rw.as_slice_mut()?;
    let index = &up.index;
    let outcome =
        py.detach(|| guarded(|| Ok(aggregate::check_upload(layout, index, data, ext, &rule, bounds))));
    verdict(outcome, &up.source)
}

/// What became of one upload of `add_files`: `(status, weight, kind, message, error, identity)`
/// with status `"added"` (weight), `"duplicate"`, `"rejected"` (kind, message) or `"error"` (the
/// reader's exception, not raised); identity `(device, inode)` when the file was read.
type FileVerdict = (&'static str, f64, String, String, Option<PyErr>, Option<(u64, u64)>);

/// Checks the local upload files `paths` (weights: `weights[i]`, else the property
/// `weight_property`, else 1) against `layout` and adds the accepted ones into `sums` and
/// `bounds` (as `accumulate`), the whole loop with the GIL released and on every core. `seen`
/// are the identities already counted this round. One verdict per path, in order.
#[pyfunction]
#[pyo3(signature = (paths, weights, weight_property, layout, sums, bounds, max_bytes, seen))]
#[allow(clippy::too_many_arguments)] // one call per round: every input is a separate argument
pub(crate) fn add_files(
    py: Python<'_>,
    paths: Vec<Bound<'_, PyAny>>,
    weights: Vec<Option<f64>>,
    weight_property: Option<String>,
    layout: &Bound<'_, AggregationLayout>,
    sums: Vec<Bound<'_, PyArray1<f64>>>,
    bounds: Bound<'_, PyArray1<f64>>,
    max_bytes: Option<u64>,
    seen: Vec<(u64, u64)>,
) -> PyResult<Vec<FileVerdict>> {
    let items = file_items(&paths, weights, weight_property.as_deref())?;
    let layout = &layout.get().inner;
    let mut held = sums.iter().map(|s| s.try_readwrite()).collect::<Result<Vec<_>, _>>()?;
    let mut slices = held.iter_mut().map(|s| s.as_slice_mut()).collect::<Result<Vec<_>, _>>()?;
    let mut bounds_rw = bounds.try_readwrite()?;
    let bounds = bounds_rw.as_slice_mut()?;
    let mut seen: std::collections::HashSet<(u64, u64)> = seen.into_iter().collect();
    let source = items.first().map_or_else(String::new, |i| show(&i.path));
    let verdicts = interruptible(py, &source, |keep_going| {
        aggregate::add_files(&items, layout, max_bytes, &mut seen, &mut slices, bounds, keep_going)
    })?;
    Ok(verdicts.into_iter().zip(&items).map(|(v, item)| file_verdict(v, item)).collect())
}

/// What became of one upload of `check_files`: `add_files`' verdict (status `"accepted"` for
/// `"added"`) and, when accepted, a reader of its held files and where its tensors are.
type ScreenedVerdict = (FileVerdict, Option<(LaneReader, Vec<Location>)>);

/// `add_files`' checks and verdicts without the addition (`bounds` raised as it raises them),
/// for the robust methods: each accepted upload's files stay open in a `LaneReader`. Stops
/// before the first upload whose bounds would become infinite: fewer verdicts than paths then
/// (the caller goes on with the rest one by one, making FedAvg's sums). GIL released, on every
/// core.
#[pyfunction]
#[pyo3(signature = (paths, weights, weight_property, layout, bounds, max_bytes, seen))]
#[allow(clippy::too_many_arguments)] // one call per batch: every input is a separate argument
pub(crate) fn check_files(
    py: Python<'_>,
    paths: Vec<Bound<'_, PyAny>>,
    weights: Vec<Option<f64>>,
    weight_property: Option<String>,
    layout: &Bound<'_, AggregationLayout>,
    bounds: Bound<'_, PyArray1<f64>>,
    max_bytes: Option<u64>,
    seen: Vec<(u64, u64)>,
) -> PyResult<Vec<ScreenedVerdict>> {
    let items = file_items(&paths, weights, weight_property.as_deref())?;
    let layout = &layout.get().inner;
    let mut bounds_rw = bounds.try_readwrite()?;
    let bounds = bounds_rw.as_slice_mut()?;
    let mut seen: std::collections::HashSet<(u64, u64)> = seen.into_iter().collect();
    let source = items.first().map_or_else(String::new, |i| show(&i.path));
    let verdicts = interruptible(py, &source, |keep_going| {
        aggregate::check_files(&items, layout, max_bytes, &mut seen, bounds, keep_going)
    })?;
    let types = layout.slot_types();
    Ok(verdicts
        .into_iter()
        .zip(&items)
        .map(|(v, item)| match v {
            aggregate::Screened::Accepted { weight, identity, files, located } => {
                let reader = LaneReader { held: Held::Files(Box::new(files)), source: show(&item.path) };
                let where_ = located.iter().zip(&types).map(|(l, t)| location(l, *t)).collect();
                (
                    ("accepted", weight, String::new(), String::new(), None, Some(identity)),
                    Some((reader, where_)),
                )
            }
            aggregate::Screened::Other(v) => (file_verdict(v, item), None),
        })
        .collect())
}

/// The items of `add_files` / `check_files`: each path with its weight rule.
fn file_items(
    paths: &[Bound<'_, PyAny>],
    weights: Vec<Option<f64>>,
    weight_property: Option<&str>,
) -> PyResult<Vec<aggregate::FileItem>> {
    if weights.len() != paths.len() {
        return Err(PyValueError::new_err("one weight (or None) per path is needed"));
    }
    paths
        .iter()
        .zip(weights)
        .map(|(p, w)| Ok(aggregate::FileItem { path: path_arg(p)?, rule: weight_rule(w, weight_property) }))
        .collect()
}

/// One verdict of `add_files` as Python receives it.
fn file_verdict(v: aggregate::Verdict, item: &aggregate::FileItem) -> FileVerdict {
    match v {
        aggregate::Verdict::Added { weight, identity } => {
            ("added", weight, String::new(), String::new(), None, Some(identity))
        }
        aggregate::Verdict::Duplicate { identity } => {
            ("duplicate", 0.0, String::new(), String::new(), None, Some(identity))
        }
        aggregate::Verdict::Rejected { rejection, identity } => {
            ("rejected", 0.0, rejection.kind.to_owned(), rejection.message, None, identity)
        }
        aggregate::Verdict::Unreadable(e) => {
            let err = core_error(&show(&item.path), crate::errors::GuardedError::Core(e));
            ("error", 0.0, String::new(), String::new(), Some(err), None)
        }
    }
}

/// The median (`"median"`) or trimmed mean (`"trimmed_mean"`, `cut` values off each end) of each
/// column of the row-major `N × chunk` float64 block `x`, GIL released, on every core.
#[pyfunction]
#[pyo3(signature = (x, method, cut=0))]
fn reduce_columns<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    method: &str,
    cut: usize,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let values = x.as_slice()?;
    let mut out = vec![0.0f64; c];
    match method {
        "median" => py.detach(|| aggregate::median_columns(values, n, &mut out)),
        "trimmed_mean" => py.detach(|| aggregate::trimmed_mean_columns(values, n, cut, &mut out)),
        other => return Err(PyValueError::new_err(format!("unknown column statistic {other:?}"))),
    }
    Ok(PyArray1::from_vec(py, out))
}

/// Fills row `r` of the float64 block `out` (`len(readers)` rows) with lanes `first..` of the
/// tensor at `locations[r]` of `readers[r]`: one chunk of every upload, rows read on every core
/// with the GIL released. A failed read raises (the file changed after its check).
#[pyfunction]
fn read_rows(
    py: Python<'_>,
    readers: Vec<Bound<'_, LaneReader>>,
    locations: Vec<Location>,
    first: usize,
    out: Bound<'_, PyArray2<f64>>,
) -> PyResult<()> {
    let count = out.shape()[1];
    if out.shape()[0] != readers.len() {
        return Err(PyValueError::new_err("one row per reader is needed"));
    }
    let locs = locations.into_iter().map(located).collect::<PyResult<Vec<_>>>()?;
    let sources = row_sources(py, &readers);
    let mut held = out.try_readwrite()?;
    let block = held.as_slice_mut()?;
    let failed = py.detach(|| aggregate::read_rows(&sources, &locs, first, count, block));
    match failed {
        Ok(()) => Ok(()),
        Err((row, e)) => {
            let source = readers.get(row).map_or_else(String::new, |r| r.get().source.clone());
            Err(core_error(&source, crate::errors::GuardedError::Core(e)))
        }
    }
}

/// The median (`"median"`) or trimmed mean (`"trimmed_mean"`, `cut` values off each end) of every
/// slot across all `readers`, into `outs` (one float64 array per slot): `locations[s][r]` is where
/// slot `s` is in reader `r`; per reader the sum of its squared values is added into `squares` and
/// of its squared distances to the result into `gaps`. Read and reduced natively, chunk by chunk
/// (at most `chunk_bytes` bytes of stored values in memory; none for up to `NETWORK_UP_TO`
/// readers), GIL released, on every core. A failed read raises (the file changed).
#[pyfunction]
#[pyo3(signature = (readers, locations, method, cut, outs, squares, gaps, chunk_bytes))]
#[allow(clippy::too_many_arguments)] // one call per round: every input is a separate argument
fn reduce_slots(
    py: Python<'_>,
    readers: Vec<Bound<'_, LaneReader>>,
    locations: Vec<Vec<Location>>,
    method: &str,
    cut: usize,
    outs: Vec<Bound<'_, PyArray1<f64>>>,
    squares: Bound<'_, PyArray1<f64>>,
    gaps: Bound<'_, PyArray1<f64>>,
    chunk_bytes: usize,
) -> PyResult<()> {
    let stat = statistic(method, cut)?;
    let slots = locations
        .into_iter()
        .map(|slot| slot.into_iter().map(located).collect::<PyResult<Vec<_>>>())
        .collect::<PyResult<Vec<_>>>()?;
    let sources = row_sources(py, &readers);
    let mut held = outs.iter().map(|o| o.try_readwrite()).collect::<Result<Vec<_>, _>>()?;
    let mut slices = held.iter_mut().map(|o| o.as_slice_mut()).collect::<Result<Vec<_>, _>>()?;
    let (mut sq, mut gp) = (squares.try_readwrite()?, gaps.try_readwrite()?);
    let (sq, gp) = (sq.as_slice_mut()?, gp.as_slice_mut()?);
    let failed =
        py.detach(|| aggregate::reduce_slots(&sources, &slots, stat, &mut slices, sq, gp, chunk_bytes));
    failed.map_err(|(row, e)| {
        let source = readers.get(row).map_or_else(String::new, |r| r.get().source.clone());
        core_error(&source, crate::errors::GuardedError::Core(e))
    })
}

fn statistic(method: &str, cut: usize) -> PyResult<aggregate::Statistic> {
    match method {
        "median" => Ok(aggregate::Statistic::Median),
        "trimmed_mean" => Ok(aggregate::Statistic::TrimmedMean(cut)),
        other => Err(PyValueError::new_err(format!("unknown column statistic {other:?}"))),
    }
}

fn row_sources<'a>(py: Python<'a>, readers: &'a [Bound<'a, LaneReader>]) -> Vec<RowSource<'a>> {
    readers
        .iter()
        .map(|r| match &r.get().held {
            Held::Files(files) => RowSource::Files(files),
            Held::Bytes(data, external) => {
                RowSource::Bytes(data.bind(py).as_bytes(), external.as_ref().map(|e| e.bind(py).as_bytes()))
            }
        })
        .collect()
}

/// The median (`"median"`) or trimmed mean (`"trimmed_mean"`, `cut` values off each end) of each
/// column of the row-major float64 block `x` (one row per upload), and per row the sum of its
/// squared values added into `squares` and of its squared distances to the result into `gaps`;
/// GIL released, on every core.
#[pyfunction]
#[pyo3(signature = (x, method, cut, squares, gaps))]
fn reduce_block<'py>(
    py: Python<'py>,
    x: PyReadonlyArray2<'py, f64>,
    method: &str,
    cut: usize,
    squares: Bound<'py, PyArray1<f64>>,
    gaps: Bound<'py, PyArray1<f64>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let stat = statistic(method, cut)?;
    let values = x.as_slice()?;
    let (mut sq, mut gp) = (squares.try_readwrite()?, gaps.try_readwrite()?);
    let (sq, gp) = (sq.as_slice_mut()?, gp.as_slice_mut()?);
    if sq.len() != n || gp.len() != n {
        return Err(PyValueError::new_err("squares and gaps need one value per row"));
    }
    let mut out = vec![0.0f64; c];
    py.detach(|| aggregate::reduce_block(values, n, stat, &mut out, sq, gp));
    Ok(PyArray1::from_vec(py, out))
}

/// Adds each pair of rows' squared L2 distance over the float64 block `x` (one row per upload)
/// into the `N × N` float64 matrix `d`; GIL released, on every core.
#[pyfunction]
fn add_pairwise(py: Python<'_>, x: PyReadonlyArray2<'_, f64>, d: Bound<'_, PyArray2<f64>>) -> PyResult<()> {
    let n = x.shape()[0];
    if d.shape() != [n, n] {
        return Err(PyValueError::new_err("d must be N x N for N rows"));
    }
    let values = x.as_slice()?;
    let mut held = d.try_readwrite()?;
    let d = held.as_slice_mut()?;
    py.detach(|| aggregate::add_pairwise(values, n, d));
    Ok(())
}

/// Why `value` cannot be an upload's weight (a phrase completing "weight ... "), or `None`: the
/// core's one rule for given weights and weight properties alike.
#[pyfunction]
fn weight_problem(value: f64) -> Option<&'static str> {
    aggregate::weight_problem(value)
}

/// Frees the read buffers kept for reuse between uploads (called when a round ends).
#[pyfunction]
fn release_buffers() {
    aggregate::release_buffers();
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AggregationLayout>()?;
    m.add_class::<Upload>()?;
    m.add_class::<LaneReader>()?;
    m.add_class::<UploadBytes>()?;
    m.add_function(wrap_pyfunction!(accumulate, m)?)?;
    m.add_function(wrap_pyfunction!(check_upload, m)?)?;
    m.add_function(wrap_pyfunction!(add_files, m)?)?;
    m.add_function(wrap_pyfunction!(check_files, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_columns, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_block, m)?)?;
    m.add_function(wrap_pyfunction!(reduce_slots, m)?)?;
    m.add("NETWORK_UP_TO", aggregate::NETWORK_UP_TO)?;
    m.add_function(wrap_pyfunction!(read_rows, m)?)?;
    m.add_function(wrap_pyfunction!(add_pairwise, m)?)?;
    m.add_function(wrap_pyfunction!(release_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(weight_problem, m)?)?;
    m.add("MAX_WEIGHT", aggregate::MAX_WEIGHT)?;
    m.add("MIN_WEIGHT", aggregate::MIN_WEIGHT)?;
    Ok(())
}
