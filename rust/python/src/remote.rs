//! Checkpoints read on demand: the core's paged input ([`ortckpt_core::PagedBytes`]) fills the
//! blocks the parser reaches, and each tensor's bytes before their first use, from a Python
//! callable `read(offset, length) -> bytes` (range requests to an object store, made by
//! `ortckpt._sources`; called with the GIL) or from a local file the core opened (`pread`, a
//! round's reference: its structure read, not its values). A reply of another length than asked
//! is a `CheckpointChangedError`, never a panic; an exception the callable raises is re-raised as
//! it is.

use std::ffi::c_int;
use std::fs::File;
use std::sync::{Arc, Mutex, PoisonError};

use ortckpt_core::{BlockSource, PagedBytes};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{core_error, CheckpointChangedError, GuardedError};
use crate::mapped::export_read_only;

/// Where a paged checkpoint's blocks come from.
enum Reader {
    /// `read(offset, length) -> bytes`, called with the GIL.
    Python(Py<PyAny>),
    /// A file opened by the core's file layer (`pread`, without the GIL).
    File(File),
}

/// A block source: a Python callable or a local file.
pub(crate) struct PagedSource {
    read: Reader,
    name: String,
    /// The first exception a read raised (or the length check made): raised in place of the
    /// core's error for the failed fill.
    raised: Mutex<Option<PyErr>>,
}

impl PagedSource {
    /// The exception a failed read left, if any (taken: a later failure reports its own).
    pub(crate) fn take_raised(&self) -> Option<PyErr> {
        self.raised.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn call(&self, py: Python<'_>, read: &Py<PyAny>, offset: u64, buf: &mut [u8]) -> PyResult<()> {
        let reply = read.bind(py).call1((offset, buf.len()))?;
        let bytes = reply.cast::<PyBytes>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "{}: the read function returned {}, not bytes",
                self.name,
                reply.get_type().name().map(|n| n.to_string()).unwrap_or_default()
            ))
        })?;
        let got = bytes.as_bytes();
        if got.len() != buf.len() {
            return Err(CheckpointChangedError::new_err(format!(
                "{}: asked for {} bytes at offset {offset}, got {}: the object is shorter or longer than \
                 when it was opened (replaced or truncated), or its server does not serve byte ranges; \
                 load it again",
                self.name,
                buf.len(),
                got.len()
            )));
        }
        buf.copy_from_slice(got);
        Ok(())
    }
}

impl BlockSource for PagedSource {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let read = match &self.read {
            // the core's `pread` of an opened file (a short file is a changed one)
            Reader::File(file) => return BlockSource::read_at(&file, offset, buf),
            Reader::Python(read) => read,
        };
        Python::attach(|py| {
            self.call(py, read, offset, buf).map_err(|e| {
                let mut raised = self.raised.lock().unwrap_or_else(PoisonError::into_inner);
                if raised.is_none() {
                    *raised = Some(e);
                }
                std::io::Error::other("the read function failed")
            })
        })
    }
}

pub(crate) type Paged = Arc<PagedBytes<PagedSource>>;

/// The bytes of a checkpoint read on demand: a read-only buffer the size of the object, whose
/// ranges hold the object's bytes once fetched (the state fetches a tensor's before using them).
#[pyclass(frozen, module = "ortckpt._native")]
pub(crate) struct PagedBuffer {
    pub(crate) inner: Paged,
}

impl PagedBuffer {
    pub(crate) fn paged(&self) -> &Paged {
        &self.inner
    }
}

#[pymethods]
impl PagedBuffer {
    /// Bytes fetched from the source so far.
    #[getter]
    fn fetched(&self) -> u64 {
        self.inner.fetched()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// # Safety
    /// `view` must come from Python's buffer protocol.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let (base, len) = ortckpt_core::CheckpointBytes::raw(&slf.get().inner);
        // SAFETY: the mapping holds `len` bytes owned by `slf` (frozen) while it lives; filled
        // ranges never change again, and the state fills a range before it reads it.
        let bytes = unsafe { std::slice::from_raw_parts(base, len) };
        // SAFETY: `view` comes from the buffer protocol (the caller's promise).
        unsafe { export_read_only(slf.as_any(), bytes, view, flags, "a remote checkpoint's buffer") }
    }
}

pub(crate) fn paged(read: Py<PyAny>, size: u64, block: usize, name: &str) -> PyResult<Paged> {
    paged_from(Reader::Python(read), size, block, name)
}

/// `size` bytes of a file the core opened, read on demand.
pub(crate) fn paged_file(file: File, size: u64, block: usize, name: &str) -> PyResult<Paged> {
    paged_from(Reader::File(file), size, block, name)
}

fn paged_from(read: Reader, size: u64, block: usize, name: &str) -> PyResult<Paged> {
    let source = PagedSource { read, name: name.to_owned(), raised: Mutex::new(None) };
    PagedBytes::new(source, size, block, name)
        .map(Arc::new)
        .map_err(|e| core_error(name, GuardedError::Core(e)))
}

/// The exception behind a failed fill of `bytes`: the one its read raised, if any.
pub(crate) fn raised(bytes: &Paged) -> Option<PyErr> {
    bytes.source().take_raised()
}
