//! The aggregation round's Python face: `Round` (the core's `aggregate::Round`: uploads added as
//! they come, each given its verdict at once, the aggregate at the end), its verdicts
//! (`RoundVerdict`), and `read_upload` (a local upload read whole into private memory, for the
//! reference's state). Types are converted here and the GIL released; every rule is the core's.

use std::path::PathBuf;
use std::sync::Arc;

use numpy::{PyArray1, PyReadonlyArray1};
use ortckpt_core::aggregate::{
    self, Buffer, Float32s, HeldFiles, Identity, Layout, Method, Options, Origin, Partial, Plan, Portable,
    Refusal, Rejection, Round as CoreRound, RoundFile, RoundVerdict as Verdict, Shared, Staleness, Values,
    WeightRule,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyString};

use crate::aggregate::{AggregationLayout, UploadBytes};
use crate::errors::{core_error, guarded, GuardedError};
use crate::index::Index;
use crate::mapped::{interruptible, path_arg, show};
use crate::remote;
use crate::spelling::spell;

/// What became of one upload: accepted with a weight, or rejected with a kind (the codes
/// docs/federated.md documents) and a message.
#[pyclass(frozen, get_all, module = "ortckpt._native")]
pub(crate) struct RoundVerdict {
    accepted: bool,
    weight: Option<f64>,
    kind: Option<String>,
    message: Option<String>,
}

impl RoundVerdict {
    fn accepted(weight: f64) -> RoundVerdict {
        RoundVerdict { accepted: true, weight: Some(weight), kind: None, message: None }
    }

    fn rejected(kind: &str, message: String) -> RoundVerdict {
        RoundVerdict { accepted: false, weight: None, kind: Some(kind.to_owned()), message: Some(message) }
    }

    fn rejection(r: Rejection) -> RoundVerdict {
        RoundVerdict::rejected(r.kind.code(), spell(&r.message))
    }

    /// A reader's error as the kind `unreadable`: the exception class it would raise, and its
    /// message on one line.
    fn unreadable(py: Python<'_>, source: &str, e: GuardedError) -> RoundVerdict {
        let err = core_error(source, e);
        let class = err.get_type(py).name().map_or_else(|_| "CheckpointError".into(), |n| n.to_string());
        let text = err.value(py).str().map_or_else(|_| String::new(), |s| s.to_string());
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let text = if text.is_empty() { class.clone() } else { text };
        RoundVerdict::rejected("unreadable", format!("{class}: {text}"))
    }

    fn of(py: Python<'_>, verdict: Verdict, source: &str) -> RoundVerdict {
        match verdict {
            Verdict::Accepted { weight } => RoundVerdict::accepted(weight),
            Verdict::Rejected(r) => RoundVerdict::rejection(r),
            Verdict::Duplicate { first } => {
                let shown = PyString::new(py, &first).repr().map_or(first, |r| r.to_string());
                RoundVerdict::rejected("duplicate", format!("the same upload as {shown} (counted once)"))
            }
            Verdict::Unreadable(e) => RoundVerdict::unreadable(py, source, GuardedError::Core(e)),
        }
    }
}

#[pymethods]
impl RoundVerdict {
    fn __repr__(&self) -> String {
        match (&self.kind, &self.message, self.weight) {
            (Some(kind), Some(message), _) => format!("RoundVerdict(rejected {kind}: {message})"),
            (_, _, Some(weight)) => format!("RoundVerdict(accepted, weight {weight})"),
            _ => "RoundVerdict()".into(),
        }
    }
}

