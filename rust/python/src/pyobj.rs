//! Python objects made without PyO3's infallible conversions: those panic when CPython cannot
//! allocate the object ("PyObject pointer is null"), which would reach the caller as a
//! `PanicException`. These return CPython's own `MemoryError` instead. Used where the core hands
//! Python one object per item of an input (tensor records, name lists, properties).

use std::os::raw::c_char;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

/// `text` as a Python `str`.
pub(crate) fn py_str<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyString>> {
    let len =
        ffi::Py_ssize_t::try_from(text.len()).map_err(|_| pyo3::exceptions::PyMemoryError::new_err(()))?;
    // SAFETY: a pointer and length of valid UTF-8 alive for the call; a null result comes with
    // CPython's error set, which from_owned_ptr_or_err takes.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyUnicode_FromStringAndSize(text.as_ptr().cast::<c_char>(), len),
        )
        .map(|o| o.cast_into_unchecked())
    }
}

/// `value` as a Python `int`.
pub(crate) fn py_int(py: Python<'_>, value: i64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: no pointer is passed; a null result comes with CPython's error set.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromLongLong(value)) }
}

/// `value` as a Python `int`.
pub(crate) fn py_uint(py: Python<'_>, value: u64) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: as `py_int`.
    unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyLong_FromUnsignedLongLong(value)) }
}

/// A tuple of `values` as Python ints.
pub(crate) fn py_ints<'py>(py: Python<'py>, values: &[i64]) -> PyResult<Bound<'py, PyTuple>> {
    let items = values.iter().map(|&v| py_int(py, v)).collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, items)
}

/// A list of `texts` as Python strs.
pub(crate) fn py_strs<'py, 'a>(
    py: Python<'py>,
    texts: impl IntoIterator<Item = &'a str>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for text in texts {
        list.append(py_str(py, text)?)?;
    }
    Ok(list)
}
