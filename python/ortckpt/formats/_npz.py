"""Checkpoints <-> ``.npz`` archives (numpy only).

Every tensor is one ``<key>.npy`` member, written uncompressed one at a time (as ``numpy.savez``
does); bfloat16/float8 tensors are stored as raw unsigned views and string tensors as numpy unicode
arrays, both recorded in the layout member ``__ortckpt__.npy`` (a uint8 array of JSON).

Reading goes through the core's decoder (``_native.read_npz``): the archive is opened once as a
regular file (a FIFO or device is refused, never waited on) and read into private memory; stored
members are views into those bytes, deflated members are inflated one at a time within a decompression budget
(``max_decompressed_bytes``; by default ``max(NPZ_MIN_BUDGET, NPZ_BUDGET_RATIO x archive size)``),
and nothing is ever unpickled: object and structured arrays are refused.
"""

from __future__ import annotations

import math
import zipfile
from typing import Any

import numpy as np

from .. import _dtypes, _native
from .._atomic import atomic_file
from .._progress import progress
from .._tensor import empty_array
from ..errors import ConversionError
from ..state import CheckpointState
from ._flat_layout import NPZ_KEY, Layout, array_of, build_state, decode, encode, tensors_of

_RAW_VIEWS = {1: np.uint8, 2: np.uint16}


def _storable(key: str, array: np.ndarray[Any, Any], layout: Layout) -> np.ndarray[Any, Any]:
    problem = _native.npz_member_problem(key + ".npy")
    if problem is not None:  # the core's rule, which from_npz applies too
        raise ConversionError(
            f"tensor {key!r}: its .npz member name {problem}, so a zip tool would not extract it "
            "inside its folder; ortckpt refuses to write it (convert to safetensors, whose names are "
            "not paths, or rename the tensor)"
        )
    if array.dtype == np.dtype(object):
        if any(s.endswith("\x00") for s in array.flat):
            raise ConversionError(
                f"string tensor {key!r} holds a string ending in NUL, which .npz (numpy unicode arrays) "
                "cannot keep; convert to an ORT checkpoint instead"
            )
        layout.dtypes[key] = "string"
        return array.astype(str) if array.size else np.zeros(array.shape, "<U1")
    name = array.dtype.name
    if _dtypes.is_ml_dtype(_dtypes.from_name(name)):
        layout.dtypes[key] = name
        return array.view(_RAW_VIEWS[array.dtype.itemsize])
    return array


def write(state: CheckpointState, path: str, *, include_optimizer_state: bool, show_progress: bool) -> None:
    items, layout = tensors_of(state, include_optimizer_state)
    with atomic_file(path) as out, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, provider in progress(
            items, enabled=show_progress, desc="writing", total=len(items), unit="tensor"
        ):
            array = _storable(key, array_of(state, provider), layout)
            with zf.open(key + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
        with zf.open(NPZ_KEY + ".npy", "w") as member:
            np.lib.format.write_array(member, np.frombuffer(encode(layout).encode(), np.uint8))


def _array(
    descr: str, shape: list[int], fortran: bool, buffer: object, offset: int, key: str, path: str
) -> np.ndarray[Any, Any]:
    """A read-only view of a member's data (the core checked its dtype, shape and length)."""
    dtype = np.dtype(descr)
    count = math.prod(shape)
    if count == 0:
        return empty_array(tuple(shape), dtype, key, path)
    flat = np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)  # type: ignore[call-overload]
    # read-only views of the archive's private bytes or of a bytes: memory that cannot change,
    # which a state keeps without copying
    flat.flags.writeable = False
    array: np.ndarray[Any, Any] = flat.reshape(shape, order="F" if fortran else "C")
    return array


def _restore(key: str, array: np.ndarray[Any, Any], layout: Layout | None, path: str) -> np.ndarray[Any, Any]:
    kind = None if layout is None else layout.dtypes.get(key)
    if kind is None:
        if array.dtype.kind == "U":
            raise ConversionError(
                f"{path}: tensor {key!r} is a unicode array that the archive's layout does not mark as "
                "a string tensor"
            )
        return array
    if kind == "string":
        if array.dtype.kind != "U":
            raise ConversionError(f"{path}: tensor {key!r} should be a unicode array, got {array.dtype}")
        return array.astype(object)
    from ._safetensors import numpy_dtype

    dtype = numpy_dtype(kind)
    if dtype is None or not _dtypes.is_ml_dtype(_dtypes.from_name(dtype.name)):
        raise ConversionError(f"{path}: tensor {key!r} has unknown stored dtype {kind!r}")
    if array.dtype.kind != "u" or array.dtype.itemsize != dtype.itemsize:
        raise ConversionError(f"{path}: tensor {key!r} ({kind}) should be stored as uint{8 * dtype.itemsize}")
    return array.view(dtype)


def read(
    path: str,
    *,
    trainable: object,
    show_progress: bool,
    max_decompressed_bytes: int | None = None,
    max_bytes: int | None = None,
) -> CheckpointState:
    """The state in the archive at ``path``; ``SourceTooLargeError`` past ``max_bytes`` (the
    opened file's size, before a byte is read)."""
    _file, members = _native.read_npz(path, max_decompressed_bytes, max_bytes)
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    layout: Layout | None = None
    for key, descr, shape, fortran, buffer, offset in progress(
        members, enabled=show_progress, desc="reading", total=len(members), unit="tensor"
    ):
        array = _array(descr, shape, fortran, buffer, offset, key, path)
        if key != NPZ_KEY:
            arrays[key] = array
        elif array.dtype != np.uint8 or array.ndim != 1:
            raise ConversionError(f"{path}: the ortckpt layout member is not a 1-D uint8 array")
        else:
            try:
                layout = decode(array.tobytes().decode("utf-8"), path)
            except UnicodeDecodeError:
                raise ConversionError(f"{path}: the ortckpt layout is not UTF-8") from None
    arrays = {key: _restore(key, array, layout, path) for key, array in arrays.items()}
    return build_state(path, arrays, layout, trainable)
