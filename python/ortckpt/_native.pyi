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
    "DATA_TYPES",
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "NPZ_BUDGET_RATIO",
    "NPZ_MIN_BUDGET",
    "SAFETENSORS_DTYPES",
    "SAFETENSORS_MAX_HEADER_BYTES",
    "SNIFF_LEN",
    "SUPPORTED_VERSIONS",
    "WRITABLE_VERSIONS",
    "WRITTEN_VERSION",
    "AggregationError",
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
    "MappedFile",
    "PagedBuffer",
    "ReadUpload",
    "Round",
    "RoundVerdict",
    "SourceTooLargeError",
    "StagedOutput",
    "TensorDataError",
    "TensorRecord",
    "UnsupportedVersionError",
    "UploadBytes",
    "expect_kind",
    "external_data_location",
    "external_data_path",
    "file_kind",
    "index_checkpoint",
    "index_paged",
    "index_upload",
    "is_unchanging",
    "load_checkpoint",
    "merge_partials",
    "npz_member_problem",
    "parse_npy_buffer",
    "range_pass",
    "read_adapter",
    "read_adapter_bytes",
    "read_legacy_folder",
    "read_npz",
    "read_safetensors",
    "read_upload",
    "recover",
    "save_checkpoint",
    "serialize_adapter",
    "serialize_checkpoint",
    "simd_level",
    "tensor_proto_field_values",
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
    def prepare_momentums(self) -> None: ...
    def array(self, position: int, dtype: np.dtype[Any]) -> NDArray[Any] | None: ...
    def parameter_arrays(
        self, dtype_of: Callable[[int], np.dtype[Any]], skip: AbstractSet[str]
    ) -> tuple[dict[str, NDArray[Any] | None], list[str]]: ...
    def parameter_specs(self, skip: AbstractSet[str]) -> list[tuple[bool, TensorSpec]]: ...
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
class PagedBuffer:
    """The bytes of a checkpoint read on demand (``index_paged``): a read-only 1-D byte buffer the
    size of the object whose ranges hold its bytes once fetched (a tensor's before its first use)."""

    @property
    def fetched(self) -> int: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

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
def index_paged(
    read: Callable[[int, int], bytes],
    size: int,
    source: str,
    block_size: int,
    external_read: Callable[[int, int], bytes] | None = None,
    external_size: int = 0,
    external_source: str | None = None,
) -> Index: ...
def load_checkpoint(path: PathArg, source: str, mmap: bool = True, max_bytes: int | None = None) -> Index: ...
def is_unchanging(data: object) -> bool: ...
def serialize_checkpoint(spec: CheckpointSpec) -> bytes: ...
def save_checkpoint(
    path: PathArg,
    spec: CheckpointSpec,
    external_data_threshold: int | None = None,
    external_momentums: bool = False,
) -> None: ...
def recover(path: PathArg) -> str: ...
def simd_level() -> Literal["plain", "avx2", "avx512"]: ...
def external_data_path(path: PathArg) -> str: ...
def external_data_location(path: PathArg) -> str: ...
def read_legacy_folder(path: PathArg, max_bytes: int | None = None) -> Index | None: ...
def tensor_proto_values(data: bytes, tensor: str) -> bytes: ...
def tensor_proto_field_values(
    tensor: str, data_type: int, dims: Sequence[int], field: str | None, values: bytes
) -> bytes: ...

# ORT adapter files: (format_version, adapter_version, model_version, the adapter as a lazy checkpoint
# index over the file's bytes: every parameter trainable, no properties)
AdapterContents: TypeAlias = tuple[int, int, int, Index]

def read_adapter(path: PathArg) -> AdapterContents: ...
def file_kind(path: PathArg) -> str | None: ...
def expect_kind(head: bytes, length: int, expected: str, source: str) -> None: ...

SNIFF_LEN: int

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

_Portable = tuple[
    str,
    float,
    list[tuple[int, int, bool]],
    list[float],
    tuple[str, int, int] | tuple[str, bytes] | tuple[str, str],
    tuple[str, bytes, tuple[int, int, int, int], tuple[int, int, int, int] | None]
    | tuple[str, bytes, bytes | None],
]
_Plan = tuple[
    str, float, int, int | None, list[int], list[float], list[float], tuple[int, float] | None, bool
]
_Partial = tuple[NDArray[np.float64], NDArray[np.float64], float, int]
_MemberReport = tuple[str, float, float, bool, float, float | None, bool]
# values, divisor, total weight, count, members, dropped (place, kind, message)
# per slot float64 values, or float32 ones already rounded (``finish(float32=True)``)
_Finish = tuple[list[NDArray[Any]], float, float, int, list[_MemberReport], list[tuple[int, str, str]]]

@final
class RoundVerdict:
    """What became of one upload: accepted with a weight, or rejected with a kind and a message."""

    @property
    def accepted(self) -> bool: ...
    @property
    def weight(self) -> float | None: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...