/// Bytes from Python without a copy: an `UploadBytes` view, or a `bytes` object (anything else
/// bytes-like is copied once).
fn shared(value: &Bound<'_, PyAny>) -> PyResult<Shared> {
    if let Ok(view) = value.cast::<UploadBytes>() {
        let arc: Arc<Buffer> = view.get().buffer();
        return Ok(arc);
    }
    if let Ok(bytes) = value.extract::<PyBackedBytes>() {
        return Ok(Arc::new(bytes));
    }
    let copied: Vec<u8> = value
        .extract()
        .map_err(|_| PyTypeError::new_err("an upload's bytes must be bytes or a bytes-like object"))?;
    Ok(Arc::new(copied))
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

fn method(name: &str, trim: f64, byzantine: usize, keep: Option<usize>) -> PyResult<Method> {
    aggregate::check_trim(trim).map_err(PyValueError::new_err)?;
    Ok(match name {
        "fedavg" => Method::FedAvg,
        "median" => Method::Median,
        "trimmed_mean" => Method::TrimmedMean { trim },
        "krum" => Method::Krum { byzantine },
        "multi_krum" => Method::MultiKrum { byzantine, keep },
        "bulyan" => Method::Bulyan { byzantine },
        other => {
            return Err(PyValueError::new_err(format!(
                "method must be one of fedavg, median, trimmed_mean, krum, multi_krum, bulyan; got {other:?}"
            )))
        }
    })
}

/// An upload's identity from Python: `(device, inode)` of a file, a name (a URL), or None (the
/// bytes' hash).
fn identity(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Identity>> {
    let Some(value) = value.filter(|v| !v.is_none()) else { return Ok(None) };
    if let Ok((dev, ino)) = value.extract::<(u64, u64)>() {
        return Ok(Some(Identity::File(dev, ino)));
    }
    Ok(Some(Identity::Named(value.extract::<String>()?)))
}

/// One aggregation round (see `ortckpt_core::aggregate::Round`).
#[pyclass(module = "ortckpt._native")]
pub(crate) struct Round {
    inner: Option<CoreRound>,
}

impl Round {
    fn round(&mut self) -> PyResult<&mut CoreRound> {
        self.inner.as_mut().ok_or_else(|| PyValueError::new_err("this round has finished"))
    }
}

#[pymethods]
impl Round {
    #[new]
    #[pyo3(signature = (layout, method_name, *, trim=0.1, byzantine=0, keep=None, clip_norm=None,
        noise_multiplier=None, seed=None, max_bytes=None, chunk_bytes=64 << 20, staleness_exponent=0.5,
        max_staleness=None, screening=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        layout: &Bound<'_, AggregationLayout>,
        method_name: &str,
        trim: f64,
        byzantine: usize,
        keep: Option<usize>,
        clip_norm: Option<f64>,
        noise_multiplier: Option<f64>,
        seed: Option<u64>,
        max_bytes: Option<u64>,
        chunk_bytes: usize,
        staleness_exponent: f64,
        max_staleness: Option<u64>,
        screening: bool,
    ) -> PyResult<Round> {
        let options = Options {
            method: method(method_name, trim, byzantine, keep)?,
            clip_norm,
            noise_multiplier,
            seed,
            max_bytes,
            chunk_bytes,
        };
        let staleness = Staleness { exponent: staleness_exponent, cutoff: max_staleness };
        let layout = layout.get().layout().clone();
        let inner = if screening {
            CoreRound::screening(layout, options, staleness)
        } else {
            CoreRound::new(layout, options, staleness)
        }
        .map_err(PyValueError::new_err)?;
        Ok(Round { inner: Some(inner) })
    }

    /// Uploads accepted so far.
    #[getter]
    fn accepted(&self) -> usize {
        self.inner.as_ref().map_or(0, CoreRound::accepted)
    }

    /// The sum of the accepted weights so far.
    #[getter]
    fn total_weight(&self) -> f64 {
        self.inner.as_ref().map_or(0.0, CoreRound::total_weight)
    }

    /// The global model the uploads are updates of (`relative_to`): a local file. Raises
    /// ValueError when it does not match the reference.
    fn set_base_file(&mut self, py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<()> {
        let path = path_arg(path)?;
        let source = show(&path);
        let round = self.round()?;
        let outcome = py.detach(|| guarded(|| Ok(round.set_base_file(&path))));
        base_outcome(outcome, &source)
    }

    /// `set_base_file` for a global model given as bytes.
    #[pyo3(signature = (data, external=None))]
    fn set_base_bytes(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        external: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let (data, external) = (shared(data)?, external.map(shared).transpose()?);
        let round = self.round()?;
        let outcome = py.detach(|| guarded(|| Ok(round.set_base_bytes(data, external))));
        base_outcome(outcome, "<bytes>")
    }

    /// Checks and counts local upload files (on every core, GIL released): one verdict each.
    /// `weights[i]` (None: the property `weight_property`, else 1), `labels[i]` names upload i in
    /// verdicts, `staleness[i]` its age in global-model versions. `defer_values`: the core's
    /// `add_files_deferring_values` (values checked when `finish` reads them; a bad one is in
    /// `finish`'s dropped uploads).
    #[pyo3(signature = (paths, weights, weight_property, labels, staleness, defer_values=false))]
    #[allow(clippy::too_many_arguments)]
    fn add_files(
        &mut self,
        py: Python<'_>,
        paths: Vec<Bound<'_, PyAny>>,
        weights: Vec<Option<f64>>,
        weight_property: Option<String>,
        labels: Vec<String>,
        staleness: Vec<u64>,
        defer_values: bool,
    ) -> PyResult<Vec<RoundVerdict>> {
        if weights.len() != paths.len() || labels.len() != paths.len() || staleness.len() != paths.len() {
            return Err(PyValueError::new_err("one weight, label and staleness per path"));
        }
        let mut uploads = Vec::with_capacity(paths.len());
        for (((path, weight), label), age) in paths.iter().zip(weights).zip(labels).zip(staleness) {
            let path: PathBuf = path_arg(path)?;
            let rule = weight_rule(weight, weight_property.as_deref());
            uploads.push(RoundFile { path, rule, label, staleness: age });
        }
        let source = uploads.first().map(|u| show(&u.path)).unwrap_or_default();
        let round = self.round()?;
        let verdicts = interruptible(py, &source, |_keep_going| {
            if defer_values {
                round.add_files_deferring_values(&uploads)
            } else {
                round.add_files(&uploads)
            }
        })?;
        Ok(verdicts.into_iter().zip(&uploads).map(|(v, u)| RoundVerdict::of(py, v, &show(&u.path))).collect())
    }

    /// Checks and counts one upload given as bytes (GIL released). `identity`: `(device, inode)`
    /// of the file it was read from, a name (a URL), or None (the bytes' hash).
    #[pyo3(signature = (data, external, weight, weight_property, label, identity=None, staleness=0, source=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_bytes(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        external: Option<&Bound<'_, PyAny>>,
        weight: Option<f64>,
        weight_property: Option<String>,
        label: String,
        identity: Option<&Bound<'_, PyAny>>,
        staleness: u64,
        source: Option<String>,
    ) -> PyResult<RoundVerdict> {
        let (data, external) = (shared(data)?, external.map(shared).transpose()?);
        let rule = weight_rule(weight, weight_property.as_deref());
        let identity = self::identity(identity)?;
        let round = self.round()?;
        let verdict =
            py.detach(|| guarded(|| Ok(round.add_bytes(data, external, &rule, &label, identity, staleness))));
        let source = source.unwrap_or_else(|| "<bytes>".into());
        Ok(match verdict {
            Ok(v) => RoundVerdict::of(py, v, &source),
            Err(e) => RoundVerdict::unreadable(py, &source, e),
        })
    }

    /// Checks and counts the local file `path` standing for the upload `name` (a URL whose bytes
    /// were copied into it): the core's `add_file_named` (GIL released). Its identity, and the
    /// source its errors name, is `name`.
    #[pyo3(signature = (path, weight, weight_property, label, name, staleness=0))]
    #[allow(clippy::too_many_arguments)]
    fn add_file_named(
        &mut self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        weight: Option<f64>,
        weight_property: Option<String>,
        label: String,
        name: String,
        staleness: u64,
    ) -> PyResult<RoundVerdict> {
        let path: PathBuf = path_arg(path)?;
        let rule = weight_rule(weight, weight_property.as_deref());
        let upload = RoundFile { path, rule, label, staleness };
        let round = self.round()?;
        let verdict = interruptible(py, &name, |_keep_going| round.add_file_named(&upload, &name))?;
        Ok(RoundVerdict::of(py, verdict, &name))
    }

    /// Checks and counts the ORT 1.15 checkpoint folder `path`, read by the core's folder reader
    /// (Ctrl-C interrupts it; GIL released), under the identity `name`. None when the directory
    /// holds none of a folder's files.
    #[pyo3(signature = (path, weight, weight_property, label, name, staleness=0))]
    #[allow(clippy::too_many_arguments)]
    fn add_folder(
        &mut self,
        py: Python<'_>,
        path: &Bound<'_, PyAny>,
        weight: Option<f64>,
        weight_property: Option<String>,
        label: String,
        name: String,
        staleness: u64,
    ) -> PyResult<Option<RoundVerdict>> {
        let path: PathBuf = path_arg(path)?;
        let rule = weight_rule(weight, weight_property.as_deref());
        let round = self.round()?;
        let verdict = interruptible(py, &name, |keep_going| {
            round.add_folder(&path, &rule, &label, &name, staleness, keep_going)
        })?;
        Ok(verdict.map(|v| RoundVerdict::of(py, v, &name)))
    }

    /// The FedAvg sums so far, `(sums, bounds, total_weight, count)` (plain FedAvg; the round
    /// ends): what a Dask task sends back to be merged.
    fn take_partial<'py>(&mut self, py: Python<'py>) -> PyResult<PartialTuple<'py>> {
        let round = self.inner.take().ok_or_else(|| PyValueError::new_err("this round has finished"))?;
        let partial = py.detach(|| guarded(|| round.into_partial())).map_err(|e| core_error("round", e))?;
        Ok(partial_tuple(py, partial))
    }

    /// Adds partial sums made by `take_partial` of another round over the same reference.
    fn absorb(&mut self, py: Python<'_>, partial: PartialArgs<'_>) -> PyResult<()> {
        let partial = partial_of(partial)?;
        let round = self.round()?;
        py.detach(|| guarded(|| round.absorb(&partial))).map_err(|e| core_error("round", e))
    }

    /// Checks and counts a local upload read by `read_upload` (GIL released); the round keeps
    /// its files open when it keeps the upload.
    #[pyo3(signature = (upload, weight, weight_property, label, staleness=0))]
    fn add_read(
        &mut self,
        py: Python<'_>,
        upload: &Bound<'_, ReadUpload>,
        weight: Option<f64>,
        weight_property: Option<String>,
        label: String,
        staleness: u64,
    ) -> PyResult<RoundVerdict> {
        let up = upload.get();
        let files = up
            .files
            .lock()
            .ok()
            .and_then(|mut f| f.take())
            .ok_or_else(|| PyValueError::new_err("this upload was already added to a round"))?;
        let checkpoint: Shared = up.checkpoint.clone();
        let external: Option<Shared> = up.external.clone().map(|e| e as Shared);
        let rule = weight_rule(weight, weight_property.as_deref());
        let round = self.round()?;
        let verdict = py
            .detach(|| guarded(|| Ok(round.add_read(checkpoint, external, files, &rule, &label, staleness))));
        Ok(match verdict {
            Ok(v) => RoundVerdict::of(py, v, &up.source),
            Err(e) => RoundVerdict::unreadable(py, &up.source, e),
        })
    }

    /// The aggregate (the round ends): `(values, divisor, total_weight, count, members)` — one
    /// float64 array per averaged tensor (slot order), to be divided by `divisor` (FedAvg's sums
    /// and total weight; 1 for the robust methods' values), and per kept upload
    /// `(label, weight, norm, clipped, distance, krum_score, selected)`. With `float32`, a
    /// float32 or complex64 slot may come as a float32 array instead, already divided and rounded
    /// (FedAvg, and the plain median and trimmed mean: see the core's `Round::finish_rounding`).
    /// Raises AggregationError when no aggregate can be given (too few uploads, or not finite).
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (*, float32=false))]
    fn finish<'py>(&mut self, py: Python<'py>, float32: bool) -> PyResult<FinishTuple<'py>> {
        let round = self.inner.take().ok_or_else(|| PyValueError::new_err("this round has finished"))?;
        let outcome = py.detach(|| {
            let outcome = guarded(|| Ok(round.finish_rounding(float32)));
            aggregate::release_buffers(); // no upload-sized read buffer outlives the round
            outcome
        });
        match outcome.map_err(|e| core_error("round", e))? {
            Ok(done) => finished(py, done),
            // the uploads left out before it failed go with the exception (`.dropped`): their
            // reports become rejections in the failure's report too
            Err(aggregate::Unfinished { error, dropped }) => {
                let err = core_error("round", GuardedError::Core(error));
                err.value(py).setattr("dropped", dropped_tuples(dropped))?;
                Err(err)
            }
        }
    }

    /// Whether the round's cluster passes need the updates' norms first, and their distances.
    fn passes_needed(&self) -> PyResult<(bool, bool)> {
        let o =
            self.inner.as_ref().ok_or_else(|| PyValueError::new_err("this round has finished"))?.options();
        Ok((
            o.clip_norm.is_some(),
            matches!(o.method, Method::Krum { .. } | Method::MultiKrum { .. } | Method::Bulyan { .. }),
        ))
    }

    /// The uploads a screening round kept (the round ends), as they travel to the client.
    fn take_portables(&mut self, py: Python<'_>) -> PyResult<Vec<PortableTuple>> {
        let round = self.inner.take().ok_or_else(|| PyValueError::new_err("this round has finished"))?;
        round.into_portables().into_iter().map(|p| portable_tuple(py, p)).collect()
    }

    /// Admits an upload a cluster task checked, in upload order: its verdict, or None when only
    /// the exact sums can tell whether it overflows them.
    fn admit(&mut self, py: Python<'_>, portable: &Bound<'_, PyAny>) -> PyResult<Option<RoundVerdict>> {
        let round = self.round()?;
        let p = portable_of(round.layout(), portable)?;
        let label = p.label.clone();
        Ok(round.admit(p).map(|v| RoundVerdict::of(py, v, &label)))
    }

    /// The admitted uploads and the global model (or None), as a cluster's tasks read them.
    #[allow(clippy::type_complexity)]
    fn portables(&mut self, py: Python<'_>) -> PyResult<(Vec<PortableTuple>, Option<PortableTuple>)> {
        let round = self.round()?;
        let remote =
            round.remote().iter().cloned().map(|p| portable_tuple(py, p)).collect::<PyResult<_>>()?;
        let base = round.base_portable().map(|p| portable_tuple(py, p)).transpose()?;
        Ok((remote, base))
    }

    /// Leaves out the admitted uploads whose update leaves float64 (`first[i]`: the first slot
    /// where upload `i`'s does, or None): their `(place, kind, message)`.
    fn drop_remote(&mut self, first: Vec<Option<usize>>) -> PyResult<Vec<(usize, String, String)>> {
        let round = self.round()?;
        Ok(round
            .drop_remote(&first)
            .into_iter()
            .map(|(i, r)| (i, r.kind.code().to_owned(), spell(&r.message)))
            .collect())
    }

    /// Each admitted upload's clipping scale from its squared norm.
    fn clip_scale(&mut self, squares: Vec<f64>) -> PyResult<Vec<f64>> {
        Ok(aggregate::clip_scale(&squares, self.round()?.options().clip_norm))
    }

    /// The last pass's plan from the earlier passes (`d`: the squared distances, row-major),
    /// and each upload's Krum score (Krum's family).
    fn plan(&mut self, scale: Vec<f64>, d: Vec<f64>) -> PyResult<(PlanTuple, Option<Vec<f64>>)> {
        let round = self.round()?;
        let weights: Vec<f64> = round.remote().iter().map(|p| p.weight).collect();
        let options = round.options();
        let seed = options.seed.unwrap_or_else(aggregate::random_seed);
        let (plan, scores) = aggregate::plan_of(options, weights, scale, &d, seed);
        Ok((plan_tuple(plan), scores))
    }

    /// The aggregate of a round whose passes ran on a cluster (the round ends): as `finish`.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn finish_remote<'py>(
        &mut self,
        py: Python<'py>,
        values: Vec<f64>,
        gaps: Vec<f64>,
        squares: Vec<f64>,
        plan: PlanTuple,
        scores: Option<Vec<f64>>,
    ) -> PyResult<FinishTuple<'py>> {
        let round = self.inner.take().ok_or_else(|| PyValueError::new_err("this round has finished"))?;
        let plan = plan_of_tuple(plan)?;
        let reduced = aggregate::Reduced::of_cluster(values, gaps);
        let done = py.detach(|| guarded(|| round.finish_remote(reduced, squares, &plan, scores)));
        finished(py, done.map_err(|e| core_error("round", e))?)
    }
}

