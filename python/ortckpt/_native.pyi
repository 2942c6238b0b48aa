# Type stub for the private native module ``ortckpt._native`` (rust/python).
# Contract: docs/architecture.md, "The native module contract".

import os
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Literal, TypeAlias, TypedDict, final

import numpy as np
from numpy.typing import NDArray
from typing_extensions import Buffer

__all__ = [
    "CRASH_STEPS",
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "NETWORK_UP_TO",
    "NPZ_BUDGET_RATIO",
    "NPZ_MIN_BUDGET",
    "SAFETENSORS_DTYPES",
    "SAFETENSORS_MAX_HEADER_BYTES",
    "SUPPORTED_VERSIONS",
    "WRITABLE_VERSIONS",
    "WRITTEN_VERSION",
    "AggregationLayout",
    "AtomicOutput",
    "CheckpointChangedError",
    "CheckpointError",
    "ConversionError",
    "DuplicateNameError",
    "ExternalDataDir",
    "ExternalDataError",
    "Index",
    "InterruptedSaveError",
    "InvalidCheckpointError",
    "LaneReader",
    "MappedFile",
    "SourceTooLargeError",
    "StagedOutput",
    "TensorDataError",
    "TensorRecord",
    "UnsupportedVersionError",
    "Upload",
    "UploadBytes",
    "accumulate",
    "add_files",
    "add_pairwise",
    "check_files",
    "check_upload",
    "external_data_location",
    "external_data_path",
    "index_checkpoint",
    "is_unchanging",
    "load_checkpoint",
    "npz_member_problem",
    "read_adapter",
    "read_adapter_bytes",
    "read_legacy_folder",
    "read_npz",
    "read_rows",
    "read_safetensors",
    "recover",
    "reduce_block",
    "reduce_columns",
    "reduce_slots",
    "release_buffers",
    "save_checkpoint",
    "serialize_adapter",
    "serialize_checkpoint",
    "tensor_proto_values",
    "weight_problem",
]

# str, bytes (any file name bytes) or os.PathLike; passed to the OS through os.fsencode
PathArg: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]

PropertyValue: TypeAlias = int | float | str
# (name, data_type, dims, data[, doc_string]): data is a byte buffer, a list of str for STRING
# tensors, or None for the tensors of a nominal checkpoint (no values); doc_string (str or None) is
# written to the Tensor's doc_string field
SpecData: TypeAlias = Buffer | list[str] | None
TensorSpec: TypeAlias = (
    tuple[str, int, Sequence[int], SpecData] | tuple[str, int, Sequence[int], SpecData, str | None]
)

