"""``onnx.TensorProto`` -> checkpoint tensor, from every storage form ONNX allows.

``raw_data`` is passed through as bytes, never converted; the typed fields (``float_data``,
``int32_data``, ``int64_data``, ``double_data``, ``uint64_data``; complex numbers as (real, imaginary)
pairs) are decoded bit-exactly the way ORT unpacks them by the core (the rules of its 1.15 folder
reader, one decoder for both); ``string_data`` becomes text; external data is left to
``_onnx_external``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _dtypes, _native
from .._scalars import check_name
from .._tensor import ArrayTensor, BufferTensor, NominalTensor, StringTensor, Tensor, check_numpy_shape
from ..errors import TensorDataError
from ._onnx_external import ExternalFiles, external_tensor
from ._onnx_import import require_onnx

if TYPE_CHECKING:
    import onnx
    from numpy.typing import NDArray

_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL

_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
# the element type each typed field holds, as the core takes the field's values (little-endian)
_FIELD_DTYPES: dict[str, str] = {
    "int32_data": "<i4",
    "int64_data": "<i8",
    "double_data": "<f8",
    "uint64_data": "<u8",
}


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


def _typed_array(
    proto: onnx.TensorProto, name: str, data_type: int, shape: tuple[int, ...], field: str | None
) -> NDArray[Any]:
    """The values in ``proto``'s typed field ``field`` (``None`` when no typed field holds values),
    decoded by the core by the 1.15 folder reader's rules: the field ONNX assigns to the data type,
    the count against the dims, narrow integers, bool, float16/bfloat16/float8 bit patterns, complex
    (real, imaginary) pairs."""
    if field == "float_data":
        # float_data read through Python floats loses NaN payloads (a float32 signalling NaN comes
        # back quiet with protobuf < 7): the core decodes the serialized message bit-exactly
        data = _native.tensor_proto_values(proto.SerializeToString(), name)
    elif field is None:
        data = _native.tensor_proto_field_values(name, data_type, shape, None, b"")
    else:
        values = getattr(proto, field)
        # one pass in C from the repeated field to the field's element type, no Python loop
        words = np.fromiter(values, dtype=_FIELD_DTYPES[field], count=len(values))
        data = _native.tensor_proto_field_values(name, data_type, shape, field, words.tobytes())
    return np.frombuffer(data, dtype=_dtypes.to_numpy(data_type)).reshape(shape)


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
    return ArrayTensor(_typed_array(proto, name, data_type, shape, typed[0] if typed else None), data_type)