type PartialTuple<'py> = (Bound<'py, PyArray1<f64>>, Bound<'py, PyArray1<f64>>, f64, usize);
type PartialArgs<'py> = (PyReadonlyArray1<'py, f64>, PyReadonlyArray1<'py, f64>, f64, usize);

fn partial_tuple(py: Python<'_>, p: Partial) -> PartialTuple<'_> {
    (PyArray1::from_vec(py, p.sums), PyArray1::from_vec(py, p.bounds), p.total_weight, p.count)
}

fn partial_of(args: PartialArgs<'_>) -> PyResult<Partial> {
    let (sums, bounds, total_weight, count) = args;
    Ok(Partial { sums: sums.as_slice()?.to_vec(), bounds: bounds.as_slice()?.to_vec(), total_weight, count })
}

/// The sum of two rounds' partial sums (a node of Dask's reduction tree). Raises AggregationError
/// when they overflow float64 together.
#[pyfunction]
pub(crate) fn merge_partials<'py>(
    py: Python<'py>,
    first: PartialArgs<'py>,
    second: PartialArgs<'py>,
) -> PyResult<PartialTuple<'py>> {
    let (mut a, b) = (partial_of(first)?, partial_of(second)?);
    py.detach(|| guarded(|| a.merge(&b))).map_err(|e| core_error("round", e))?;
    Ok(partial_tuple(py, a))
}

