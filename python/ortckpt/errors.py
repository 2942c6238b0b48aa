"""Exceptions raised by ortckpt (defined by the native module, re-exported here).

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
    └── ConversionError             a safetensors/npz file is malformed, or a checkpoint cannot be
                                    converted without losing data the caller did not agree to lose

Operating-system failures (missing file, permissions, a path that is not a regular file) stay
``OSError`` subclasses.
"""

from __future__ import annotations

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

__all__ = [
    "CheckpointChangedError",
    "CheckpointError",
    "ConversionError",
    "DuplicateNameError",
    "ExternalDataError",
    "InterruptedSaveError",
    "InvalidCheckpointError",
    "SourceTooLargeError",
    "TensorDataError",
    "UnsupportedVersionError",
]
