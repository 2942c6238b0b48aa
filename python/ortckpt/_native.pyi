# Type stub for the private native module ``ortckpt._native`` (rust/python).
# Contract: docs/architecture.md, "The native module contract".

from typing import TypeAlias, TypedDict

from typing_extensions import Buffer

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
    """Read-only memory map of a whole file; exports a read-only 1-D byte buffer."""

    def __init__(self, path: str) -> None: ...
    @property
    def path(self) -> str: ...
    def advise_normal(self, offset: int, length: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def index_checkpoint(
    data: Buffer, source: str, external: Buffer | None = None, external_source: str | None = None
) -> CheckpointIndex: ...
def serialize_checkpoint(spec: CheckpointSpec) -> bytes: ...
def write_checkpoint(
    path: str, spec: CheckpointSpec, external_data_threshold: int | None = None
) -> int | None: ...
def external_data_path(path: str) -> str: ...

WRITTEN_VERSION: int
DATA_ALIGNMENT: int
SUPPORTED_VERSIONS: list[int]
DEFAULT_EXTERNAL_DATA_THRESHOLD: int
EXTERNAL_ALIGNMENT: int
MIN_EXTERNAL_BYTES: int

class CheckpointError(ValueError): ...
class InvalidCheckpointError(CheckpointError): ...
class UnsupportedVersionError(CheckpointError): ...
class TensorDataError(CheckpointError): ...
class DuplicateNameError(CheckpointError): ...
class ExternalDataError(CheckpointError): ...
