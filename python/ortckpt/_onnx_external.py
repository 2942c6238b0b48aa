"""ONNX external data (``data_location = EXTERNAL``): locating a tensor's bytes in a file.

Locations are resolved relative to a base directory (the model's directory) and must stay inside it:
absolute locations, ``..`` escapes and symlinks leading out are refused. Offsets and lengths are
checked against the file's real size. Files are memory-mapped, once each, so a tensor's bytes are
read only when the checkpoint is written, and never the whole file.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from . import _dtypes, _native
from ._paths import StrPath, path_str
from ._tensor import MappedTensor
from .errors import ExternalDataError, TensorDataError

if TYPE_CHECKING:
    import onnx


class ExternalFiles:
    """Resolves, confines and memory-maps the external data files of a set of TensorProtos.

    Each file is mapped once (``_native.MappedFile``) and shared by the tensors that live in it.
    """

    def __init__(self, base_dir: StrPath | None) -> None:
        self._base = None if base_dir is None else path_str(base_dir)
        self._real_base: str | None = None
        self._maps: dict[str, _native.MappedFile] = {}

    def _resolve(self, name: str, location: str) -> str:
        if self._base is None:
            raise ExternalDataError(
                f"tensor {name!r}: its data is in the external file {location!r}, but no base directory "
                "was given to resolve it against (pass base_dir=, the directory of the model)"
            )
        if not location:
            raise ExternalDataError(f"tensor {name!r}: external data without a 'location'")
        if "\x00" in location:
            raise ExternalDataError(f"tensor {name!r}: external data location {location!r} contains NUL")
        if os.path.isabs(location) or os.path.splitdrive(location)[0] or location.startswith(("/", "\\")):
            raise ExternalDataError(
                f"tensor {name!r}: external data location {location!r} is an absolute path; ONNX "
                "external data must be relative to the model's directory"
            )
        if self._real_base is None:
            self._real_base = os.path.realpath(self._base)
        real_base = self._real_base
        real = os.path.realpath(os.path.join(real_base, location))
        if real == real_base or os.path.commonpath([real, real_base]) != real_base:
            raise ExternalDataError(
                f"tensor {name!r}: external data location {location!r} resolves to {real!r}, which is "
                f"not a file inside the model's directory {real_base!r} (no '..' escapes or symlinks "
                "leading out)"
            )
        return real

    def open(self, name: str, location: str) -> tuple[str, _native.MappedFile]:
        real = self._resolve(name, location)
        mapped = self._maps.get(real)
        if mapped is None:
            try:
                # looked up on _native at call time, so a patched MappedFile takes effect
                mapped = _native.MappedFile(real)
            except FileNotFoundError:
                raise ExternalDataError(
                    f"tensor {name!r}: external data file {real!r} (location {location!r}) is missing"
                ) from None
            self._maps[real] = mapped
        return real, mapped


def _external_fields(proto: onnx.TensorProto, name: str) -> tuple[str, int, int | None]:
    location = ""
    offset = 0
    length: int | None = None
    for entry in proto.external_data:
        key, value = entry.key, entry.value
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
