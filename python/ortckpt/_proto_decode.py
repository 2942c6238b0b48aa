"""``onnx.TensorProto`` -> checkpoint tensor, from every storage form ONNX allows.

``raw_data`` is passed through as bytes, never converted; the typed fields (``float_data``,
``int32_data``, ``int64_data``, ``double_data``, ``uint64_data``, ``string_data``; complex numbers as
(real, imaginary) pairs) are decoded bit-exactly the way ORT unpacks them; external data is left to
``_onnx_external``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _dtypes, _native
from ._onnx_external import ExternalFiles, external_tensor
from ._onnx_import import require_onnx
from ._scalars import check_name
from ._tensor import ArrayTensor, BufferTensor, NominalTensor, StringTensor, Tensor, check_numpy_shape
from .errors import TensorDataError

if TYPE_CHECKING:
    import onnx
    from numpy.typing import NDArray

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


def as_proto(item: object, what: str) -> onnx.TensorProto:
    """``item`` as a TensorProto, parsing it when it is serialized bytes."""
    require_onnx()
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


def proto_name(proto: onnx.TensorProto) -> str:
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
    elif data_type in (_dtypes.FLOAT, _dtypes.COMPLEX64):
        # float_data read through Python floats loses NaN payloads (a float32 signalling NaN comes
        # back quiet with protobuf < 7): the core decodes the serialized message bit-exactly
        values_bytes = _native.tensor_proto_values(proto.SerializeToString(), name)
        arr = np.frombuffer(values_bytes, dtype=dtype)
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


def tensor_from_proto(proto: onnx.TensorProto, name: str, files: ExternalFiles, nominal: bool) -> Tensor:
    """The checkpoint tensor holding ``proto``'s values (only its data type when ``nominal``)."""
    data_type = _proto_data_type(proto, name)
    if nominal:
        # ORT writes names and data types only: dims and data are not looked at
        return NominalTensor(data_type)
    shape = _proto_shape(proto, name)
    # numpy's own limits (e.g. dims [0, 0, 2**62]: empty, yet too large for numpy's size type)
    check_numpy_shape(shape, _dtypes.element_size(data_type) or 8, name)
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
        return external_tensor(proto, name, data_type, shape, files)
    if data_type == _dtypes.STRING:
        if has_raw:
            raise TensorDataError(f"string tensor {name!r}: strings must be in string_data, not raw_data")
        return StringTensor.checked(_strings(proto, name), shape, name)
    if has_raw:
        raw = proto.raw_data  # bytes, passed through untouched
        return BufferTensor.checked(raw, 0, len(raw), data_type, shape, name)
    if typed and typed[0] != _FIELDS[data_type]:
        raise TensorDataError(
            f"tensor {name!r}: {_dtypes.type_name(data_type)} values belong in {_FIELDS[data_type]}, "
            f"found {typed[0]}"
        )
    return ArrayTensor(_typed_array(proto, name, data_type, shape), data_type)
