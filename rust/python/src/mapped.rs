//! `MappedFile`: a checkpoint file's bytes (a read-only memory map, or the file read into private
//! memory) exposed through the buffer protocol, so numpy arrays can be zero-copy views into it;
//! each view holds a reference that keeps the bytes alive. Also the path conversion every
//! file-taking function shares, and the Ctrl-C check for long reads.

use std::ffi::{c_int, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{core_error, GuardedError};

#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct MappedFile {
    inner: ortckpt_core::MappedFile,
}

impl MappedFile {
    pub(crate) fn wrap(inner: ortckpt_core::MappedFile) -> Self {
        MappedFile { inner }
    }

    /// The core's file.
    pub(crate) fn core(&self) -> &ortckpt_core::MappedFile {
        &self.inner
    }
}

/// A path argument (str, bytes or os.PathLike) as the file system's bytes, via `os.fsencode`, so a
/// non-UTF-8 name reaches the OS unchanged.
pub(crate) fn path_arg(path: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let encoded = path.py().import("os")?.call_method1("fsencode", (path,))?;
    let bytes = encoded.cast::<PyBytes>()?.as_bytes().to_vec();
    Ok(PathBuf::from(OsString::from_vec(bytes)))
}

/// A path for messages.
pub(crate) fn show(path: &Path) -> String {
    path.display().to_string()
}

/// Runs `f` without the GIL, giving it a "keep going?" check that looks for pending signals
/// (Ctrl-C) with the GIL briefly re-taken; a signal's exception is returned instead of `f`'s
/// `Interrupted` error.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    source: &str,
    f: impl FnOnce(&mut dyn FnMut() -> bool) -> ortckpt_core::Result<T> + Send,
) -> PyResult<T> {
    let mut pending: Option<PyErr> = None;
    let result = py.detach(|| {
        crate::errors::guarded(|| {
            f(&mut || {
                Python::attach(|py| match py.check_signals() {
                    Ok(()) => true,
                    Err(e) => {
                        pending = Some(e);
                        false
                    }
                })
            })
        })
    });
    match (result, pending) {
        (Ok(v), _) => Ok(v),
        (Err(_), Some(signal)) => Err(signal),
        (Err(e), None) => Err(core_error(source, e)),
    }
}

#[pymethods]
impl MappedFile {
    /// Opens (regular files only, never blocking) and memory-maps `path`.
    #[new]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let path = path_arg(path)?;
        let inner = py
            .detach(|| ortckpt_core::MappedFile::open(&path))
            .map_err(|e| core_error(&show(&path), GuardedError::Core(e)))?;
        Ok(MappedFile { inner })
    }

    /// Opens (regular files only, never blocking) and reads `path` into private memory (immune to
    /// another program truncating the file later); SourceTooLargeError for a file of more than
    /// `max_bytes` bytes, before a byte is read.
    #[staticmethod]
    fn read(py: Python<'_>, path: &Bound<'_, PyAny>, max_bytes: u64) -> PyResult<Self> {
        let path = path_arg(path)?;
        let source = show(&path);
        let inner = interruptible(py, &source, |keep_going| {
            ortckpt_core::MappedFile::read_path_within(&path, Some(max_bytes), keep_going)
        })?;
        Ok(MappedFile { inner })
    }

    /// The file's path, as given.
    #[getter]
    fn path(&self) -> OsString {
        self.inner.path().as_os_str().to_os_string()
    }

    /// True for a memory map, False for bytes read into private memory.
    #[getter]
    fn mapped(&self) -> bool {
        self.inner.is_mapped()
    }

    /// Before `length` bytes at `offset` are used for the first time: CheckpointChangedError
    /// when the file was modified on disk (in place) since it was opened, then normal readahead
    /// for the range.
    fn prepare(&self, offset: usize, length: usize) -> PyResult<()> {
        self.inner
            .prepare(offset, length)
            .map_err(|e| core_error(&show(self.inner.path()), GuardedError::Core(e)))
    }

    fn __len__(&self) -> usize {
        self.inner.bytes().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "MappedFile({:?}, {} bytes{})",
            show(self.inner.path()),
            self.inner.bytes().len(),
            if self.inner.is_mapped() { "" } else { ", in memory" }
        )
    }

    /// Exports the bytes as a read-only 1-D buffer of unsigned bytes.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        // SAFETY: `view` comes from Python's buffer protocol; the bytes belong to `slf` (a frozen
        // object) and stay valid while it lives.
        unsafe {
            export_read_only(slf.as_any(), slf.get().inner.bytes(), view, flags, "a checkpoint memory map")
        }
    }
}

/// Exports `bytes`, owned by `owner`, as a read-only 1-D buffer of unsigned bytes into `view`:
/// the `__getbuffer__` of every read-only byte holder here (`what` names it when a writable view
/// is asked for).
///
/// # Safety
/// `view` must come from Python's buffer protocol (null is refused), and `bytes` must stay valid
/// and unchanged while `owner` is alive.
pub(crate) unsafe fn export_read_only(
    owner: &Bound<'_, PyAny>,
    bytes: &[u8],
    view: *mut ffi::Py_buffer,
    flags: c_int,
    what: &str,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("buffer view is null"));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err(format!("{what} is read-only")));
    }
    let len =
        isize::try_from(bytes.len()).map_err(|_| PyBufferError::new_err(format!("{what} is too large")))?;
    // SAFETY: `view` is non-null and from the buffer protocol; FillInfo stores a new reference to
    // `owner` in the view, which keeps the bytes alive (the caller's promise) until it is released.
    let rc = unsafe {
        ffi::PyBuffer_FillInfo(view, owner.as_ptr(), bytes.as_ptr() as *mut std::ffi::c_void, len, 1, flags)
    };
    if rc == -1 {
        return Err(PyErr::fetch(owner.py()));
    }
    Ok(())
}

/// A model's directory held open, for its ONNX external data files: `map(location)` maps the
/// file `location` names inside it, opened by the core's beneath rule (`openat2` with
/// `RESOLVE_BENEATH`, or a component-by-component walk with `O_NOFOLLOW`): a location leading out
/// of the directory, absolute, empty or naming a directory raises ExternalDataError; a missing
/// file or a FIFO, the OSError.
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct ExternalDataDir {
    dir: ortckpt_core::Dir,
}

#[pymethods]
impl ExternalDataDir {
    #[new]
    fn new(py: Python<'_>, path: &Bound<'_, PyAny>) -> PyResult<Self> {
        let path = path_arg(path)?;
        let dir = py
            .detach(|| ortckpt_core::Dir::open(&path))
            .map_err(|e| core_error(&show(&path), GuardedError::Core(e)))?;
        Ok(ExternalDataDir { dir })
    }

    /// Opens and memory-maps the regular file `location` names inside the directory.
    fn map(&self, py: Python<'_>, location: &Bound<'_, PyAny>) -> PyResult<MappedFile> {
        let location = path_arg(location)?;
        let dir = &self.dir;
        let shown = show(dir.path());
        let inner = py
            .detach(|| {
                crate::errors::guarded(|| {
                    let (file, _) = ortckpt_core::open_beneath(dir, &location)?;
                    ortckpt_core::MappedFile::map(file, &dir.path().join(&location))
                })
            })
            .map_err(|e| core_error(&shown, e))?;
        Ok(MappedFile::wrap(inner))
    }
}
