"""Every exception ortckpt raises (the checkpoint errors are defined by the native module and
re-exported here; the two that carry Python state are defined here).

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
    ├── ConversionError             a safetensors/npz file is malformed, or a checkpoint cannot be
    │                               converted without losing data the caller did not agree to lose
    ├── ModelError                  an ONNX model given to ortckpt cannot be used as it is (not an
    │                               ONNX model; an exported output whose type it does not declare)
    └── AggregationError            a round gave no result (``.report`` says why)
    CompatError(RuntimeError)       ortckpt.compat's failures, raised as ORT raises RuntimeError

Operating-system failures (missing file, permissions, a path that is not a regular file) stay
``OSError`` subclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._native import (
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

if TYPE_CHECKING:
    from .aggregate import AggregationReport

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
    "SourceTooLargeError",
    "TensorDataError",
    "UnsupportedVersionError",
]


class AggregationError(CheckpointError):
    """A round gave no result (no upload accepted, fewer than the method needs, an aggregate
    that overflows): nothing was written. ``report`` tells why each upload was rejected."""

    report: AggregationReport


class ModelError(CheckpointError):
    """An ONNX model given to ortckpt cannot be used as it is: its bytes are not an ONNX model,
    or it does not declare what an operation needs from it (the type of an exported output).
    ortckpt never runs onnx's C++ routines (shape inference, checker) on the models it is
    given, so what they would have inferred must be declared."""


class CompatError(RuntimeError):
    """What ORT raises as ``RuntimeError``: a checkpoint that cannot be loaded or saved, or values
    that do not fit a parameter (``ortckpt.compat``). ``__cause__`` holds the ortckpt or OS error,
    when there is one."""
