"""ONNX external data (``data_location = EXTERNAL``): locating a tensor's bytes in a file.

Locations are opened by the core inside a base directory (the model's directory) held open: they
must stay inside it (absolute locations, ``..`` escapes and symlinks leading out are refused, in
the same step as the open). Offsets and lengths are checked against the file's real size. Files
are memory-mapped, once each, so a tensor's bytes are read only when they are used, and never the
whole file.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from .. import _dtypes, _native
from .._paths import StrPath, path_str
from .._tensor import MappedTensor
from ..errors import ExternalDataError, TensorDataError

if TYPE_CHECKING:
    import onnx


class ExternalFiles:
    """Opens and memory-maps the external data files of a set of TensorProtos, inside a base
    directory (the model's) held open for the whole operation.

    Every location is opened by the core relative to that directory (``_native.ExternalDataDir``:
    ``openat2`` with ``RESOLVE_BENEATH``, or a walk with ``O_NOFOLLOW`` at every component), so
    checking that it stays inside and opening it are one step: absolute locations, ``..`` escapes
    and symlinks leading out are refused, even when a directory is swapped for a symlink while
    the model is read. Each file is mapped once and shared by the tensors that live in it.
    """

    def __init__(self, base_dir: StrPath | None) -> None:
        self._base = None if base_dir is None else path_str(base_dir)
        self._dir: _native.ExternalDataDir | None = None
        self._maps: dict[str, _native.MappedFile] = {}

    def open(self, name: str, location: str) -> tuple[str, _native.MappedFile]:
        """(the file's path, for messages; its mapping) for tensor ``name``'s ``location``."""
        if self._base is None:
            raise ExternalDataError(
                f"tensor {name!r}: its data is in the external file {location!r}, but no base directory "
                "was given to resolve it against (pass base_dir=, the directory of the model)"
            )
        path = os.path.join(self._base, location)
        mapped = self._maps.get(location)
        if mapped is None:
            try:
                if self._dir is None:
                    self._dir = _native.ExternalDataDir(self._base)
                mapped = self._dir.map(location)
            except ExternalDataError as exc:
                raise ExternalDataError(f"tensor {name!r}: {exc}") from None
            except FileNotFoundError:
                raise ExternalDataError(
                    f"tensor {name!r}: external data file {path!r} (location {location!r}) is missing"
                ) from None
            self._maps[location] = mapped
        return path, mapped


def _external_fields(proto: onnx.TensorProto, name: str) -> tuple[str, int, int | None]:
    location = ""
    offset = 0
    length: int | None = None
    for entry in proto.external_data:
        key, value = entry.key, entry.value
        if not isinstance(key, str):  # protobuf gives proto2 strings that are not UTF-8 as bytes
            continue  # an unknown key, as ONNX and ORT ignore unknown keys
        if not isinstance(value, str):
            raise ExternalDataError(f"tensor {name!r}: its external data {key} {value!r} is not UTF-8 text")
        if key == "location":
            location = value
        elif key in ("offset", "length"):
            try:
                number = int(value, 10)
            except ValueError:
                raise ExternalDataError(
                    f"tensor {name!r}: external data {key} {value!r} is not an integer"
                ) from None
            if number < 0:
                raise ExternalDataError(f"tensor {name!r}: external data {key} {number} is negative")
            if key == "offset":
                offset = number
            else:
                length = number
        # "checksum" and unknown keys are ignored, as ONNX and ORT do
    return location, offset, length


def external_tensor(
    proto: onnx.TensorProto, name: str, data_type: int, shape: tuple[int, ...], files: ExternalFiles
) -> MappedTensor:
    """The tensor whose bytes ``proto``'s external data points at, mapped from ``files``."""
    if data_type == _dtypes.STRING:
        raise TensorDataError(f"string tensor {name!r}: string data cannot be stored externally")
    location, offset, length = _external_fields(proto, name)
    path, mapped = files.open(name, location)
    size = len(mapped)
    expected = math.prod(shape) * _dtypes.element_size(data_type)
    if offset > size:
        raise ExternalDataError(
            f"tensor {name!r}: external data offset {offset} is past the end of {path!r} ({size} bytes)"
        )
    if length is None:
        length = size - offset  # ONNX: no length means "to the end of the file"
    if length != expected:
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} shape {list(shape)} needs {expected} bytes, "
            f"its external data in {path!r} is {length} bytes long"
        )
    if offset + length > size:
        raise ExternalDataError(
            f"tensor {name!r}: external data needs bytes {offset}..{offset + length} of {path!r}, "
            f"which has {size} bytes"
        )
    return MappedTensor.checked(mapped, offset, length, data_type, shape, name)
