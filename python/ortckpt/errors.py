"""Exceptions raised by ortckpt (defined by the native module, re-exported here).

::

    CheckpointError(ValueError)
    ├── InvalidCheckpointError      not a checkpoint / corrupt flatbuffer / broken structure
    ├── UnsupportedVersionError     version newer than we understand
    ├── TensorDataError             dtype, dims, data length, string tensor inconsistencies
    ├── DuplicateNameError          two parameters (or properties, groups, momentums) with one name
    └── ExternalDataError           external data file missing, short, out of range

Operating-system failures (missing file, permissions) stay ``OSError`` subclasses.
"""

from __future__ import annotations

from ._native import (
    CheckpointError,
    DuplicateNameError,
    ExternalDataError,
    InvalidCheckpointError,
    TensorDataError,
    UnsupportedVersionError,
)

__all__ = [
    "CheckpointError",
    "DuplicateNameError",
    "ExternalDataError",
    "InvalidCheckpointError",
    "TensorDataError",
    "UnsupportedVersionError",
]
