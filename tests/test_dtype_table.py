"""One numpy dtype-name table: the core's (``DataType::numpy_name``), which the Python package,
the safetensors table and the browser build all read; no Python module spells the names itself."""

from __future__ import annotations

import pathlib

import numpy as np

from ortckpt import _dtypes, _native
from ortckpt.formats import _safetensors

_PACKAGE = pathlib.Path(_dtypes.__file__).parent


def test_python_names_come_from_the_core() -> None:
    for code, name, ort_name, _ in _native.DATA_TYPES:
        assert _dtypes.type_name(code) == name and _dtypes.ort_name(code) == ort_name
        assert _dtypes.from_name(name) == code
        if code != _dtypes.STRING:
            assert _dtypes.to_numpy(code).name == name  # the numpy dtype bears the core's name
    assert _dtypes.from_name("float128") is None
    assert {_dtypes.from_name(n) for n in ("bfloat16", "float8_e5m2")} <= _dtypes._ML_CODES
    for _, name in _native.SAFETENSORS_DTYPES:
        code = _dtypes.from_name(name)
        assert code is not None and _safetensors.numpy_dtype(name) == _dtypes.to_numpy(code)
    assert _safetensors.numpy_dtype("string") is None and _safetensors.numpy_dtype("x") is None
    assert np.dtype(_dtypes.to_numpy(_dtypes.FLOAT)).str == "<f4"


def test_no_python_module_spells_the_ml_dtypes_names() -> None:
    """bfloat16/float8 are recognised through the core's table (``_dtypes.from_name`` /
    ``is_ml_dtype``), never by a list of names of their own."""
    spelled = [
        str(path.relative_to(_PACKAGE))
        for path in _PACKAGE.rglob("*.py")
        if any(f'"{n}"' in path.read_text() for n in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3fn"))
    ]
    assert spelled == []
