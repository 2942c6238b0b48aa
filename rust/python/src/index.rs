//! `Index`: the core's checkpoint index held in Rust, handed to Python one record at a time, so a
//! checkpoint of 400k tensors costs no Python object per tensor until one is asked for.

use std::collections::HashMap;

use numpy::PyArrayDescr;
use ortckpt_core::{
    CheckpointBytes, CheckpointIndex, LoadedCheckpoint, ParamKind, PropertyValue, Storage, TensorRef,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyMemoryView, PySlice, PyString, PyTuple};

use crate::arrays::view;
use crate::convert::{unchanging_owner, BorrowedBytes};
use crate::errors::guarded;
use crate::errors::{core_error, GuardedError};
use crate::mapped::MappedFile;
use crate::pyobj::{py_int, py_ints, py_str, py_strs, py_uint};
use crate::remote::{raised, Paged, PagedBuffer};

/// One tensor of an index: what the core found, with its storage kind decided by the core.
#[pyclass(frozen, get_all, module = "ortckpt._native")]
pub(crate) struct TensorRecord {
    /// Position in the index (file order: trainable, frozen, then momentums).
    position: Py<PyAny>,
    name: Py<PyString>,
    doc_string: Py<PyString>,
    data_type: i32,
    dims: Py<PyTuple>,
    /// "inline", "external", "strings" or "nominal".
    storage: Py<PyString>,
    /// Byte offset in the checkpoint ("inline") or in the external data file ("external").
    offset: Py<PyAny>,
    /// Bytes of values ("inline", "external"); 0 otherwise.
    nbytes: Py<PyAny>,
    /// The values of a "strings" tensor.
    strings: Option<Py<PyList>>,
    /// True/False for parameters, None for momentums.
    trainable: Option<bool>,
}

#[pymethods]
impl TensorRecord {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "TensorRecord({:?}, data_type={}, dims={}, storage={:?}, offset={}, nbytes={})",
            self.name.bind(py).to_string(),
            self.data_type,
            self.dims.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
            self.storage.bind(py).to_string(),
            self.offset.bind(py),
            self.nbytes.bind(py)
        )
    }
}

/// The bytes of a loaded checkpoint as Python holds them: ortckpt's own `MappedFile` (whose
/// changes on disk the core looks for before first use), or other memory that cannot change
/// ([`unchanging_owner`]).
pub(crate) enum Held {
    Memory {
        object: Py<PyAny>,
        bytes: BorrowedBytes,
    },
    File(Py<MappedFile>),
    /// Read on demand (`remote.rs`): each range is fetched before its first use.
    Paged(Py<PagedBuffer>),
}

impl Held {
    /// `data` itself when its memory cannot change ([`unchanging_owner`]; a view of all of a
    /// `MappedFile` is that file), else a private copy taken now, with the GIL held. A part of a
    /// mapped file is copied too: its changes on disk could not be looked for.
    pub(crate) fn of(data: &Bound<'_, PyAny>) -> PyResult<Held> {
        let py = data.py();
        let bytes = BorrowedBytes::get(data)?;
        if let Some(owner) = unchanging_owner(data)? {
            match owner.cast::<MappedFile>() {
                Ok(file) if file.get().core().raw() == bytes.raw() => {
                    return Ok(Held::File(file.clone().unbind()))
                }
                Ok(file) if file.get().core().is_mapped() => {} // a part of a map: copied below
                _ => return Ok(Held::Memory { object: data.clone().unbind(), bytes }),
            }
        }
        let copy = PyBytes::new(py, bytes.view().slice()).into_any();
        Ok(Held::Memory { bytes: BorrowedBytes::get(&copy)?, object: copy.unbind() })
    }

    pub(crate) fn file(py: Python<'_>, file: ortckpt_core::MappedFile) -> PyResult<Held> {
        Ok(Held::File(Py::new(py, MappedFile::wrap(file))?))
    }

    /// The Python object holding the bytes.
    fn object<'py>(&self, py: Python<'py>) -> &Bound<'py, PyAny> {
        match self {
            Held::Memory { object, .. } => object.bind(py),
            Held::File(file) => file.bind(py).as_any(),
            Held::Paged(paged) => paged.bind(py).as_any(),
        }
    }
}

impl CheckpointBytes for Held {
    fn raw(&self) -> (*const u8, usize) {
        match self {
            Held::Memory { bytes, .. } => bytes.raw(),
            Held::File(file) => file.get().core().raw(),
            Held::Paged(paged) => paged.get().paged().raw(),
        }
    }