fn base_outcome(outcome: Result<Result<(), Refusal>, GuardedError>, source: &str) -> PyResult<()> {
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(Refusal::Rejected(r))) => Err(PyValueError::new_err(format!(
            "relative_to does not match the reference: {}",
            spell(&r.message)
        ))),
        Ok(Err(Refusal::Unreadable(e))) => Err(core_error(source, GuardedError::Core(e))),
        Err(e) => Err(core_error(source, e)),
    }
}

/// A local upload read whole into private memory, its files still open (a round that counts it
/// keeps them, to read its values again and to tell whether the file changed).
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct ReadUpload {
    checkpoint: Arc<Buffer>,
    external: Option<Arc<Buffer>>,
    files: std::sync::Mutex<Option<HeldFiles>>,
    identity: (u64, u64),
    source: String,
}

#[pymethods]
impl ReadUpload {
    /// The checkpoint's bytes (a read-only view of the private memory; no copy).
    #[getter]
    fn checkpoint(&self, py: Python<'_>) -> Py<PyAny> {
        UploadBytes::of(py, &self.checkpoint)
    }

    /// The external data file's bytes, when there is one.
    #[getter]
    fn external(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.external.as_ref().map(|e| UploadBytes::of(py, e))
    }

    /// (device, inode) of the checkpoint file.
    #[getter]
    fn identity(&self) -> (u64, u64) {
        self.identity
    }

