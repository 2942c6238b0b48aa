//! `Index`: the core's checkpoint index held in Rust, handed to Python one record at a time, so a
//! checkpoint of 400k tensors costs no Python object per tensor until one is asked for.

use std::collections::HashMap;
use std::ops::Range;

use numpy::PyArrayDescr;
use ortckpt_core::{CheckpointIndex, ParamKind, PropertyValue, Storage, TensorRef};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::arrays::view;
use crate::errors::{core_error, GuardedError};
use crate::mapped::MappedFile;

/// One tensor of an index: what the core found, with its storage kind decided by the core.
#[pyclass(frozen, get_all, module = "ortckpt._native")]
pub(crate) struct TensorRecord {
    /// Position in the index (file order: trainable, frozen, then momentums).
    position: usize,
    name: String,
    doc_string: String,
    data_type: i32,
    dims: Py<PyTuple>,
    /// "inline", "external", "strings" or "nominal".
    storage: &'static str,
    /// Byte offset in the checkpoint ("inline") or in the external data file ("external").
    offset: u64,
    /// Bytes of values ("inline", "external"); 0 otherwise.
    nbytes: u64,
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
            self.name,
            self.data_type,
            self.dims.bind(py).repr().map(|r| r.to_string()).unwrap_or_default(),
            self.storage,
            self.offset,
            self.nbytes
        )
    }
}

/// A buffer an index points into, with its bytes' address and length.
struct Bytes<'a, 'py> {
    owner: &'a Bound<'py, PyAny>,
    base: *const u8,
    len: usize,
}

impl<'a, 'py> Bytes<'a, 'py> {
    fn of(owner: &'a Bound<'py, PyAny>) -> PyResult<Bytes<'a, 'py>> {
        let bytes = if let Ok(file) = owner.cast::<MappedFile>() {
            file.get().core().bytes()
        } else {
            // `index_checkpoint` accepts only bytes and MappedFiles.
            owner.cast::<PyBytes>()?.as_bytes()
        };
        Ok(Bytes { owner, base: bytes.as_ptr(), len: bytes.len() })
    }

