"""Loading and saving checkpoints: ``load``, ``load_bytes``, ``save``, ``serialize``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Union

from . import _native
from ._index import ExternalOpener, state_from_index
from ._spec import build_spec
from .errors import ExternalDataError
from .state import CheckpointState

if TYPE_CHECKING:
    from typing_extensions import Buffer

    StrPath = Union[str, os.PathLike[str]]

__all__ = ["external_data_path", "load", "load_bytes", "save", "serialize"]

BYTES_SOURCE = "<bytes>"


def _fspath(path: StrPath) -> str:
    return os.fsdecode(os.fspath(path))


def external_data_path(path: StrPath) -> str:
    """Where ORT keeps a checkpoint's external tensor data: ``<checkpoint path>.data``."""
    return _fspath(path) + ".data"


def _read(path: str, mmap: bool) -> Buffer:
    if mmap:
        return _native.MappedFile(path)
    with open(path, "rb") as f:
        return f.read()


def load(path: StrPath, *, mmap: bool = True) -> CheckpointState:
    """Load a checkpoint file.

    With ``mmap=True`` (the default) the file is memory-mapped: nothing beyond the flatbuffer
    structure is touched until a tensor's ``.data`` is used, and aligned tensors are zero-copy
    read-only views of the mapping. With ``mmap=False`` the file is read into memory first.

    Raises ``FileNotFoundError``/``OSError`` for I/O failures and ``CheckpointError`` subclasses
    for malformed checkpoints.
    """
    name = _fspath(path)
    data = _read(name, mmap)
    index = _native.index_checkpoint(data, name)

    def open_external() -> Buffer:
        ext = external_data_path(name)
        try:
            return _read(ext, mmap)
        except FileNotFoundError:
            raise ExternalDataError(f"{name}: external data file {ext!r} is missing") from None

    return state_from_index(index, data, name, open_external)


def _as_readonly_buffer(data: Buffer) -> Buffer:
    if isinstance(data, bytes):
        return data
    view = memoryview(data)
    if view.readonly and view.c_contiguous:
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    # a writable buffer could change under the state: take a private copy
    return view.tobytes()


def load_bytes(data: Buffer, *, external_data: Buffer | None = None) -> CheckpointState:
    """Load a checkpoint from its bytes.

    ``bytes`` and read-only buffers (``memoryview``, ...) are used zero-copy; writable buffers such
    as ``bytearray`` are copied first so later changes cannot alter the state. ``external_data`` is
    the content of the external data file, for checkpoints that have one.
    """
    buffer = _as_readonly_buffer(data)
    index = _native.index_checkpoint(buffer, BYTES_SOURCE)
    opener: ExternalOpener | None = None
    if external_data is not None:
        ext = _as_readonly_buffer(external_data)

        def opener() -> Buffer:
            return ext

    return state_from_index(index, buffer, BYTES_SOURCE, opener)


def save(state: CheckpointState, path: StrPath, *, include_optimizer_state: bool = True) -> None:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename).

    Saving over the file a state was loaded from is safe: the old mapping stays valid. Tensors,
    optimizer states and properties are written sorted by name, all tensor data inline (no external
    data file), in the format version ORT 1.19.2 writes.
    """
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    spec = build_spec(state, include_optimizer_state)
    _native.write_checkpoint(_fspath(path), spec)


def serialize(state: CheckpointState, *, include_optimizer_state: bool = True) -> bytes:
    """The bytes ``save`` would write."""
    if not isinstance(state, CheckpointState):
        raise TypeError(f"expected a CheckpointState, got {type(state).__name__}")
    return _native.serialize_checkpoint(build_spec(state, include_optimizer_state))