    /// The path it was read from.
    #[getter]
    fn source(&self) -> String {
        self.source.clone()
    }
}

/// Reads the local upload `path` (and `path.data`) whole into private memory, at most
/// `max_bytes` bytes. Raises SourceTooLargeError past the limit, and the reader's errors.
#[pyfunction]
#[pyo3(signature = (path, max_bytes=None))]
pub(crate) fn read_upload(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    max_bytes: Option<u64>,
) -> PyResult<ReadUpload> {
    let path = path_arg(path)?;
    let source = show(&path);
    let mut rejected = None;
    let read =
        interruptible(py, &source, |keep_going| match aggregate::read_file(&path, max_bytes, keep_going) {
            Ok(file) => Ok(Some(file)),
            Err(Refusal::Rejected(r)) => {
                rejected = Some(r);
                Ok(None)
            }
            Err(Refusal::Unreadable(e)) => Err(e),
        })?;
    let Some(file) = read else {
        let message = rejected.map_or_else(|| "too large".into(), |r| spell(&r.message));
        return Err(crate::errors::SourceTooLargeError::new_err(message));
    };
    Ok(ReadUpload {
        checkpoint: Arc::new(file.checkpoint),
        external: file.external.map(Arc::new),
        files: std::sync::Mutex::new(Some(file.files)),
        identity: file.identity,
        source,
    })
}

