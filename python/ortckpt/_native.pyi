# Type stub for the private native module ``ortckpt._native`` (rust/python).
# Contract: docs/architecture.md, "The native module contract".

import os
from typing import TypedDict

from typing_extensions import Buffer, TypeAlias

# str, bytes (any file name bytes) or os.PathLike; passed to the OS through os.fsencode
PathArg: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]

# (name, data_type, dims, offset, nbytes, strings, external_offset)
TensorInfo: TypeAlias = tuple[str, int, list[int], int, int, list[str] | None, int | None]
PropertyValue: TypeAlias = int | float | str
# (name, data_type, dims, data): data is a byte buffer, a list of str for STRING tensors, or None for
# the tensors of a nominal checkpoint (no values)
TensorSpec: TypeAlias = tuple[str, int, list[int], Buffer | list[str] | None]

class OptimizerGroupInfo(TypedDict):
    name: str
    step: int
    initial_learning_rate: float
    states: list[tuple[str, list[TensorInfo]]]

class CheckpointIndex(TypedDict):
    version: int
    is_nominal: bool
    has_external_data: bool
    trainable: list[TensorInfo]
    frozen: list[TensorInfo]
    optimizer_groups: list[OptimizerGroupInfo]
    properties: list[tuple[str, PropertyValue]]

class OptimizerGroupSpec(TypedDict):
    name: str
    step: int
    initial_learning_rate: float
    states: list[tuple[str, list[TensorSpec]]]

class CheckpointSpec(TypedDict):
    is_nominal: bool
    trainable: list[TensorSpec]
    frozen: list[TensorSpec]
    optimizer_groups: list[OptimizerGroupSpec]
    properties: list[tuple[str, PropertyValue]]

class MappedFile:
    """A regular file's bytes, memory-mapped (or read into memory by ``open_checkpoint(...,
    mmap=False)``); exports a read-only 1-D byte buffer."""

    def __init__(self, path: PathArg) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def mapped(self) -> bool: ...
    def check_unchanged(self) -> None: ...
    def advise_normal(self, offset: int, length: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def index_checkpoint(
    data: Buffer, source: str, external: Buffer | None = None, external_source: str | None = None
) -> CheckpointIndex: ...
def serialize_checkpoint(spec: CheckpointSpec) -> bytes: ...
def write_checkpoint(
    path: PathArg, spec: CheckpointSpec, external_data_threshold: int | None = None
) -> int | None: ...
def open_checkpoint(path: PathArg, mmap: bool = True) -> tuple[MappedFile, MappedFile | None]: ...
def recover(path: PathArg) -> str: ...
def helper_files(path: PathArg) -> list[str]: ...
def external_data_path(path: PathArg) -> str: ...

WRITTEN_VERSION: int
DATA_ALIGNMENT: int
SUPPORTED_VERSIONS: list[int]
DEFAULT_EXTERNAL_DATA_THRESHOLD: int
EXTERNAL_ALIGNMENT: int
MIN_EXTERNAL_BYTES: int
CRASH_STEPS: list[str]

class CheckpointError(ValueError): ...
class InvalidCheckpointError(CheckpointError): ...
class UnsupportedVersionError(CheckpointError): ...
class TensorDataError(CheckpointError): ...
class DuplicateNameError(CheckpointError): ...
class ExternalDataError(CheckpointError): ...
class InterruptedSaveError(CheckpointError): ...
class CheckpointChangedError(CheckpointError): ...
