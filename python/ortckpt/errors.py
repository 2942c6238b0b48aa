"""Every exception ortckpt raises (the checkpoint errors are defined by the native module and
re-exported here; the two that carry Python state, and the server state's, are defined here).

::

    CheckpointError(ValueError)
    ├── InvalidCheckpointError      not a checkpoint / corrupt flatbuffer / broken structure
    ├── UnsupportedVersionError     version newer than we understand
    ├── TensorDataError             dtype, dims, data length, string tensor inconsistencies
    ├── DuplicateNameError          two parameters (or properties, groups, momentums) with one name
    ├── ExternalDataError           external data file missing, short, out of range
    ├── InterruptedSaveError        a crashed save left the files mixed: run ortckpt.recover(path)
    ├── CheckpointChangedError      a memory-mapped checkpoint was rewritten in place since load
    ├── SourceTooLargeError         an input is larger than the max_bytes it was read with
    ├── RemoteSourceError           a URL cannot be read by range: its server ignores Range,
    │                               sends more or fewer bytes than asked, or fails
    ├── ConversionError             a safetensors/npz file is malformed, or a checkpoint cannot be
    │                               converted without losing data the caller did not agree to lose
    ├── ModelError                  an ONNX model given to ortckpt cannot be used as it is (not an
    │                               ONNX model; an exported output whose type it does not declare)
    ├── AggregationError            a round gave no aggregate: no upload accepted, fewer than the
    │                               method needs, or not finite (``.report`` says why)
    └── ServerStateError            a global checkpoint's server state (optimizer moments, clipping
                                    norm, privacy ledger) is malformed or does not match its model
    CompatError(RuntimeError)       ortckpt.compat's failures, raised as ORT raises RuntimeError

Operating-system failures (missing file, permissions, a path that is not a regular file) stay
``OSError`` subclasses.
"""

from __future__ import annotations

from ._native import (
    AggregationError,
    CheckpointChangedError,
    CheckpointError,
    ConversionError,
    DuplicateNameError,
    ExternalDataError,
    InterruptedSaveError,
    InvalidCheckpointError,
    SourceTooLargeError,
    TensorDataError,
    UnsupportedVersionError,
)


class RemoteSourceError(CheckpointError):
    """A checkpoint at a URL cannot be read lazily, by byte ranges (``ortckpt.load(url)``): its
    server ignores ``Range`` (a whole object where a range was asked for), sends fewer or more
    bytes than asked, or a request failed. ``load(url, mmap=False)`` reads the object whole
    instead. An object replaced between requests is a ``CheckpointChangedError``."""


class ServerStateError(CheckpointError):
    """The server state a global checkpoint carries (group ``ortckpt.server``, properties
    ``ortckpt.server.*``; docs/federated.md) is malformed or does not match the checkpoint's model."""


__all__ = [
    "AggregationError",
    "CheckpointChangedError",
    "CheckpointError",
    "CompatError",
    "ConversionError",
    "DuplicateNameError",
    "ExternalDataError",
    "InterruptedSaveError",
    "InvalidCheckpointError",
    "ModelError",
    "RemoteSourceError",
    "ServerStateError",
    "SourceTooLargeError",
    "TensorDataError",
    "UnsupportedVersionError",
]


class ModelError(ConversionError):
    """An ONNX model given to ortckpt cannot be used as it is: its bytes are not an ONNX model,
    or it does not declare what an operation needs from it (the type of an exported output).
    ortckpt never runs onnx's C++ routines (shape inference, checker) on the models it is
    given, so what they would have inferred must be declared."""


class CompatError(RuntimeError):
    """What ORT raises as ``RuntimeError``: a checkpoint that cannot be loaded or saved, or values
    that do not fit a parameter (``ortckpt.compat``). ``__cause__`` holds the ortckpt or OS error,
    when there is one."""