/// Opens the local upload `path` (and `path.data`) with the core's file rules, at most
/// `max_bytes` bytes in all, and indexes it reading only its structure: a round's reference,
/// whose spec, frozen parameters and properties are taken from it and whose values are read
/// once, with the other uploads. Raises SourceTooLargeError past the limit, and the reader's
/// errors.
#[pyfunction]
#[pyo3(signature = (path, max_bytes=None))]
pub(crate) fn index_upload(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    max_bytes: Option<u64>,
) -> PyResult<Index> {
    let path = path_arg(path)?;
    let source = show(&path);
    let files = match py.detach(|| aggregate::open_files(&path, max_bytes)) {
        Ok(files) => files,
        Err(Refusal::Rejected(r)) => {
            return Err(crate::errors::SourceTooLargeError::new_err(spell(&r.message)))
        }
        Err(Refusal::Unreadable(e)) => return Err(core_error(&source, GuardedError::Core(e))),
    };
    let ext_source = show(files.external_path());
    let ((file, size), external) = files.into_parts();
    let checkpoint = remote::paged_file(file, size, UPLOAD_BLOCK, &source)?;
    let external = match external {
        Some((file, size)) => Some(remote::paged_file(file, size, UPLOAD_BLOCK, &ext_source)?),
        None => None,
    };
    crate::index::paged(py, checkpoint, external, source, Some(ext_source))
}

/// Bytes a reference's paged index reads at a time: its structure is a few blocks.
const UPLOAD_BLOCK: usize = 64 << 10;

/// An upload as it travels between a cluster's processes (pickled by Dask): `(label, weight,
/// located, largest, identity, source)` — `located` one `(start, end, external)` per averaged
/// tensor, `identity` `("file", dev, ino)`, `("content", hash)` or `("named", name)`, `source`
/// `("file", path, stamp, external stamp or None)` (a stamp: `(dev, ino, size, mtime_ns)`) or
/// `("bytes", checkpoint, external or None)`.
type Located3 = (u64, u64, bool);
type PortableTuple = (String, f64, Vec<Located3>, Vec<f64>, Py<PyAny>, Py<PyAny>);

fn portable_tuple(py: Python<'_>, p: Portable) -> PyResult<PortableTuple> {
    let located = p.located.iter().map(|l| (l.bytes.start, l.bytes.end, l.external)).collect();
    let identity = match &p.identity {
        Identity::File(dev, ino) => ("file", *dev, *ino).into_pyobject(py)?.into_any().unbind(),
        Identity::Content(hash) => ("content", PyBytes::new(py, hash)).into_pyobject(py)?.into_any().unbind(),
        Identity::Named(name) => ("named", name).into_pyobject(py)?.into_any().unbind(),
    };
    let source = match &p.source {
        Origin::File { path, checkpoint, external } => {
            let path = PyBytes::new(py, path.as_os_str().as_encoded_bytes());
            ("file", path, *checkpoint, *external).into_pyobject(py)?.into_any().unbind()
        }
        Origin::Bytes(checkpoint, external) => {
            let data = PyBytes::new(py, (**checkpoint).as_ref());
            let ext = external.as_ref().map(|e| PyBytes::new(py, (**e).as_ref()));
            ("bytes", data, ext).into_pyobject(py)?.into_any().unbind()
        }
    };
    Ok((p.label, p.weight, located, p.largest, identity, source))
}

fn portable_of(layout: &Layout, t: &Bound<'_, PyAny>) -> PyResult<Portable> {
    let (label, weight, located, largest, identity, source): (
        String,
        f64,
        Vec<Located3>,
        Vec<f64>,
        Bound<'_, PyAny>,
        Bound<'_, PyAny>,
    ) = t.extract()?;
    let types = layout.slot_types();
    if located.len() != types.len() {
        return Err(PyValueError::new_err("an upload of another model"));
    }
    let located = located
        .into_iter()
        .zip(types)
        .map(|((start, end, external), t)| {
            let lanes = aggregate::Lanes::of(t)
                .ok_or_else(|| PyValueError::new_err("a tensor that is not averaged"))?;
            if start > end {
                return Err(PyValueError::new_err("a location's start is past its end"));
            }
            Ok(aggregate::Located { lanes, bytes: start..end, external })
        })
        .collect::<PyResult<Vec<_>>>()?;
    let kind: String = identity.get_item(0)?.extract()?;
    let identity = match kind.as_str() {
        "file" => Identity::File(identity.get_item(1)?.extract()?, identity.get_item(2)?.extract()?),
        "content" => {
            let hash: Vec<u8> = identity.get_item(1)?.extract()?;
            Identity::Content(
                hash.try_into().map_err(|_| PyValueError::new_err("a content hash is 32 bytes"))?,
            )
        }
        _ => Identity::Named(identity.get_item(1)?.extract()?),
    };
    let kind: String = source.get_item(0)?.extract()?;
    let source = if kind == "file" {
        let path: Vec<u8> = source.get_item(1)?.extract()?;
        let path = PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(path));
        Origin::File {
            path,
            checkpoint: source.get_item(2)?.extract()?,
            external: source.get_item(3)?.extract()?,
        }
    } else {
        let external = source.get_item(2)?;
        let external = if external.is_none() { None } else { Some(shared(&external)?) };
        Origin::Bytes(shared(&source.get_item(1)?)?, external)
    };
    Ok(Portable { label, weight, located, largest, identity, source })
}

