"""ORT ``TensorDataType`` codes <-> numpy dtypes.

Every numeric tensor in a checkpoint is stored little-endian. STRING tensors (code 8) are numpy object
arrays holding ``str``. The ml_dtypes extension types cover bfloat16 and the float8 variants.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import numpy as np

from . import _native

UNDEFINED = 0
FLOAT = 1
UINT8 = 2
INT8 = 3
UINT16 = 4
INT16 = 5
INT32 = 6
INT64 = 7
STRING = 8
BOOL = 9
FLOAT16 = 10
DOUBLE = 11
UINT32 = 12
UINT64 = 13
COMPLEX64 = 14
COMPLEX128 = 15
BFLOAT16 = 16
FLOAT8E4M3FN = 17
FLOAT8E4M3FNUZ = 18
FLOAT8E5M2 = 19
FLOAT8E5M2FNUZ = 20

_OBJECT = np.dtype(object)

# code -> (numpy name, ORT enum name): the core's one table of data types (``_native.DATA_TYPES``,
# also what the browser viewer and the core's messages spell)
_NAMES: dict[int, tuple[str, str]] = {code: (name, ort) for code, name, ort, _ in _native.DATA_TYPES}

# The ml_dtypes types (bfloat16, float8): ml_dtypes takes long to import, so it is imported on first
# use of one of these types; their ml_dtypes attribute is their numpy name.
_ML_CODES: frozenset[int] = frozenset({BFLOAT16, FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ})

# code -> numpy dtype for the builtin types: every number little-endian, as stored; strings as objects
_TABLE: dict[int, np.dtype[Any]] = {
    code: _OBJECT if code == STRING else np.dtype(name).newbyteorder("<")
    for code, (name, _) in _NAMES.items()
    if code not in _ML_CODES
}


@cache
def _ml_dtype(code: int) -> np.dtype[Any]:
    import ml_dtypes

    dtype: np.dtype[Any] = np.dtype(getattr(ml_dtypes, _NAMES[code][0]))
    return dtype


# numpy (kind, itemsize) -> code for the builtin numeric kinds
_BY_KIND: dict[tuple[str, int], int] = {
    ("b", 1): BOOL,
    ("i", 1): INT8,
    ("i", 2): INT16,
    ("i", 4): INT32,
    ("i", 8): INT64,
    ("u", 1): UINT8,
    ("u", 2): UINT16,
    ("u", 4): UINT32,
    ("u", 8): UINT64,
    ("f", 2): FLOAT16,
    ("f", 4): FLOAT,
    ("f", 8): DOUBLE,
    ("c", 8): COMPLEX64,
    ("c", 16): COMPLEX128,
}

_ML_DTYPES: tuple[int, ...] = tuple(sorted(_ML_CODES))

# numpy name -> code (the core's names: float32, bfloat16, ..., string)
_BY_NAME: dict[str, int] = {name: code for code, (name, _) in _NAMES.items()}

DATA_TYPES: frozenset[int] = frozenset(_NAMES)
"""Every data type code this package can read and write."""


def is_known(code: int) -> bool:
    return code in DATA_TYPES


def to_numpy(code: int) -> np.dtype[Any]:
    """The numpy dtype for an ORT data type code (object dtype for STRING)."""
    entry = _TABLE.get(code)
    if entry is not None:
        return entry
    if code in _ML_CODES:
        return _ml_dtype(code)
    raise ValueError(f"unknown ORT tensor data type {code}")


def from_name(name: str) -> int | None:
    """The code of the type numpy (or ml_dtypes) calls ``name`` (``float32``, ``bfloat16``,
    ``string``), from the core's table; None for any other name."""
    return _BY_NAME.get(name)


def is_ml_dtype(code: int | None) -> bool:
    """Whether ``code`` is an ml_dtypes type (bfloat16, the float8 types): stored by npz and
    torch as raw unsigned views of their bytes."""
    return code in _ML_CODES


def type_name(code: int) -> str:
    """Short lower-case name (``float32``, ``bfloat16``, ``string``, ...); ``type<N>`` when unknown."""
    entry = _NAMES.get(code)
    return entry[0] if entry is not None else f"type{code}"


def ort_name(code: int) -> str:
    """The ORT ``TensorDataType`` enum name (``FLOAT``, ``BFLOAT16``, ...)."""
    entry = _NAMES.get(code)
    return entry[1] if entry is not None else f"UNDEFINED({code})"


def element_size(code: int) -> int:
    """Bytes per element in ``raw_data``; 0 for STRING (stored as a string list)."""
    if code == STRING:
        return 0
    return to_numpy(code).itemsize


def from_numpy(dtype: np.dtype[Any], name: str) -> int:
    """The ORT data type code for a numpy dtype, ignoring byte order.

    ``<U``/``>U`` and object dtypes map to STRING (object arrays must hold ``str``; callers check).
    Raises TypeError naming the tensor for anything else.
    """
    kind = dtype.kind
    if kind in ("U", "O"):
        return STRING
    # An array of an ml_dtypes type means ml_dtypes is imported already: no import cost here.
    if "ml_dtypes" in sys.modules:
        for code in _ML_DTYPES:
            # by scalar type: also matches byte-swapped variants. Their kind is not reliable
            # (float8_e5m2 reports kind "f" with itemsize 1), so check them before the builtin kinds.
            if dtype.type is _ml_dtype(code).type:
                return code
    # isbuiltin == 2: some other user-defined dtype (ml_dtypes int4, float4, ...)
    if dtype.isbuiltin != 2 and dtype.names is None and dtype.subdtype is None:
        found = _BY_KIND.get((kind, dtype.itemsize))
        if found is not None:
            return found
    raise TypeError(
        f"tensor {name!r}: numpy dtype {dtype} has no ONNX Runtime checkpoint equivalent "
        f"(supported: {', '.join(sorted({type_name(c) for c in DATA_TYPES}))})"
    )
