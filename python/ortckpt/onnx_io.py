"""ONNX interop: checkpoints from ``onnx.TensorProto``s and models, and checkpoints back into models.

The counterpart of ORT's ``SaveCheckpoint(trainable_protos, non_trainable_protos, path, nominal)`` and
``LoadCheckpointToModel``:

* ``save_tensor_protos(trainable, frozen, path)``: write a checkpoint from initializers.
* ``save_from_onnx(model_or_path, path, trainable=...)``: the same from a model's initializers.
* ``load_into_model(checkpoint, model)``: a copy of the model with the checkpoint's values.
* ``from_tensor_proto`` / ``to_tensor_proto``: one ``TensorProto`` <-> one ``Parameter``.

``onnx`` is an optional dependency (``pip install ortckpt[onnx]``): it is imported only when one of
these functions runs, so ``import ortckpt`` works without it.

Every storage form ONNX allows is read: ``raw_data`` (passed through as bytes, never converted),
the typed fields (``float_data``, ``int32_data``, ``int64_data``, ``double_data``, ``uint64_data``,
``string_data``; complex numbers as (real, imaginary) pairs) and external data
(``data_location = EXTERNAL``). External files are resolved relative to a base directory (the
model's directory), must stay inside it (absolute locations, ``..`` escapes and symlinks leading out
are refused), are checked against the file's real size and are memory-mapped: a tensor's bytes are
read only when the checkpoint is written, and never the whole file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import _dtypes, _native
from ._parameter import Parameter
from ._scalars import check_name
from ._tensor import ArrayTensor, BufferTensor, NominalTensor, StringTensor, Tensor
from .errors import CheckpointError, DuplicateNameError, ExternalDataError, TensorDataError
from .io import DEFAULT_EXTERNAL_DATA_THRESHOLD, load
from .state import CheckpointState

if TYPE_CHECKING:
    import onnx
    from numpy.typing import NDArray

    from ._native import CheckpointSpec, TensorSpec

    StrPath = Union[str, os.PathLike[str]]
    ProtoInput = Union[onnx.TensorProto, bytes, bytearray, memoryview]

__all__ = [
    "DEFAULT_EXTERNAL_DATA_THRESHOLD",
    "from_tensor_proto",
    "load_into_model",
    "save_from_onnx",
    "save_tensor_protos",
    "to_tensor_proto",
]

#: Initializers ``save_from_onnx`` makes trainable by default.
FLOAT_TYPES: frozenset[int] = frozenset({_dtypes.FLOAT, _dtypes.DOUBLE, _dtypes.FLOAT16, _dtypes.BFLOAT16})

_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

# data type -> the typed field ONNX stores its values in when raw_data is not used
_FIELDS: dict[int, str] = {
    _dtypes.FLOAT: "float_data",
    _dtypes.COMPLEX64: "float_data",
    _dtypes.UINT8: "int32_data",
    _dtypes.INT8: "int32_data",
    _dtypes.UINT16: "int32_data",
    _dtypes.INT16: "int32_data",
    _dtypes.INT32: "int32_data",
    _dtypes.BOOL: "int32_data",
    _dtypes.FLOAT16: "int32_data",
    _dtypes.BFLOAT16: "int32_data",
    _dtypes.FLOAT8E4M3FN: "int32_data",
    _dtypes.FLOAT8E4M3FNUZ: "int32_data",
    _dtypes.FLOAT8E5M2: "int32_data",
    _dtypes.FLOAT8E5M2FNUZ: "int32_data",
    _dtypes.INT64: "int64_data",
    _dtypes.STRING: "string_data",
    _dtypes.DOUBLE: "double_data",
    _dtypes.COMPLEX128: "double_data",
    _dtypes.UINT32: "uint64_data",
    _dtypes.UINT64: "uint64_data",
}
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")

# Types whose typed-field decoding onnx.numpy_helper.to_array gets right (bit-exact) in every onnx
# version ortckpt supports. The others are decoded here: onnx < 1.17 turns bfloat16/float8 values
# into float32 numbers, and reads BOOL values other than 0/1 differently from ORT (which, like
# us, takes any non-zero int32 as true).
_TO_ARRAY_TYPES = frozenset(
    {
        _dtypes.FLOAT,
        _dtypes.UINT8,
        _dtypes.INT8,
        _dtypes.UINT16,
        _dtypes.INT16,
        _dtypes.INT32,
        _dtypes.INT64,
        _dtypes.DOUBLE,
        _dtypes.UINT32,
        _dtypes.UINT64,
    }
)
_BITS16 = frozenset({_dtypes.FLOAT16, _dtypes.BFLOAT16})
_BITS8 = frozenset({_dtypes.FLOAT8E4M3FN, _dtypes.FLOAT8E4M3FNUZ, _dtypes.FLOAT8E5M2, _dtypes.FLOAT8E5M2FNUZ})


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "this function needs the 'onnx' package: pip install onnx (or ortckpt[onnx])"
        ) from exc


def _fspath(path: StrPath) -> str:
    return os.fsdecode(os.fspath(path))


# ------------------------------------------------------------------------------------------------
# External data files
# ------------------------------------------------------------------------------------------------


class _ExternalFiles:
    """Resolves, confines and memory-maps the external data files of a set of TensorProtos.

    Each file is mapped once (``_native.MappedFile``) and shared by the tensors that live in it.
    """

    def __init__(self, base_dir: StrPath | None) -> None:
        self._base = None if base_dir is None else _fspath(base_dir)
        self._real_base: str | None = None
        self._maps: dict[str, _native.MappedFile] = {}

    def _resolve(self, name: str, location: str) -> str:
        if self._base is None:
            raise ExternalDataError(
                f"tensor {name!r}: its data is in the external file {location!r}, but no base directory "
                "was given to resolve it against (pass base_dir=, the directory of the model)"
            )
        if not location:
            raise ExternalDataError(f"tensor {name!r}: external data without a 'location'")
        if "\x00" in location:
            raise ExternalDataError(f"tensor {name!r}: external data location {location!r} contains NUL")
        if os.path.isabs(location) or os.path.splitdrive(location)[0] or location.startswith(("/", "\\")):
            raise ExternalDataError(
                f"tensor {name!r}: external data location {location!r} is an absolute path; ONNX "
                "external data must be relative to the model's directory"
            )
        if self._real_base is None:
            self._real_base = os.path.realpath(self._base)
        real_base = self._real_base
        real = os.path.realpath(os.path.join(real_base, location))
        if real == real_base or os.path.commonpath([real, real_base]) != real_base:
            raise ExternalDataError(
                f"tensor {name!r}: external data location {location!r} resolves to {real!r}, which is "
                f"not a file inside the model's directory {real_base!r} (no '..' escapes or symlinks "
                "leading out)"
            )
        return real

    def open(self, name: str, location: str) -> tuple[str, _native.MappedFile]:
        real = self._resolve(name, location)
        mapped = self._maps.get(real)
        if mapped is None:
            try:
                mapped = _native.MappedFile(real)
            except FileNotFoundError:
                raise ExternalDataError(
                    f"tensor {name!r}: external data file {real!r} (location {location!r}) is missing"
                ) from None
            self._maps[real] = mapped
        return real, mapped


def _external_fields(proto: onnx.TensorProto, name: str) -> tuple[str, int, int | None]:
    location = ""
    offset = 0
    length: int | None = None
    for entry in proto.external_data:
        key, value = entry.key, entry.value
        if key == "location":
            location = value
        elif key in ("offset", "length"):
            try:
                number = int(value, 10)
            except ValueError:
                raise ExternalDataError(
                    f"tensor {name!r}: external data {key} {value!r} is not an integer"
                ) from None
            if number < 0:
                raise ExternalDataError(f"tensor {name!r}: external data {key} {number} is negative")
            if key == "offset":
                offset = number
            else:
                length = number
        # "checksum" and unknown keys are ignored, as ONNX and ORT do
    return location, offset, length


def _external_tensor(
    proto: onnx.TensorProto, name: str, data_type: int, shape: tuple[int, ...], files: _ExternalFiles
) -> Tensor:
    if data_type == _dtypes.STRING:
        raise TensorDataError(f"string tensor {name!r}: string data cannot be stored externally")
    location, offset, length = _external_fields(proto, name)
    path, mapped = files.open(name, location)
    size = len(mapped)
    expected = math.prod(shape) * _dtypes.element_size(data_type)
    if offset > size:
        raise ExternalDataError(
            f"tensor {name!r}: external data offset {offset} is past the end of {path!r} ({size} bytes)"
        )
    if length is None:
        length = size - offset  # ONNX: no length means "to the end of the file"
    if length != expected:
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} shape {list(shape)} needs {expected} bytes, "
            f"its external data in {path!r} is {length} bytes long"
        )
    if offset + length > size:
        raise ExternalDataError(
            f"tensor {name!r}: external data needs bytes {offset}..{offset + length} of {path!r}, "
            f"which has {size} bytes"
        )
    return BufferTensor(mapped, offset, length, data_type, shape, name)


# ------------------------------------------------------------------------------------------------
# TensorProto -> checkpoint tensor
# ------------------------------------------------------------------------------------------------


def _as_proto(item: object, what: str) -> onnx.TensorProto:
    _require_onnx()
    import onnx

    if isinstance(item, onnx.TensorProto):
        return item
    if isinstance(item, (bytes, bytearray, memoryview)):
        proto = onnx.TensorProto()
        try:
            proto.ParseFromString(bytes(item))
        except Exception as exc:  # google.protobuf.message.DecodeError
            raise TensorDataError(f"{what}: not a serialized onnx.TensorProto ({exc})") from None
        return proto
    raise TypeError(
        f"{what}: expected an onnx.TensorProto or its serialized bytes, got {type(item).__name__}"
    )


def _proto_name(proto: onnx.TensorProto) -> str:
    return check_name(proto.name, "tensor")


def _proto_shape(proto: onnx.TensorProto, name: str) -> tuple[int, ...]:
    shape = tuple(int(d) for d in proto.dims)
    for dim in shape:
        if dim < 0:
            raise TensorDataError(f"tensor {name!r}: negative dimension in dims {list(shape)}")
    return shape


def _proto_data_type(proto: onnx.TensorProto, name: str) -> int:
    data_type = int(proto.data_type)
    if not _dtypes.is_known(data_type):
        raise TensorDataError(
            f"tensor {name!r}: ONNX data type {data_type} cannot be stored in an ONNX Runtime checkpoint "
            f"(supported: {', '.join(_dtypes.type_name(c) for c in sorted(_dtypes.DATA_TYPES))})"
        )
    return data_type


def _bit_patterns(
    values: Any, name: str, data_type: int, bits: type[np.unsignedinteger[Any]]
) -> NDArray[Any]:
    wide = np.asarray(values, dtype=np.int64)
    limit = int(np.iinfo(bits).max)
    bad = (wide < 0) | (wide > limit)
    if bad.any():
        value = int(wide[np.argmax(bad)])
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} value {value} in int32_data is not a bit "
            f"pattern in 0..{limit} (ORT: data overflow)"
        )
    return wide.astype(bits)


def _typed_array(proto: onnx.TensorProto, name: str, data_type: int, shape: tuple[int, ...]) -> NDArray[Any]:
    field = _FIELDS[data_type]
    values = getattr(proto, field)
    count = math.prod(shape)
    per_element = 2 if data_type in (_dtypes.COMPLEX64, _dtypes.COMPLEX128) else 1
    if len(values) != count * per_element:
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} shape {list(shape)} needs "
            f"{count * per_element} values in {field}, found {len(values)}"
        )
    dtype = _dtypes.to_numpy(data_type)
    arr: NDArray[Any]
    if count == 0:
        arr = np.zeros(shape, dtype=dtype)
    elif data_type in _TO_ARRAY_TYPES:
        from onnx import numpy_helper

        arr = np.asarray(numpy_helper.to_array(proto))
    elif data_type in _BITS16:
        # ONNX keeps the 16-bit pattern in each int32; ORT refuses values outside 0..0xFFFF
        arr = _bit_patterns(values, name, data_type, np.uint16).view(dtype)
    elif data_type in _BITS8:
        arr = _bit_patterns(values, name, data_type, np.uint8).view(dtype)
    elif data_type == _dtypes.BOOL:
        arr = np.asarray(values, dtype=np.int32) != 0
    elif data_type == _dtypes.COMPLEX64:
        arr = np.asarray(values, dtype=np.float32).view(np.complex64)
    elif data_type == _dtypes.COMPLEX128:
        arr = np.asarray(values, dtype=np.float64).view(np.complex128)
    else:  # pragma: no cover - every known type is handled above
        raise TensorDataError(f"tensor {name!r}: cannot decode {field} for {_dtypes.type_name(data_type)}")
    if arr.dtype != dtype:  # pragma: no cover - the decoders above produce the checkpoint dtype
        raise TensorDataError(f"tensor {name!r}: decoded {arr.dtype}, expected {dtype}")
    arr = np.ascontiguousarray(arr).reshape(shape)
    arr.flags.writeable = False
    return arr


def _strings(proto: onnx.TensorProto, name: str) -> list[str]:
    values: list[str] = []
    for i, raw in enumerate(proto.string_data):
        try:
            values.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise TensorDataError(
                f"string tensor {name!r}: element {i} is not valid UTF-8 (checkpoints store text)"
            ) from None
    return values


def _tensor_from_proto(proto: onnx.TensorProto, name: str, files: _ExternalFiles, nominal: bool) -> Tensor:
    data_type = _proto_data_type(proto, name)
    if nominal:
        # ORT writes names and data types only: dims and data are not looked at
        return NominalTensor(data_type)
    shape = _proto_shape(proto, name)
    if proto.HasField("segment"):
        raise TensorDataError(f"tensor {name!r}: segmented TensorProtos are not supported")
    has_raw = proto.HasField("raw_data")
    typed = [field for field in _TYPED_FIELDS if len(getattr(proto, field))]
    external = proto.data_location == _EXTERNAL
    sources = (["raw_data"] if has_raw else []) + typed + (["external data"] if external else [])
    if len(sources) > 1:
        raise TensorDataError(
            f"tensor {name!r}: values in more than one place ({', '.join(sources)}); ONNX allows one"
        )
    if external:
        return _external_tensor(proto, name, data_type, shape, files)
    if data_type == _dtypes.STRING:
        if has_raw:
            raise TensorDataError(f"string tensor {name!r}: strings must be in string_data, not raw_data")
        return StringTensor(_strings(proto, name), shape, name)
    if has_raw:
        raw = proto.raw_data  # bytes, passed through untouched
        return BufferTensor(raw, 0, len(raw), data_type, shape, name)
    if typed and typed[0] != _FIELDS[data_type]:
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} values belong in {_FIELDS[data_type]}, "
            f"found {typed[0]}"
        )
    return ArrayTensor(_typed_array(proto, name, data_type, shape), data_type)


def from_tensor_proto(
    proto: ProtoInput, *, trainable: bool = True, base_dir: StrPath | None = None
) -> Parameter:
    """A ``Parameter`` holding the values of an ``onnx.TensorProto`` (or its serialized bytes).

    ``raw_data`` is used as is (no numpy conversion); typed fields are decoded bit-exactly the way
    ORT unpacks them (narrow integers keep the low bits of ``int32_data``, any non-zero BOOL value is
    true, float16/bfloat16/float8 values must be bit patterns in range, else ``TensorDataError`` as
    ORT's "data overflow"); external data is memory-mapped from a file under ``base_dir`` (the
    model's directory; required for external tensors; ``length`` may be left out to mean "to the end
    of the file"). Values in more than one place (say ``raw_data`` and ``float_data``) are an error.
    Raises ``TensorDataError`` for inconsistent tensors and ``ExternalDataError`` for external data
    that is missing, out of range or outside ``base_dir``.
    """
    tensor_proto = _as_proto(proto, "tensor")
    name = _proto_name(tensor_proto)
    tensor = _tensor_from_proto(tensor_proto, name, _ExternalFiles(base_dir), nominal=False)
    return Parameter._from_tensor(name, tensor, bool(trainable))


# ------------------------------------------------------------------------------------------------
# Writing checkpoints
# ------------------------------------------------------------------------------------------------


def _check_threshold(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"external_data_threshold must be an int, got {type(value).__name__}: {value!r}")
    result = int(value)
    if result < 0:
        raise ValueError(f"external_data_threshold must not be negative, got {result}")
    return result


def _protos(items: Iterable[ProtoInput], what: str) -> list[onnx.TensorProto]:
    if isinstance(items, (str, bytes, bytearray, memoryview)) or not isinstance(items, Iterable):
        raise TypeError(f"{what} must be a list of onnx.TensorProto (or serialized TensorProtos)")
    return [_as_proto(item, f"{what}[{i}]") for i, item in enumerate(items)]


def _write(
    trainable: list[onnx.TensorProto],
    frozen: list[onnx.TensorProto],
    path: StrPath,
    *,
    nominal: bool,
    external_data_threshold: int,
    base_dir: StrPath | None,
) -> None:
    threshold = _check_threshold(external_data_threshold)
    files = _ExternalFiles(base_dir)
    seen: dict[str, str] = {}
    specs: dict[str, list[TensorSpec]] = {"trainable": [], "frozen": []}
    for kind, protos in (("trainable", trainable), ("frozen", frozen)):
        for proto in protos:
            name = _proto_name(proto)
            if name in seen:
                where = kind if seen[name] == kind else "trainable and frozen"
                raise DuplicateNameError(f"duplicate tensor name {name!r} ({where})")
            seen[name] = kind
            tensor = _tensor_from_proto(proto, name, files, bool(nominal))
            specs[kind].append((name, tensor.data_type, list(tensor.shape), tensor.spec_data(name)))
    spec: CheckpointSpec = {
        "is_nominal": bool(nominal),
        "trainable": specs["trainable"],
        "frozen": specs["frozen"],
        "optimizer_groups": [],
        "properties": [],
    }
    _native.write_checkpoint(_fspath(path), spec, external_data_threshold=threshold)


def save_tensor_protos(
    trainable: Iterable[ProtoInput],
    frozen: Iterable[ProtoInput],
    path: StrPath,
    *,
    nominal: bool = False,
    external_data_threshold: int = DEFAULT_EXTERNAL_DATA_THRESHOLD,
    base_dir: StrPath | None = None,
) -> None:
    """Write a checkpoint from ONNX initializers, like ORT's ``save_checkpoint(trainable_protos,
    frozen_protos, path, nominal_checkpoint)``.

    ``trainable`` and ``frozen`` hold ``onnx.TensorProto``s or their serialized bytes; a name may
    appear once across both (else ``DuplicateNameError``). With ``nominal=True`` only names and data
    types are written (no dims, no values; the tensors' data is not read), as ORT does for
    ``generate_artifacts(..., nominal_checkpoint=True)``. Tensors are written sorted by name; tensor
    data beyond ``external_data_threshold`` bytes goes to the external file ``<path>.data``.
    ``base_dir`` resolves TensorProtos whose data is in external files (see ``from_tensor_proto``).
    The write is atomic. TensorProto ``doc_string``s are not stored (ORT keeps them; nothing reads
    them back).
    """
    _write(
        _protos(trainable, "trainable"),
        _protos(frozen, "frozen"),
        path,
        nominal=nominal,
        external_data_threshold=external_data_threshold,
        base_dir=base_dir,
    )


def _load_model(model: onnx.ModelProto | StrPath, what: str) -> tuple[onnx.ModelProto, str | None]:
    """(a private copy of the model, the directory of its file or None)."""
    _require_onnx()
    import onnx

    if isinstance(model, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy, None
    if isinstance(model, (str, os.PathLike)):
        path = _fspath(model)
        loaded = onnx.load(path, load_external_data=False)
        return loaded, os.path.dirname(os.path.abspath(path))
    raise TypeError(f"{what} must be an onnx.ModelProto or a path, got {type(model).__name__}")


def save_from_onnx(
    model_or_path: onnx.ModelProto | StrPath,
    path: StrPath,
    *,
    trainable: Iterable[str] | None = None,
    nominal: bool = False,
    external_data_threshold: int = DEFAULT_EXTERNAL_DATA_THRESHOLD,
    base_dir: StrPath | None = None,
) -> None:
    """Write a checkpoint from the initializers of an ONNX model (its main graph).

    ``model_or_path`` is an ``onnx.ModelProto`` or a model file. A file is parsed without its
    external data; initializers kept in external files are memory-mapped from the model's directory
    (or ``base_dir``), so memory use stays bounded by the model file, not the weights. For a
    ``ModelProto`` with external initializers pass ``base_dir`` (the directory it was loaded from).

    ``trainable`` names the initializers to save as trainable (default: every float32, float64,
    float16 and bfloat16 initializer); every other initializer is saved frozen. A name that is not an
    initializer of the model is an error. ``nominal`` and ``external_data_threshold`` are as for
    ``save_tensor_protos``.
    """
    model, model_dir = _load_model(model_or_path, "model_or_path")
    base = model_dir if base_dir is None else base_dir
    inits = list(model.graph.initializer)
    names: list[str] = []
    seen: set[str] = set()
    for init in inits:
        name = _proto_name(init)
        if name in seen:
            raise DuplicateNameError(f"the model has two initializers named {name!r}")
        seen.add(name)
        names.append(name)
    if trainable is None:
        chosen = {name for name, init in zip(names, inits) if init.data_type in FLOAT_TYPES}
    else:
        if isinstance(trainable, (str, bytes)):
            raise TypeError("trainable must be a collection of initializer names, not a single string")
        chosen = set()
        for item in trainable:
            chosen.add(check_name(item, "trainable"))
        unknown = sorted(chosen - seen)
        if unknown:
            raise ValueError(
                f"trainable names that are not initializers of the model: {unknown} "
                f"(initializers: {sorted(seen)[:20]}{' ...' if len(seen) > 20 else ''})"
            )
    _write(
        [init for name, init in zip(names, inits) if name in chosen],
        [init for name, init in zip(names, inits) if name not in chosen],
        path,
        nominal=nominal,
        external_data_threshold=external_data_threshold,
        base_dir=base,
    )


# ------------------------------------------------------------------------------------------------
# Checkpoint -> ONNX
# ------------------------------------------------------------------------------------------------


def to_tensor_proto(param: Parameter) -> onnx.TensorProto:
    """An ``onnx.TensorProto`` with the parameter's name, data type, dims and values.

    Numeric values go to ``raw_data`` (little-endian, as stored in the checkpoint), strings to
    ``string_data``: the same TensorProto ORT makes from a checkpoint tensor. Nominal parameters
    have no values and raise ``CheckpointError``.
    """
    _require_onnx()
    import onnx.helper

    if not isinstance(param, Parameter):
        raise TypeError(f"expected a Parameter, got {type(param).__name__}")
    name = param.name
    tensor = param._tensor
    if tensor.is_nominal:
        raise CheckpointError(
            f"parameter {name!r} is nominal (a name and data type without values): it has no TensorProto"
        )
    data = tensor.spec_data(name)
    dims = [int(d) for d in tensor.shape]
    if tensor.data_type == _dtypes.STRING:
        assert isinstance(data, list)
        proto = onnx.TensorProto()
        proto.name = name
        proto.data_type = tensor.data_type
        proto.dims.extend(dims)
        proto.string_data.extend(s.encode("utf-8") for s in data)
        return proto
    assert data is not None and not isinstance(data, list)
    return onnx.helper.make_tensor(name, tensor.data_type, dims, bytes(memoryview(data)), raw=True)


def load_into_model(
    checkpoint: CheckpointState | StrPath, model: onnx.ModelProto | StrPath
) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers take the checkpoint's values, like ORT's
    ``LoadCheckpointToModel`` (``get_model_after_loading_checkpoint`` in Python).

    ``checkpoint`` is a ``CheckpointState`` or a checkpoint file; ``model`` an ``onnx.ModelProto``
    (not modified) or a model file (parsed without its external data). The rule, as ORT 1.19.2
    applies it (checked against it by the test suite):

    * Every initializer of the model's main graph whose name is a parameter of the checkpoint
      (trainable or frozen) is replaced as a whole by the checkpoint tensor: name, data type, dims
      and values (``raw_data``; ``string_data`` for strings). Nothing of the old initializer is kept
      (doc_string, external data references, typed fields): a different data type or shape in the
      checkpoint simply wins, without a check or a conversion.
    * Initializers the checkpoint does not have are left unchanged (external data references
      included, still relative to the original model's directory); checkpoint parameters the model
      does not have are ignored. Initializer order, nodes and everything else stay as they are;
      sparse initializers and subgraphs are not looked at. Optimizer state and properties are not used.
    * An initializer without a name makes the model invalid: ``ValueError`` (ORT: "All initializers
      must have names"). ORT skips that check only for checkpoints without a module state table
      (ORT's own save of an empty CheckpointState); ortckpt always checks.
    * A nominal checkpoint has no values and is refused with ``CheckpointError``, as ORT refuses it
      ("Cannot load a nominal checkpoint to a model proto"), even when no names match.
    * Values a checkpoint keeps in its external data file are read from there, as ORT does.

    One difference: ORT also copies a tensor's ``doc_string``, which its ``save_checkpoint`` of
    TensorProtos stores in the file; ortckpt does not read doc strings, so a replaced initializer
    never has one. Checkpoints ortckpt writes hold no doc strings, so for them the result is the same.
    """
    state = checkpoint if isinstance(checkpoint, CheckpointState) else load(checkpoint)
    if not isinstance(state, CheckpointState):  # pragma: no cover - load always returns one
        raise TypeError("checkpoint must be a CheckpointState or a path")
    if state.is_nominal:
        raise CheckpointError(
            f"cannot load a nominal checkpoint{_source(state)} into a model: it records names and data "
            "types only, no values (ORT refuses it too)"
        )
    out, _ = _load_model(model, "model")
    params = state.parameters
    cache: dict[str, onnx.TensorProto] = {}
    for i, init in enumerate(out.graph.initializer):
        if not init.HasField("name"):
            raise ValueError(f"the model is invalid: initializer #{i} has no name")
        param = params.get(init.name)
        if param is None:
            continue
        replacement = cache.get(init.name)
        if replacement is None:
            replacement = cache[init.name] = to_tensor_proto(param)
        init.CopyFrom(replacement)
    return out


def _source(state: CheckpointState) -> str:
    return "" if state.source is None else f" ({state.source})"