fn portables_of(layout: &Layout, items: &[Bound<'_, PyAny>]) -> PyResult<Vec<Portable>> {
    items.iter().map(|t| portable_of(layout, t)).collect()
}

/// The plan of a round's last pass as it travels to a cluster's tasks: `(method, trim, byzantine,
/// keep, selected, weights, scale, noise, counted)`, `noise` `(seed, std)` or None.
type PlanTuple =
    (String, f64, usize, Option<usize>, Vec<usize>, Vec<f64>, Vec<f64>, Option<(u64, f64)>, bool);

fn plan_tuple(plan: Plan) -> PlanTuple {
    let (trim, byzantine, keep) = match plan.method {
        Method::TrimmedMean { trim } => (trim, 0, None),
        Method::Krum { byzantine } | Method::Bulyan { byzantine } => (0.0, byzantine, None),
        Method::MultiKrum { byzantine, keep } => (0.0, byzantine, keep),
        _ => (0.0, 0, None),
    };
    (
        plan.method.name().to_owned(),
        trim,
        byzantine,
        keep,
        plan.selected,
        plan.weights,
        plan.scale,
        plan.noise,
        plan.counted,
    )
}

fn plan_of_tuple(t: PlanTuple) -> PyResult<Plan> {
    let (name, trim, byzantine, keep, selected, weights, scale, noise, counted) = t;
    Ok(Plan { method: method(&name, trim, byzantine, keep)?, selected, weights, scale, noise, counted })
}

/// Each slot's values as a numpy array: its own (FedAvg's, freed one by one as they are rounded),
/// or views of one float64 array and one float32 array (the robust methods').
fn slot_arrays<'py>(py: Python<'py>, values: Values, lanes: &[usize]) -> PyResult<Vec<Bound<'py, PyAny>>> {
    match values {
        Values::Sums { sums, rounded, .. } => {
            let mut rounded = rounded.into_iter();
            let mut out = Vec::with_capacity(sums.len());
            for v in sums {
                out.push(match rounded.next().flatten() {
                    Some(values) => RoundedValues::array(py, values)?,
                    None => PyArray1::from_vec(py, v).into_any(),
                });
            }
            Ok(out)
        }
        Values::Flat { values, rounded_values, rounded } => {
            let wide = PyArray1::from_vec(py, values).into_any();
            let narrow = RoundedValues::array(py, rounded_values)?;
            let mut out = Vec::with_capacity(lanes.len());
            let (mut wide_at, mut narrow_at) = (0usize, 0usize);
            for (k, &n) in lanes.iter().enumerate() {
                let (whole, at) = if rounded.get(k).copied().unwrap_or(false) {
                    (&narrow, &mut narrow_at)
                } else {
                    (&wide, &mut wide_at)
                };
                let end = at.saturating_add(n);
                let slice = pyo3::types::PySlice::new(py, *at as isize, end as isize, 1);
                out.push(whole.call_method1("__getitem__", (slice,))?);
                *at = end;
            }
            Ok(out)
        }
    }
}

/// The float32 values of a round's slots that came rounded (see `Round.finish`), as the base of
/// their numpy arrays: memory nothing writes after the round, exported read-only, so a state
/// keeps views of it without a copy (as it keeps a loaded tensor).
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct RoundedValues {
    values: Float32s,
}

impl RoundedValues {
    fn bytes(&self) -> &[u8] {
        self.values.as_bytes()
    }

