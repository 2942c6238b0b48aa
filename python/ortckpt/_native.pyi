# Type stub for the private native module ``ortckpt._native`` (rust/python).
# Contract: docs/architecture.md, "The native module contract".

from collections.abc import Sequence
from typing import TypedDict

from typing_extensions import Buffer, TypeAlias

# (name, data_type, dims, offset, nbytes, strings, external_offset)
TensorInfo: TypeAlias = tuple[str, int, list[int], int, int, list[str] | None, int | None]
PropertyValue: TypeAlias = int | float | str
# (name, data_type, dims, data[, doc_string]): data is a byte buffer, a list of str for STRING
# tensors, or None for the tensors of a nominal checkpoint (no values); doc_string (str or None) is
# written to the Tensor's doc_string field
SpecData: TypeAlias = Buffer | list[str] | None
TensorSpec: TypeAlias = (
    tuple[str, int, Sequence[int], SpecData] | tuple[str, int, Sequence[int], SpecData, str | None]
)

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

class _CheckpointSpecBase(TypedDict):
    is_nominal: bool
    trainable: list[TensorSpec]
    frozen: list[TensorSpec]
    optimizer_groups: list[OptimizerGroupSpec]
    properties: list[tuple[str, PropertyValue]]

class CheckpointSpec(_CheckpointSpecBase, total=False):
    version: int  # 1 (ORT 1.16-1.17) or 2 (the default, ORT >= 1.18); others are refused

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
def save_checkpoint(
    path: str,
    spec: CheckpointSpec,
    external_data_threshold: int | None = None,
    external_momentums: bool = False,
) -> None: ...
def external_data_path(path: str) -> str: ...

WRITTEN_VERSION: int
DEFAULT_EXTERNAL_DATA_THRESHOLD: int

class CheckpointError(ValueError): ...
class InvalidCheckpointError(CheckpointError): ...
class UnsupportedVersionError(CheckpointError): ...
class TensorDataError(CheckpointError): ...
class DuplicateNameError(CheckpointError): ...
class ExternalDataError(CheckpointError): ...