@final
class ReadUpload:
    """A local upload read whole into private memory, its files still open."""

    @property
    def checkpoint(self) -> UploadBytes: ...
    @property
    def external(self) -> UploadBytes | None: ...
    @property
    def identity(self) -> tuple[int, int]: ...
    @property
    def source(self) -> str: ...

def read_upload(path: PathArg, max_bytes: int | None = None) -> ReadUpload: ...
def index_upload(path: PathArg, max_bytes: int | None = None) -> Index: ...

@final
class Round:
    """One aggregation round (the core's ``aggregate::Round``)."""

    def __new__(
        cls,
        layout: AggregationLayout,
        method_name: str,
        *,
        trim: float = 0.1,
        byzantine: int = 0,
        keep: int | None = None,
        clip_norm: float | None = None,
        noise_multiplier: float | None = None,
        seed: int | None = None,
        max_bytes: int | None = None,
        chunk_bytes: int = ...,
        staleness_exponent: float = 0.5,
        max_staleness: int | None = None,
        screening: bool = False,
    ) -> Round: ...
    @property
    def accepted(self) -> int: ...
    @property
    def total_weight(self) -> float: ...
    def set_base_file(self, path: PathArg) -> None: ...
    def set_base_bytes(
        self, data: Buffer | UploadBytes, external: Buffer | UploadBytes | None = None
    ) -> None: ...
    def add_files(
        self,
        paths: Sequence[PathArg],
        weights: Sequence[float | None],
        weight_property: str | None,
        labels: Sequence[str],
        staleness: Sequence[int],
        defer_values: bool = False,
    ) -> list[RoundVerdict]: ...
    def add_bytes(
        self,
        data: Buffer | UploadBytes,
        external: Buffer | UploadBytes | None,
        weight: float | None,
        weight_property: str | None,
        label: str,
        identity: tuple[int, int] | str | None = None,
        staleness: int = 0,
        source: str | None = None,
    ) -> RoundVerdict: ...
    def add_file_named(
        self,
        path: PathArg,
        weight: float | None,
        weight_property: str | None,
        label: str,
        name: str,
        staleness: int = 0,
    ) -> RoundVerdict: ...
    def add_folder(
        self,
        path: PathArg,
        weight: float | None,
        weight_property: str | None,
        label: str,
        name: str,
        staleness: int = 0,
    ) -> RoundVerdict | None: ...
    def add_read(
        self,
        upload: ReadUpload,
        weight: float | None,
        weight_property: str | None,
        label: str,
        staleness: int = 0,
    ) -> RoundVerdict: ...
    def take_partial(self) -> _Partial: ...
    def absorb(self, partial: _Partial) -> None: ...
    def finish(self, *, float32: bool = False) -> _Finish: ...
    def passes_needed(self) -> tuple[bool, bool]: ...
    def take_portables(self) -> list[_Portable]: ...
    def admit(self, portable: _Portable) -> RoundVerdict | None: ...
    def portables(self) -> tuple[list[_Portable], _Portable | None]: ...
    def clip_scale(self, squares: Sequence[float]) -> list[float]: ...
    def plan(self, scale: Sequence[float], d: Sequence[float]) -> tuple[_Plan, list[float] | None]: ...
    def finish_remote(
        self,
        values: Sequence[float],
        gaps: Sequence[float],
        squares: Sequence[float],
        plan: _Plan,
        scores: Sequence[float] | None,
    ) -> _Finish: ...
    def drop_remote(self, first: Sequence[int | None]) -> list[tuple[int, str, str]]: ...

def npz_member_problem(name: str) -> str | None: ...
def parse_npy_buffer(data: bytes, tensor: str) -> tuple[str, bool, list[int], int]: ...
def weight_problem(value: float) -> str | None: ...
def merge_partials(first: _Partial, second: _Partial) -> _Partial: ...
def range_pass(
    layout: AggregationLayout,
    portables: Sequence[_Portable],
    base: _Portable | None,
    start: int,
    end: int,
    chunk_bytes: int,
    kind: str,
    scale: Sequence[float] | None = None,
    plan: _Plan | None = None,
) -> Any: ...
def read_npz(
    path: PathArg, max_decompressed_bytes: int | None = None, max_bytes: int | None = None
) -> tuple[MappedFile, list[tuple[str, str, list[int], bool, MappedFile | bytes, int]]]: ...

WRITTEN_VERSION: int
WRITABLE_VERSIONS: list[int]
SUPPORTED_VERSIONS: list[int]
DEFAULT_EXTERNAL_DATA_THRESHOLD: int
CRASH_STEPS: list[str]
# the core's table of data types: (code, numpy name, ORT name, bytes per element, 0 for strings)
DATA_TYPES: list[tuple[int, str, str, int]]
NPZ_BUDGET_RATIO: int
NPZ_MIN_BUDGET: int
MAX_WEIGHT: float
MIN_WEIGHT: float

def read_safetensors(
    path: PathArg, max_bytes: int | None = None
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

class AggregationError(CheckpointError):
    # set by ortckpt.average and Round.result: the AggregationReport of the round that failed
    report: Any