    /// A read-only float32 numpy array over `values`, owned by a `RoundedValues`.
    fn array(py: Python<'_>, values: Float32s) -> PyResult<Bound<'_, PyAny>> {
        if values.as_slice().is_empty() {
            return Ok(PyArray1::<f32>::zeros(py, 0, false).into_any());
        }
        let count = values.as_slice().len() as i64;
        let owner = Bound::new(py, RoundedValues { values })?;
        let bytes = owner.get().bytes();
        let descr = numpy::dtype::<f32>(py);
        // SAFETY: `bytes` holds `count` float32 values owned by `owner`, which never changes them
        // and keeps them alive as the array's base.
        let array = unsafe {
            crate::arrays::view(py, &descr, &[count], bytes.as_ptr(), bytes.len(), owner.as_any())?
        };
        match array {
            Some(array) => Ok(array),
            // a Vec's float32 values are always aligned: not reached, but a copy is never wrong
            None => Ok(PyArray1::from_slice(py, owner.get().values.as_slice()).into_any()),
        }
    }
}

#[pymethods]
impl RoundedValues {
    fn __len__(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the core checked every value finite as it wrote them (the caller need not check
    /// them again); False: not checked, or not all finite.
    #[getter]
    fn finite(&self) -> bool {
        self.values.finite()
    }

    /// Exports the values' bytes as a read-only 1-D buffer of unsigned bytes.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: `view` comes from Python's buffer protocol; `slf` owns the values, which
        // nothing writes after the round, so they stay valid and unchanged while it lives.
        unsafe {
            crate::mapped::export_read_only(slf.as_any(), slf.get().bytes(), view, flags, "a round's values")
        }
    }
}

/// What `finish` gives: `(values, divisor, total_weight, count, members, dropped)`.
/// A finished round as Python takes it: (values per slot, divisor, total weight, count, members,
/// dropped uploads), the same whether it finished here or from a cluster's passes.
fn finished(py: Python<'_>, done: aggregate::Aggregate) -> PyResult<FinishTuple<'_>> {
    let members = done.members.into_iter().map(member_tuple).collect();
    let divisor = match &done.values {
        Values::Sums { divisor, .. } => *divisor,
        Values::Flat { .. } => 1.0,
    };
    let dropped = dropped_tuples(done.dropped);
    let values = slot_arrays(py, done.values, &done.lanes)?;
    Ok((values, divisor, done.total_weight, done.count, members, dropped))
}

/// Uploads left out at the end as `(place among the accepted, kind, message)`.
fn dropped_tuples(dropped: Vec<(usize, aggregate::Rejection)>) -> Vec<(usize, String, String)> {
    dropped.into_iter().map(|(i, r)| (i, r.kind.code().to_owned(), spell(&r.message))).collect()
}

type FinishTuple<'py> =
    (Vec<Bound<'py, PyAny>>, f64, f64, usize, Vec<MemberTuple>, Vec<(usize, String, String)>);

type MemberTuple = (String, f64, f64, bool, f64, Option<f64>, bool);

fn member_tuple(m: aggregate::MemberReport) -> MemberTuple {
    (m.label, m.weight, m.norm, m.clipped, m.distance, m.krum_score, m.selected)
}

/// A cluster task's pass over lanes `start..end` of the model: `kind` `"squares"` (per upload,
/// its update's squares), `"distances"` (`(d, squares)`, with `scale`) or `"reduce"` (`(values,
/// gaps, squares)`, with `plan`). The uploads are opened again here (a file must still be the
/// version that was checked).
#[pyfunction]
#[pyo3(signature = (layout, portables, base, start, end, chunk_bytes, kind, scale=None, plan=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn range_pass<'py>(
    py: Python<'py>,
    layout: &Bound<'py, AggregationLayout>,
    portables: Vec<Bound<'py, PyAny>>,
    base: Option<Bound<'py, PyAny>>,
    start: usize,
    end: usize,
    chunk_bytes: usize,
    kind: &str,
    scale: Option<Vec<f64>>,
    plan: Option<PlanTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let layout = layout.get().layout();
    let lanes = layout.slot_lanes();
    let members = portables_of(layout, &portables)?;
    let base = base.map(|b| portable_of(layout, &b)).transpose()?;
    let range = (start, end);
    let fail = |e| core_error("round", e);
    match kind {
        "overflows" => {
            let out = py
                .detach(|| {
                    guarded(|| {
                        aggregate::passes::update_overflows(
                            &members,
                            base.as_ref(),
                            &lanes,
                            range,
                            chunk_bytes,
                        )
                    })
                })
                .map_err(fail)?;
            Ok(out.into_pyobject(py)?.into_any())
        }
        "squares" => {
            let out = py
                .detach(|| {
                    guarded(|| {
                        aggregate::passes::squares(&members, base.as_ref(), &lanes, range, chunk_bytes)
                    })
                })
                .map_err(fail)?;
            Ok(PyArray1::from_vec(py, out).into_any())
        }
        "distances" => {
            let scale = scale.ok_or_else(|| PyValueError::new_err("the distances pass needs the scales"))?;
            let (d, sq) = py
                .detach(|| {
                    guarded(|| {
                        aggregate::passes::distances(
                            &members,
                            base.as_ref(),
                            &lanes,
                            range,
                            chunk_bytes,
                            &scale,
                        )
                    })
                })
                .map_err(fail)?;
            Ok((PyArray1::from_vec(py, d), PyArray1::from_vec(py, sq)).into_pyobject(py)?.into_any())
        }
        "reduce" => {
            let plan =
                plan_of_tuple(plan.ok_or_else(|| PyValueError::new_err("the last pass needs its plan"))?)?;
            let r = py
                .detach(|| {
                    guarded(|| {
                        aggregate::passes::reduce(&members, base.as_ref(), &lanes, range, chunk_bytes, &plan)
                    })
                })
                .map_err(fail)?;
            let out = (
                PyArray1::from_vec(py, r.values),
                PyArray1::from_vec(py, r.gaps),
                PyArray1::from_vec(py, r.squares),
            );
            Ok(out.into_pyobject(py)?.into_any())
        }
        other => Err(PyValueError::new_err(format!("no pass named {other:?}"))),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Round>()?;
    m.add_class::<RoundVerdict>()?;
    m.add_class::<ReadUpload>()?;
    m.add_function(wrap_pyfunction!(read_upload, m)?)?;
    m.add_function(wrap_pyfunction!(index_upload, m)?)?;
    m.add_function(wrap_pyfunction!(merge_partials, m)?)?;
    m.add_function(wrap_pyfunction!(range_pass, m)?)?;
    Ok(())
}