    fn fill(&self, offset: usize, len: usize) -> ortckpt_core::Result<()> {
        match self {
            Held::Paged(paged) => paged.get().paged().fill(offset, len),
            Held::Memory { .. } | Held::File(_) => Ok(()),
        }
    }

    fn fill_all(&self, ranges: &mut [(usize, usize)]) -> ortckpt_core::Result<()> {
        match self {
            Held::Paged(paged) => paged.get().paged().fill_all(ranges),
            Held::Memory { .. } | Held::File(_) => Ok(()),
        }
    }

    fn file(&self) -> Option<&ortckpt_core::MappedFile> {
        match self {
            Held::Memory { .. } | Held::Paged(_) => None,
            Held::File(file) => Some(file.get().core()),
        }
    }
}

/// A verified checkpoint: the core's loaded checkpoint, over buffers Python holds.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct Index {
    loaded: LoadedCheckpoint<Held>,
    /// The input's name in messages: a path or "<bytes>".
    #[pyo3(get)]
    source: String,
}

impl Index {
    pub(crate) fn new(loaded: LoadedCheckpoint<Held>, source: String) -> Index {
        Index { loaded, source }
    }

    fn index(&self) -> &CheckpointIndex {
        self.loaded.index()
    }

    fn record(&self, py: Python<'_>, position: usize, tensor: TensorRef<'_>) -> PyResult<TensorRecord> {
        // every object made here may fail for want of memory: MemoryError, never a panic
        crate::reserve::rearm();
        let (storage, offset, nbytes, strings) = match tensor.storage {
            Storage::Inline { offset, len, .. } => ("inline", offset as u64, len as u64, None),
            Storage::External { offset, len } => ("external", offset, len, None),
            Storage::Strings(values) => {
                ("strings", 0, 0, Some(py_strs(py, values.iter().map(String::as_str))?.unbind()))
            }
            Storage::Nominal => ("nominal", 0, 0, None),
        };
        let trainable = self.index().param_kind(position).map(|k| k == ParamKind::Trainable);
        Ok(TensorRecord {
            position: py_uint(py, position as u64)?.unbind(),
            name: py_str(py, tensor.name)?.unbind(),
            doc_string: py_str(py, tensor.doc_string)?.unbind(),
            data_type: tensor.data_type.code(),
            dims: py_ints(py, tensor.dims)?.unbind(),
            storage: py_str(py, storage)?.unbind(),
            offset: py_uint(py, offset)?.unbind(),
            nbytes: py_uint(py, nbytes)?.unbind(),
            strings,
            trainable,
        })
    }

    /// The exception for a failed use of the bytes: the one a paged source's read raised, if
    /// any, else the core's error.
    fn error(&self, e: ortckpt_core::Error) -> PyErr {
        let held = std::iter::once(self.loaded.checkpoint()).chain(self.loaded.external());
        let thrown = held.filter_map(|h| match h {
            Held::Paged(paged) => raised(paged.get().paged()),
            Held::Memory { .. } | Held::File(_) => None,
        });
        thrown.into_iter().next().unwrap_or_else(|| core_error(&self.source, GuardedError::Core(e)))
    }

    /// The values of `tensor` (of this index) as a read-only numpy view of `descr`; None when
    /// they are not bytes or cannot be viewed (empty, misaligned, too many dims).
    fn view<'py>(
        &self,
        py: Python<'py>,
        tensor: &TensorRef<'_>,
        descr: &Bound<'py, PyArrayDescr>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.loaded.locate(tensor.storage) {
            // SAFETY: the core checked the bytes lie inside the buffer held by `owner`, and that
            // `len` is the shape's element count times the element size.
            Some(v) => unsafe { view(py, descr, tensor.dims, v.data, v.len, v.owner.object(py)) },
            None => Ok(None),
        }
    }
}

#[pymethods]
impl Index {
    /// Call before the values of the tensor at `position` are used for the first time: raises
    /// CheckpointChangedError when its file was modified on disk since it was loaded, compares its
    /// stored length when loading left that for first use (TensorDataError on a mismatch), and
    /// gives a long range of a mapped file normal readahead.
    fn prepare(&self, py: Python<'_>, position: usize) -> PyResult<()> {
        // Without the GIL: a paged source's read takes it back while it holds the source's lock.
        py.detach(|| self.loaded.prepare(position)).map_err(|e| self.error(e))
    }