@final
class TensorRecord:
    """One tensor of an index, its storage kind decided by the core."""

    @property
    def position(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def doc_string(self) -> str: ...
    @property
    def data_type(self) -> int: ...
    @property
    def dims(self) -> tuple[int, ...]: ...
    @property
    def storage(self) -> Literal["inline", "external", "strings", "nominal"]: ...
    @property
    def offset(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def strings(self) -> list[str] | None: ...
    @property
    def trainable(self) -> bool | None: ...

@final
class Index:
    """A verified checkpoint: the core's index and the buffers its ranges point into."""

    @property
    def source(self) -> str: ...
    @property
    def buffer(self) -> Buffer: ...
    @property
    def external(self) -> Buffer | None: ...
    @property
    def version(self) -> int: ...
    @property
    def is_nominal(self) -> bool: ...
    @property
    def has_external_data(self) -> bool: ...
    def parameter_count(self) -> int: ...
    def parameter_names(self) -> list[str]: ...
    def is_trainable(self, name: str) -> bool | None: ...
    def parameter(self, name: str) -> TensorRecord | None: ...
    def tensor(self, position: int) -> TensorRecord: ...
    def prepare(self, position: int) -> None: ...
    def array(self, position: int, dtype: np.dtype[Any]) -> NDArray[Any] | None: ...
    def parameter_arrays(
        self, dtype_of: Callable[[int], np.dtype[Any]], skip: AbstractSet[str]
    ) -> tuple[dict[str, NDArray[Any] | None], list[str]]: ...
    def optimizer_groups(self) -> list[tuple[str, int, float, list[tuple[str, list[TensorRecord]]]]]: ...
    def properties(self) -> list[tuple[str, PropertyValue]]: ...

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

@final
class MappedFile:
    """A regular file's bytes, memory-mapped (or read into memory by ``load_checkpoint(...,
    mmap=False)``); exports a read-only 1-D byte buffer."""

    def __new__(cls, path: PathArg) -> MappedFile: ...
    @staticmethod
    def read(path: PathArg, max_bytes: int) -> MappedFile: ...
    @property
    def path(self) -> str: ...
    @property
    def mapped(self) -> bool: ...
    def prepare(self, offset: int, length: int) -> None: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class ExternalDataDir:
    """A model's directory held open; ``map(location)`` maps the regular file ``location`` names
    inside it (``openat2`` with ``RESOLVE_BENEATH``, or an ``O_NOFOLLOW`` walk): a location leading
    out, absolute, empty or naming a directory raises ExternalDataError."""

    def __new__(cls, path: PathArg) -> ExternalDataDir: ...
    def map(self, location: PathArg) -> MappedFile: ...

@final
class UploadBytes:
    """A read-only 1-D byte buffer over a file upload's private memory (no copy); keeps the upload
    alive."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class AtomicOutput:
    """One output file written under a temporary name beside its destination (created with
    O_EXCL under a random name); ``commit`` syncs it and renames it over the destination."""

    def __new__(cls, path: PathArg) -> AtomicOutput: ...
    def fileno(self) -> int: ...
    def commit(self) -> None: ...
    def discard(self) -> None: ...

@final
class StagedOutput:
    """One output file for a writer that takes only a path: it writes ``writer_path()`` inside a
    private (0700) staging directory beside the destination; ``commit`` applies the permission
    rule, syncs and renames it over the destination. ``companions``: suffixes of files named after
    the destination (``".data"``) the writer may also write, as ``writer_path() + suffix``; each
    one written is committed by the same rules, before the main file."""

    def __new__(cls, path: PathArg, companions: Sequence[str] = ...) -> StagedOutput: ...
    def writer_path(self) -> str: ...
    def commit(self) -> None: ...
    def discard(self) -> None: ...

def index_checkpoint(
    data: Buffer,
    source: str,
    external: Buffer | None = None,
    external_source: str | None = None,
) -> Index: ...
def load_checkpoint(path: PathArg, source: str, mmap: bool = True) -> Index: ...
def is_unchanging(data: object) -> bool: ...
def serialize_checkpoint(spec: CheckpointSpec) -> bytes: ...
def save_checkpoint(
    path: PathArg,
    spec: CheckpointSpec,
    external_data_threshold: int | None = None,
    external_momentums: bool = False,
) -> None: ...
def recover(path: PathArg) -> str: ...
def external_data_path(path: PathArg) -> str: ...
def external_data_location(path: PathArg) -> str: ...
def read_legacy_folder(path: PathArg) -> Index | None: ...
def tensor_proto_values(data: bytes, tensor: str) -> bytes: ...

# ORT adapter files: (format_version, adapter_version, model_version, the adapter as a lazy checkpoint
# index over the file's bytes: every parameter trainable, no properties)
AdapterContents: TypeAlias = tuple[int, int, int, Index]

def read_adapter(path: PathArg) -> AdapterContents: ...
def read_adapter_bytes(data: Buffer, source: str) -> AdapterContents: ...
def serialize_adapter(
    parameters: Sequence[tuple[str, int, Sequence[int], Buffer]], adapter_version: int, model_version: int
) -> bytes: ...

@final
class AggregationLayout:
    """The reference's structure for the aggregation kernel: parameters ``(name, trainable, data
    type, dims)`` and averaged momentums ``(group, parameter, momentum, data type, dims)``."""

    def __new__(
        cls,
        params: Sequence[tuple[str, bool, int, Sequence[int]]],
        momentums: Sequence[tuple[str, str, str, int, Sequence[int]]],
    ) -> AggregationLayout: ...
    def slot_lanes(self) -> list[int]: ...

@final
class Upload:
    """One upload, indexed, its bytes in private memory (or ``bytes``)."""

    @staticmethod
    def read(path: PathArg, max_bytes: int | None = None) -> Upload | tuple[str, str]: ...
    @staticmethod
    def from_bytes(data: bytes, source: str, external: bytes | None = None) -> Upload: ...
    @property
    def identity(self) -> tuple[int, int] | None: ...
    @property
    def checkpoint(self) -> bytes | UploadBytes: ...
    @property
    def external(self) -> bytes | UploadBytes | None: ...
    @property
    def is_nominal(self) -> bool: ...
    def locate(self, layout: AggregationLayout) -> list[tuple[int, int, bool, int]] | tuple[str, str]: ...
    def reader(self) -> LaneReader: ...

@final
class LaneReader:
    """An upload's values read again chunk by chunk (pread from its held files, or its bytes)."""

    def confirm_unchanged(self) -> None: ...
    def read(self, location: tuple[int, int, bool, int], first: int, count: int) -> NDArray[np.float64]: ...
    def read_into(
        self, location: tuple[int, int, bool, int], first: int, out: NDArray[np.float64]
    ) -> None: ...

def release_buffers() -> None: ...
def npz_member_problem(name: str) -> str | None: ...
def weight_problem(value: float) -> str | None: ...
def reduce_block(
    x: NDArray[np.float64], method: str, cut: int, squares: NDArray[np.float64], gaps: NDArray[np.float64]
) -> NDArray[np.float64]: ...
def reduce_slots(
    readers: Sequence[LaneReader],
    locations: Sequence[Sequence[tuple[int, int, bool, int]]],
    method: str,
    cut: int,
    outs: Sequence[NDArray[np.float64]],
    squares: NDArray[np.float64],
    gaps: NDArray[np.float64],
    chunk_bytes: int,
) -> None: ...
def add_pairwise(x: NDArray[np.float64], d: NDArray[np.float64]) -> None: ...
def read_rows(
    readers: Sequence[LaneReader],
    locations: Sequence[tuple[int, int, bool, int]],
    first: int,
    out: NDArray[np.float64],
) -> None: ...
def reduce_columns(x: NDArray[np.float64], method: str, cut: int = 0) -> NDArray[np.float64]: ...
def add_files(
    paths: Sequence[str | os.PathLike[str]],
    weights: Sequence[float | None],
    weight_property: str | None,
    layout: AggregationLayout,
    sums: Sequence[NDArray[np.float64]],
    bounds: NDArray[np.float64],
    max_bytes: int | None,
    seen: Sequence[tuple[int, int]],
) -> list[tuple[str, float, str, str, Exception | None, tuple[int, int] | None]]: ...
def check_files(
    paths: Sequence[str | os.PathLike[str]],
    weights: Sequence[float | None],
    weight_property: str | None,
    layout: AggregationLayout,
    bounds: NDArray[np.float64],
    max_bytes: int | None,
    seen: Sequence[tuple[int, int]],
) -> list[
    tuple[
        tuple[str, float, str, str, Exception | None, tuple[int, int] | None],
        tuple[LaneReader, list[tuple[int, int, bool, int]]] | None,
    ]
]: ...
def accumulate(
    upload: Upload,
    layout: AggregationLayout,
    sums: Sequence[NDArray[np.float64]],
    bounds: NDArray[np.float64],
    weight: float | None = None,
    weight_property: str | None = None,
) -> float | tuple[str, str]: ...
def check_upload(
    upload: Upload,
    layout: AggregationLayout,
    bounds: NDArray[np.float64],
    weight: float | None = None,
    weight_property: str | None = None,
) -> float | tuple[str, str] | None: ...
def read_npz(
    path: PathArg, max_decompressed_bytes: int | None = None
) -> tuple[MappedFile, list[tuple[str, str, list[int], bool, MappedFile | bytes, int]]]: ...

WRITTEN_VERSION: int
WRITABLE_VERSIONS: list[int]
SUPPORTED_VERSIONS: list[int]
DEFAULT_EXTERNAL_DATA_THRESHOLD: int
CRASH_STEPS: list[str]
NPZ_BUDGET_RATIO: int
NPZ_MIN_BUDGET: int
NETWORK_UP_TO: int
MAX_WEIGHT: float
MIN_WEIGHT: float

def read_safetensors(
    path: PathArg,
) -> tuple[MappedFile, list[tuple[str, str]] | None, list[tuple[str, str, list[int], int, int]]]: ...

SAFETENSORS_DTYPES: list[tuple[str, str]]
SAFETENSORS_MAX_HEADER_BYTES: int

class CheckpointError(ValueError):
    source: str | None
    tensor: str | None

class InvalidCheckpointError(CheckpointError): ...
class UnsupportedVersionError(CheckpointError): ...
class TensorDataError(CheckpointError): ...
class DuplicateNameError(CheckpointError): ...
class ExternalDataError(CheckpointError): ...
class InterruptedSaveError(CheckpointError): ...
class CheckpointChangedError(CheckpointError): ...
class ConversionError(CheckpointError): ...
class SourceTooLargeError(CheckpointError): ...
