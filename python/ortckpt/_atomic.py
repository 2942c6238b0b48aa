"""Atomic replacement of an output file written from Python (npz, safetensors, ONNX models).

The file rules live in the core (``AtomicOutput``): a temporary file created with ``O_EXCL`` under
an unpredictable name beside the destination, new files ``0666 & ~umask``, a replaced file's
permission bits kept, destinations that are FIFOs, devices, sockets or directories refused, and
symlinks others planted never followed (docs/guarantees.md). Readers see the old file or the whole
new one, never a part.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from . import _native

if TYPE_CHECKING:
    from ._native import PathArg


@contextlib.contextmanager
def atomic_file(path: PathArg) -> Iterator[BinaryIO]:
    """A binary file object on a new temporary file beside ``path`` (readable, writable,
    seekable); it replaces ``path`` when the block ends without error and is removed otherwise."""
    out = _native.AtomicOutput(path)
    try:
        with os.fdopen(os.dup(out.fileno()), "r+b") as f:
            yield f
        out.commit()
    finally:
        out.discard()


@contextlib.contextmanager
def atomic_path(path: PathArg, companions: Sequence[str] = ()) -> Iterator[str]:
    """For writers that take only a path and create the file themselves (``onnx.save_model``): a
    path inside a private (0700) staging directory beside ``path``, where nobody else can plant a
    name; the file written there replaces ``path`` (permission rule applied) when the block ends
    without error, and is removed otherwise.

    ``companions``: suffixes of files the writer may also write beside it (``".data"``: ONNX
    external data, at the yielded path + suffix). Nothing is replaced until the block ends; then
    each companion written replaces ``path + suffix`` first and the main file last, so a reader of
    the new model finds its data. (The renames are separate: a crash between them leaves the new
    companion beside the previous main file.)"""
    out = _native.StagedOutput(path, list(companions))
    try:
        yield out.writer_path()
        out.commit()
    finally:
        out.discard()