    /// The address of `len` bytes at `offset`, when they lie inside the buffer.
    fn range(&self, offset: usize, len: usize) -> Option<(*const u8, usize, &'a Bound<'py, PyAny>)> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset <= end <= self.len`: the result points inside the buffer's allocation.
        let data = unsafe { self.base.add(offset) };
        Some((data, len, self.owner))
    }
}

/// Where the values of a tensor stored as `storage` are: address, length and owning buffer.
fn locate<'a, 'py>(
    storage: Storage<'_>,
    checkpoint: &Bytes<'a, 'py>,
    external: Option<&Bytes<'a, 'py>>,
) -> Option<(*const u8, usize, &'a Bound<'py, PyAny>)> {
    match storage {
        Storage::Inline { offset, len, .. } => checkpoint.range(offset, len),
        Storage::External { offset, len } => {
            external?.range(usize::try_from(offset).ok()?, usize::try_from(len).ok()?)
        }
        Storage::Strings(_) | Storage::Nominal => None,
    }
}

/// A verified checkpoint: the core's index plus the buffers its ranges point into.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct Index {
    index: CheckpointIndex,
    /// The input's name in messages: a path or "<bytes>".
    #[pyo3(get)]
    source: String,
    /// The checkpoint's bytes (`bytes` or a `MappedFile`): inline ranges point into it.
    #[pyo3(get)]
    buffer: Py<PyAny>,
    /// The external data file's bytes, when the checkpoint has external data.
    #[pyo3(get)]
    external: Option<Py<PyAny>>,
}

impl Index {
    pub(crate) fn new(
        index: CheckpointIndex,
        source: String,
        buffer: Py<PyAny>,
        external: Option<Py<PyAny>>,
    ) -> Index {
        Index { index, source, buffer, external }
    }

    fn record(&self, py: Python<'_>, position: usize, tensor: TensorRef<'_>) -> PyResult<TensorRecord> {
        let (storage, offset, nbytes, strings) = match tensor.storage {
            Storage::Inline { offset, len, .. } => ("inline", offset as u64, len as u64, None),
            Storage::External { offset, len } => ("external", offset, len, None),
            Storage::Strings(values) => ("strings", 0, 0, Some(PyList::new(py, values)?.unbind())),
            Storage::Nominal => ("nominal", 0, 0, None),
        };
        let trainable = self.index.param_kind(position).map(|k| k == ParamKind::Trainable);
        Ok(TensorRecord {
            position,
            name: tensor.name.to_owned(),
            doc_string: tensor.doc_string.to_owned(),
            data_type: tensor.data_type.code(),
            dims: PyTuple::new(py, tensor.dims)?.unbind(),
            storage,
            offset,
            nbytes,
            strings,
            trainable,
        })
    }

    /// Compares the stored lengths of the tensors at `positions` that loading left for first use
    /// (`ortckpt_core::LengthCheck`); a no-op for the others.
    fn check_lengths(&self, py: Python<'_>, positions: Range<usize>) -> PyResult<()> {
        let bytes = Bytes::of(self.buffer.bind(py))?;
        positions
            .into_iter()
            .try_for_each(|position| {
                // SAFETY: `self.buffer` holds the bytes (a `bytes` object or a MappedFile, which
                // keeps its mapping alive) for the whole call; a mapping's contents may change
                // (another program), which the raw reader allows.
                unsafe { self.index.check_inline_length_raw(position, bytes.base, bytes.len) }
            })
            .map_err(|e| core_error(&self.source, GuardedError::Core(e)))
    }

    /// `prepare` for every parameter at once: one check of each file, every length left for
    /// first use compared, normal readahead over each mapped file.
    fn prepare_parameters(&self, py: Python<'_>) -> PyResult<()> {
        let checkpoint = self.buffer.bind(py).cast::<MappedFile>().ok().cloned();
        for file in [checkpoint, self.external_file(py)].into_iter().flatten() {
            let file = file.get();
            file.prepare_range(0, file.core().bytes().len())?;
        }
        self.check_lengths(py, 0..self.index.parameter_count())
    }

    /// The external data file, when it is mapped.
    fn external_file<'py>(&self, py: Python<'py>) -> Option<Bound<'py, MappedFile>> {
        self.external.as_ref().and_then(|e| e.bind(py).cast::<MappedFile>().ok().cloned())
    }
}

#[pymethods]
impl Index {
    /// Call before the values of the tensor at `position` are used for the first time: raises
    /// CheckpointChangedError when its file was modified on disk since it was loaded, compares its
    /// stored length when loading left that for first use (TensorDataError on a mismatch), and
    /// gives a long range of a mapped file normal readahead.
    fn prepare(&self, py: Python<'_>, position: usize) -> PyResult<()> {
        let Some(tensor) = self.index.tensor(position) else { return Ok(()) };
        match tensor.storage {
            Storage::Inline { offset, len, length_checked } => {
                if let Ok(file) = self.buffer.bind(py).cast::<MappedFile>() {
                    file.get().prepare_range(offset, len)?;
                }
                if !length_checked {
                    self.check_lengths(py, position..position + 1)?;
                }
            }
            Storage::External { offset, len } => {
                if let Some(file) = self.external_file(py) {
                    // A range past usize gets no readahead (advice only); the file check still runs.
                    let (offset, len) = (usize::try_from(offset), usize::try_from(len));
                    file.get().prepare_range(offset.unwrap_or(usize::MAX), len.unwrap_or(0))?;
                }
            }
            Storage::Strings(_) | Storage::Nominal => {}
        }
        Ok(())
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
        let Some(tensor) = self.index.tensor(position) else { return Ok(None) };
        let checkpoint = Bytes::of(self.buffer.bind(py))?;
        let external = self.external.as_ref().map(|e| Bytes::of(e.bind(py))).transpose()?;
        match locate(tensor.storage, &checkpoint, external.as_ref()) {
            // SAFETY: `range` checked the bytes lie inside the buffer held by `owner`, and the
            // core guarantees `len` is the shape's element count times the element size.
            Some((data, len, owner)) => unsafe { view(py, dtype, tensor.dims, data, len, owner) },
            None => Ok(None),
        }
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
        self.prepare_parameters(py)?;
        let checkpoint = Bytes::of(self.buffer.bind(py))?;
        let external = self.external.as_ref().map(|e| Bytes::of(e.bind(py))).transpose()?;
        let mut dtypes: HashMap<i32, Bound<'py, PyArrayDescr>> = HashMap::new();
        let arrays = PyDict::new(py);
        let mut others = Vec::new();
        let none = py.None();
        for &position in self.index.parameters_by_name() {
            let Some(tensor) = self.index.tensor(position as usize) else { continue };
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
            let located = locate(tensor.storage, &checkpoint, external.as_ref());
            let array = match located {
                // SAFETY: `range` checked the bytes lie inside the buffer held by `owner`, and the
                // core guarantees `len` is the shape's element count times the element size.
                Some((data, len, owner)) => unsafe { view(py, &descr, tensor.dims, data, len, owner) }?,
                None => None,
            };
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

    #[getter]
    fn version(&self) -> i32 {
        self.index.version
    }

    #[getter]
    fn is_nominal(&self) -> bool {
        self.index.is_nominal
    }

    #[getter]
    fn has_external_data(&self) -> bool {
        self.index.has_external_data
    }

    /// Number of parameters (trainable and frozen).
    fn parameter_count(&self) -> usize {
        self.index.parameter_count()
    }

    /// Number of trainable parameters.
    fn trainable_count(&self) -> usize {
        self.index.trainable_count()
    }

    /// Every parameter name, sorted.
    fn parameter_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let names = self
            .index
            .parameters_by_name()
            .iter()
            .filter_map(|&p| self.index.tensor(p as usize).map(|t| t.name));
        PyList::new(py, names)
    }

    /// Whether `name` is a trainable parameter (None when there is no such parameter).
    fn is_trainable(&self, name: &str) -> Option<bool> {
        let position = self.index.find_parameter(name)?;
        self.index.param_kind(position).map(|k| k == ParamKind::Trainable)
    }

    /// The parameter called `name`, or None.
    fn parameter(&self, py: Python<'_>, name: &str) -> PyResult<Option<TensorRecord>> {
        match self.index.find_parameter(name) {
            Some(position) => self.tensor(py, position).map(Some),
            None => Ok(None),
        }
    }

    /// The tensor at `position` (file order).
    fn tensor(&self, py: Python<'_>, position: usize) -> PyResult<TensorRecord> {
        let tensor = self.index.tensor(position).ok_or_else(|| {
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
        let mut groups = Vec::with_capacity(self.index.optimizer_groups.len());
        for g in &self.index.optimizer_groups {
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
        for p in &self.index.properties {
            match &p.value {
                PropertyValue::Int(v) => out.append((&p.name, *v))?,
                PropertyValue::Float(v) => out.append((&p.name, f64::from(*v)))?,
                PropertyValue::Str(v) => out.append((&p.name, v))?,
            }
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "Index({:?}, version {}, {} parameters, {} tensors)",
            self.source,
            self.index.version,
            self.index.parameter_count(),
            self.index.tensor_count()
        )
    }
}
