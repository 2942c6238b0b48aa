"""Checkpoints <-> ``.npz`` archives (numpy only).

Every tensor is one ``<key>.npy`` member, written uncompressed one at a time (as ``numpy.savez``
does); bfloat16/float8 tensors are stored as raw unsigned views and string tensors as numpy unicode
arrays, both recorded in the layout member ``__ortckpt__.npy`` (a uint8 array of JSON). Reading
memory-maps every uncompressed member in place (compressed ones are read into memory) and never
unpickles: object arrays in an archive are refused.
"""

from __future__ import annotations

import struct
import zipfile
from typing import Any

import numpy as np

from ._atomic import atomic_file
from ._layout import NPZ_KEY, ConversionError, Layout, array_of, build_state, decode, encode, tensors_of
from ._progress import progress
from .state import CheckpointState

_RAW_VIEWS = {1: np.uint8, 2: np.uint16}
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature ... file name length, extra field length


def _storable(key: str, array: np.ndarray[Any, Any], layout: Layout) -> np.ndarray[Any, Any]:
    if "\x00" in key:
        raise ConversionError(
            f"tensor {key!r}: .npz member names cannot hold NUL characters; convert to safetensors instead"
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
    if name == "bfloat16" or name.startswith("float8"):
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


def _member(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray[Any, Any]:
    """One member's array: memory-mapped in place when stored uncompressed, else read."""
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if info.compress_type != zipfile.ZIP_STORED or version not in ((1, 0), (2, 0)):
                f.seek(0)
                array: np.ndarray[Any, Any] = np.lib.format.read_array(f, allow_pickle=False)
                return array
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(f)
            header_len = f.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ConversionError(f"{path}: member {info.filename!r} is not a valid .npy array: {exc}") from None
    if dtype.hasobject:
        raise ConversionError(
            f"{path}: member {info.filename!r} holds Python objects (refused: it would need unpickling)"
        )
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if header_len + count * dtype.itemsize != info.file_size:
        raise ConversionError(f"{path}: member {info.filename!r} is truncated or has trailing bytes")
    if count == 0:
        return np.zeros(shape, dtype)
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        signature, name_len, extra_len = _LOCAL_HEADER.unpack(raw.read(_LOCAL_HEADER.size))
    if signature != b"PK\x03\x04":
        raise ConversionError(f"{path}: member {info.filename!r} has a corrupt local header")
    offset = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + header_len
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def _restore(key: str, array: np.ndarray[Any, Any], layout: Layout | None, path: str) -> np.ndarray[Any, Any]:
    kind = None if layout is None else layout.dtypes.get(key)
    if kind is None:
        return array
    if kind == "string":
        if array.dtype.kind != "U":
            raise ConversionError(f"{path}: tensor {key!r} should be a unicode array, got {array.dtype}")
        return array.astype(object)
    from ._safetensors import _numpy_dtype

    try:
        dtype = _numpy_dtype(kind)
    except (AttributeError, TypeError):
        raise ConversionError(f"{path}: tensor {key!r} has unknown dtype {kind!r}") from None
    if array.dtype.kind != "u" or array.dtype.itemsize != dtype.itemsize:
        raise ConversionError(f"{path}: tensor {key!r} ({kind}) should be stored as uint{8 * dtype.itemsize}")
    return array.view(dtype)


def read(path: str, *, trainable: object, show_progress: bool) -> CheckpointState:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ConversionError(f"{path}: not a .npz archive: {exc}") from None
    with zf:
        arrays: dict[str, np.ndarray[Any, Any]] = {}
        layout: Layout | None = None
        infos = zf.infolist()
        for info in progress(infos, enabled=show_progress, desc="reading", total=len(infos), unit="tensor"):
            if not info.filename.endswith(".npy"):
                raise ConversionError(f"{path}: member {info.filename!r} is not a .npy array")
            key = info.filename[: -len(".npy")]
            if key in arrays or (key == NPZ_KEY and layout is not None):
                raise ConversionError(f"{path}: member {info.filename!r} appears twice")
            array = _member(path, zf, info)
            if key == NPZ_KEY:
                try:
                    layout = decode(np.asarray(array, np.uint8).tobytes().decode("utf-8"), path)
                except UnicodeDecodeError:
                    raise ConversionError(f"{path}: the ortckpt layout is not UTF-8") from None
            else:
                arrays[key] = array
    arrays = {key: _restore(key, array, layout, path) for key, array in arrays.items()}
    return build_state(path, arrays, layout, trainable)