    /// `prepare` of every optimizer momentum in one call (each file checked once): a save of a
    /// loaded state's untouched momentums then views their bytes without a call each.
    fn prepare_momentums(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.loaded.prepare_momentums()).map_err(|e| self.error(e))
    }

    /// `prepare(position)`, then the tensor's values as a read-only numpy view of dtype `dtype`;
    /// None when the caller must make the array itself (strings, nominal, empty and misaligned
    /// tensors).
    fn array<'py>(
        &self,
        py: Python<'py>,
        position: usize,
        dtype: &Bound<'py, PyArrayDescr>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.prepare(py, position)?;
        let Some(tensor) = self.index().tensor(position) else { return Ok(None) };
        self.view(py, &tensor, dtype)
    }

    /// Every parameter not named in `skip`, sorted by name: `(arrays, others)`, where `arrays`
    /// maps each name to a read-only numpy view of its bytes (dtype from `dtype_of(data_type)`),
    /// or to None for the tensors listed in `others`, whose arrays the caller makes itself
    /// (strings, nominal, empty and misaligned tensors). Runs `prepare_parameters` first.
    fn parameter_arrays<'py>(
        &self,
        py: Python<'py>,
        dtype_of: &Bound<'py, PyAny>,
        skip: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyDict>, Vec<String>)> {
        py.detach(|| self.loaded.prepare_parameters()).map_err(|e| self.error(e))?;
        let mut dtypes: HashMap<i32, Bound<'py, PyArrayDescr>> = HashMap::new();
        let arrays = PyDict::new(py);
        let mut others = Vec::new();
        let none = py.None();
        let index = self.index();
        for &position in index.parameters_by_name() {
            let Some(tensor) = index.tensor(position as usize) else { continue };
            let name = PyString::new(py, tensor.name);
            if skip.contains(&name)? {
                continue;
            }
            let code = tensor.data_type.code();
            let descr = match dtypes.get(&code) {
                Some(descr) => descr.clone(),
                None => {
                    let descr = dtype_of.call1((code,))?.cast_into::<PyArrayDescr>()?;
                    dtypes.insert(code, descr.clone());
                    descr
                }
            };
            let array = self.view(py, &tensor, &descr)?;
            match array {
                Some(array) => arrays.set_item(name, array)?,
                None => {
                    arrays.set_item(name, &none)?;
                    others.push(tensor.name.to_owned());
                }
            }
        }
        Ok((arrays, others))
    }

    /// What a save needs of every parameter not named in `skip`, sorted by name, in one call:
    /// `(trainable, spec)` pairs, `spec` the writer's `(name, data_type, dims, data)` tuple (with
    /// the doc string as a fifth item when there is one), `data` a memoryview of the tensor's bytes
    /// in the checkpoint or its external data file, its strings, or None (nominal). Runs
    /// `prepare_parameters` first (the one check of the files that per-tensor `prepare` would
    /// make), so a loaded state's untouched parameters cross into native code once, not twice each.
    fn parameter_specs<'py>(
        &self,
        py: Python<'py>,
        skip: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.loaded.prepare_parameters().map_err(|e| self.error(e))?;
        crate::reserve::rearm();
        let checkpoint = PyMemoryView::from(self.loaded.checkpoint().object(py))?;
        let external = match self.loaded.external() {
            Some(e) => Some(PyMemoryView::from(e.object(py))?),
            None => None,
        };
        let out = PyList::empty(py);
        let index = self.index();
        for &position in index.parameters_by_name() {
            let position = position as usize;
            let Some(tensor) = index.tensor(position) else { continue };
            let name = py_str(py, tensor.name)?;
            if skip.contains(&name)? {
                continue;
            }
            let data: Bound<'py, PyAny> = match tensor.storage {
                Storage::Inline { offset, len, .. } => {
                    let start = isize::try_from(offset).unwrap_or(isize::MAX);
                    let end = isize::try_from(offset.saturating_add(len)).unwrap_or(isize::MAX);
                    checkpoint.get_item(PySlice::new(py, start, end, 1))?
                }
                Storage::External { offset, len } => {
                    let external = external.as_ref().ok_or_else(|| {
                        self.error(ortckpt_core::Error::Internal {
                            detail: format!(
                                "tensor {:?} is external, and the index holds no external data",
                                tensor.name
                            ),
                        })
                    })?;
                    let start = isize::try_from(offset).unwrap_or(isize::MAX);
                    let end = isize::try_from(offset.saturating_add(len)).unwrap_or(isize::MAX);
                    external.get_item(PySlice::new(py, start, end, 1))?
                }
                Storage::Strings(values) => py_strs(py, values.iter().map(String::as_str))?.into_any(),
                Storage::Nominal => py.None().into_bound(py),
            };
            let code = tensor.data_type.code().into_pyobject(py)?.into_any();
            let dims = py_ints(py, tensor.dims)?.into_any();
            let spec = if tensor.doc_string.is_empty() {
                PyTuple::new(py, [name.into_any(), code, dims, data])?
            } else {
                PyTuple::new(
                    py,
                    [name.into_any(), code, dims, data, py_str(py, tensor.doc_string)?.into_any()],
                )?
            };
            let trainable = index.param_kind(position) == Some(ParamKind::Trainable);
            out.append((trainable, spec))?;
        }
        Ok(out)
    }

    /// The checkpoint's bytes (`bytes` or a `MappedFile`): inline ranges point into it.
    #[getter]
    fn buffer(&self, py: Python<'_>) -> Py<PyAny> {
        self.loaded.checkpoint().object(py).clone().unbind()
    }

    /// The external data file's bytes, when the checkpoint has external data.
    #[getter]
    fn external(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.loaded.external().map(|e| e.object(py).clone().unbind())
    }

    #[getter]
    fn version(&self) -> i32 {
        self.index().version
    }

    #[getter]
    fn is_nominal(&self) -> bool {
        self.index().is_nominal
    }

    #[getter]
    fn has_external_data(&self) -> bool {
        self.index().has_external_data
    }

    /// Number of parameters (trainable and frozen).
    fn parameter_count(&self) -> usize {
        self.index().parameter_count()
    }

    /// Every parameter name, sorted.
    fn parameter_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let index = self.index();
        let names =
            index.parameters_by_name().iter().filter_map(|&p| index.tensor(p as usize).map(|t| t.name));
        py_strs(py, names)
    }

    /// Whether `name` is a trainable parameter (None when there is no such parameter).
    fn is_trainable(&self, name: &str) -> Option<bool> {
        let position = self.index().find_parameter(name)?;
        self.index().param_kind(position).map(|k| k == ParamKind::Trainable)
    }

    /// The parameter called `name`, or None.
    fn parameter(&self, py: Python<'_>, name: &str) -> PyResult<Option<TensorRecord>> {
        match self.index().find_parameter(name) {
            Some(position) => self.tensor(py, position).map(Some),
            None => Ok(None),
        }
    }

    /// The tensor at `position` (file order).
    fn tensor(&self, py: Python<'_>, position: usize) -> PyResult<TensorRecord> {
        let tensor = self.index().tensor(position).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("no tensor at position {position}"))
        })?;
        self.record(py, position, tensor)
    }

    /// Optimizer groups: `[(name, step, initial_learning_rate, [(param_name, [TensorRecord])])]`.
    #[allow(clippy::type_complexity)]
    fn optimizer_groups(
        &self,
        py: Python<'_>,
    ) -> PyResult<Vec<(String, i64, f64, Vec<(String, Vec<TensorRecord>)>)>> {
        let mut groups = Vec::with_capacity(self.index().optimizer_groups.len());
        for g in &self.index().optimizer_groups {
            let mut states = Vec::with_capacity(g.states.len());
            for s in &g.states {
                let mut momentums = Vec::with_capacity(s.momentums.len());
                for position in s.momentums.clone() {
                    momentums.push(self.tensor(py, position)?);
                }
                states.push((s.param_name.clone(), momentums));
            }
            groups.push((g.name.clone(), g.step, f64::from(g.initial_learning_rate), states));
        }
        Ok(groups)
    }

    /// Properties in file order (ints, then floats, then strings).
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for p in &self.index().properties {
            let name = py_str(py, &p.name)?;
            match &p.value {
                PropertyValue::Int(v) => out.append((name, py_int(py, *v)?))?,
                PropertyValue::Float(v) => out.append((name, f64::from(*v)))?,
                PropertyValue::Str(v) => out.append((name, py_str(py, v)?))?,
            }
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "Index({:?}, version {}, {} parameters, {} tensors)",
            self.source,
            self.index().version,
            self.index().parameter_count(),
            self.index().tensor_count()
        )
    }
}

/// The index of a checkpoint (and external data file) read on demand: its structure read now.
pub(crate) fn paged(
    py: Python<'_>,
    checkpoint: Paged,
    external: Option<Paged>,
    source: String,
    external_source: Option<String>,
) -> PyResult<Index> {
    let (c, e) = (checkpoint.clone(), external.clone());
    let loaded = py.detach(|| guarded(|| LoadedCheckpoint::paged(c, e, external_source.as_deref())));
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let mut errs = std::iter::once(&checkpoint).chain(external.as_ref()).filter_map(raised);
            return Err(errs.next().unwrap_or_else(|| core_error(&source, err)));
        }
    };
    let loaded = loaded.map_bytes(|inner| Py::new(py, PagedBuffer { inner }).map(Held::Paged))?;
    Ok(Index::new(loaded, source))
}
