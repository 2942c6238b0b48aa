"""ONNX interop without ORT: TensorProto storage forms -> checkpoints, external data resolution and
confinement, save_from_onnx, nominal checkpoints, load_into_model and TensorProto output.

The rules load_into_model follows were found with ORT 1.19.2 (tests/ort/test_ort_onnx.py checks them
against the real thing); the byte strings below are what ORT produced for the same inputs.
"""

from __future__ import annotations

import os
import pathlib
import resource
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import ortckpt
from ortckpt import (
    CheckpointError,
    CheckpointState,
    DuplicateNameError,
    ExternalDataError,
    TensorDataError,
    _dtypes,
)
from ortckpt._parameter import tensor_of
from ortckpt.formats import onnx_io

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.helpers.onnx_protos import data_type_of, header, make_model, raw_proto  # noqa: E402
from tests.helpers.paths import DATA  # noqa: E402

Arr = np.ndarray[Any, Any]

# -- test data: one array per data type, with edge values ------------------------------------------


def _f32_bits() -> Arr:
    bits = np.array(
        [
            0x00000000,
            0x80000000,  # -0.0
            0x3F800000,
            0x7F800000,  # inf
            0xFF800000,
            0x7FC00000,  # quiet NaN
            0x7F800001,  # signalling NaN (protobuf's Python setters would quiet it)
            0xFFBFFFFF,  # signalling NaN, sign set, full payload
            0x00000001,  # smallest denormal
            0x7F7FFFFF,
        ],
        dtype=np.uint32,
    )
    return bits.view(np.float32).reshape(2, 5)


def dtype_arrays() -> dict[str, Arr]:
    f64 = np.array([1.5, -0.0, np.inf, 5e-324, 1e308], dtype=np.float64)
    f64_bits = f64.view(np.uint64).copy()
    f64_bits[2] = 0x7FF0_0000_DEAD_BEEF  # signalling NaN with payload
    return {
        "float32": _f32_bits(),
        "uint8": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "int8": np.arange(-128, 128, dtype=np.int8),
        "uint16": np.array([0, 1, 32768, 65535], dtype=np.uint16),
        "int16": np.array([[-32768, -1], [0, 32767]], dtype=np.int16),
        "int32": np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int32),
        "int64": np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64),
        "string": np.array([["héllo ✓", ""], ["a\x00b", "日本語"]], dtype=object),
        "bool": np.array([True, False, True, True]),
        "float16": np.array([0, 0x8000, 0x3C00, 0x7C00, 0x7C01, 0xFE00, 0x0001, 0x7BFF], np.uint16).view(
            np.float16
        ),
        "float64": f64_bits.view(np.float64),
        "uint32": np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint32),
        "uint64": np.array([0, 1, 2**63, 2**64 - 1], dtype=np.uint64),
        "complex64": np.array([1 + 2j, -0.0 - 1j, complex(np.inf, np.nan)], dtype=np.complex64),
        "complex128": np.array([[1e300 + 1e-300j, -5e-324j]], dtype=np.complex128),
        "bfloat16": np.arange(0, 2**16, 257, dtype=np.uint16).view(ml_dtypes.bfloat16),
        "float8_e4m3fn": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "float8_e4m3fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fnuz),
        "float8_e5m2": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
        "float8_e5m2fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2fnuz),
        "scalar_f32": np.array(3.25, dtype=np.float32),
        "empty_f32": np.zeros((0, 3), dtype=np.float32),
        "empty_bf16": np.zeros((2, 0), dtype=ml_dtypes.bfloat16),
        "empty_string": np.zeros((0,), dtype=object),
    }


ARRAYS = dtype_arrays()
NUMERIC = [k for k, v in ARRAYS.items() if v.dtype != object]


def raw(arr: Arr) -> bytes | list[str]:
    if arr.dtype == object:
        return [str(s) for s in arr.reshape(-1)]
    return np.ascontiguousarray(arr).tobytes()


def assert_same(got: Arr, expected: Arr, what: str = "") -> None:
    assert got.dtype == expected.dtype, what
    assert got.shape == expected.shape, what
    assert raw(got) == raw(expected), what


# -- building TensorProtos in each storage form ----------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _with_packed_float_data(proto: TensorProto, values: Arr) -> TensorProto:
    """Set float_data through the wire format: protobuf's Python setters quiet signalling NaNs."""
    payload = np.ascontiguousarray(values, dtype="<f4").tobytes()
    wire = proto.SerializeToString() + b"\x22" + _varint(len(payload)) + payload  # field 4, packed
    return TensorProto.FromString(wire)


def typed_proto(name: str, arr: Arr) -> TensorProto:
    """The typed-field form ONNX specifies for each data type (onnx.proto, TensorProto)."""
    t = header(name, arr)
    code = t.data_type
    flat = np.ascontiguousarray(arr).reshape(-1)
    if code in (_dtypes.FLOAT, _dtypes.COMPLEX64):
        return _with_packed_float_data(t, flat.view(np.float32))
    if code in (_dtypes.DOUBLE, _dtypes.COMPLEX128):
        t.double_data.extend(flat.view(np.float64).tolist())
    elif code in (_dtypes.FLOAT16, _dtypes.BFLOAT16):
        t.int32_data.extend(flat.view(np.uint16).astype(np.int32).tolist())  # bit pattern, low 16 bits
    elif code in (_dtypes.FLOAT8E4M3FN, _dtypes.FLOAT8E4M3FNUZ, _dtypes.FLOAT8E5M2, _dtypes.FLOAT8E5M2FNUZ):
        t.int32_data.extend(flat.view(np.uint8).astype(np.int32).tolist())  # bit pattern, low 8 bits
    elif code in (_dtypes.INT8, _dtypes.INT16, _dtypes.INT32, _dtypes.UINT8, _dtypes.UINT16, _dtypes.BOOL):
        t.int32_data.extend(flat.astype(np.int64).tolist())
    elif code == _dtypes.INT64:
        t.int64_data.extend(flat.tolist())
    elif code in (_dtypes.UINT32, _dtypes.UINT64):
        t.uint64_data.extend(flat.astype(np.uint64).tolist())
    elif code == _dtypes.STRING:
        t.string_data.extend(s.encode("utf-8") for s in flat)
    else:  # pragma: no cover
        raise AssertionError(code)
    return t


def set_external(t: TensorProto, location: str, offset: int | None = None, length: int | None = None) -> None:
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key = key
            entry.value = str(value)


def write_external(
    directory: pathlib.Path, arrays: dict[str, Arr], filename: str = "weights.bin"
) -> list[TensorProto]:
    """Write the arrays' bytes to directory/filename at odd offsets; TensorProtos that point there."""
    protos = []
    with open(directory / filename, "wb") as f:
        for i, (name, arr) in enumerate(arrays.items()):
            f.write(b"\xee" * (i % 7 + 1))  # misalign every tensor
            offset = f.tell()
            data = np.ascontiguousarray(arr).tobytes()
            f.write(data)
            t = header(name, arr)
            # the last one leaves out "length" (ONNX: up to the end of the file)
            set_external(t, filename, offset, None if i == len(arrays) - 1 else len(data))
            protos.append(t)
    return protos


def check_proto_is_valid_onnx(t: TensorProto, arr: Arr) -> None:
    """onnx's own decoder agrees about what the proto holds (so the test protos follow the spec)."""
    got = numpy_helper.to_array(t)
    if arr.dtype == object:
        assert [str(s) for s in got.reshape(-1)] == raw(arr)
        return
    if arr.dtype == np.bool_:
        got = got.astype(np.bool_)
    assert got.shape == arr.shape
    if arr.dtype.kind == "f" and t.float_data:
        # protobuf's Python runtime before 7 (pulled in by flwr) quiets signalling NaNs while
        # decoding float_data, so onnx sees NaN there, not the same payload; ortckpt's own decoder
        # is checked bit-exact elsewhere in this file
        nan = np.isnan(arr)
        assert np.array_equal(np.isnan(got), nan)
        assert got[~nan].tobytes() == np.ascontiguousarray(arr)[~nan].tobytes()
        return
    assert got.tobytes() == np.ascontiguousarray(arr).tobytes()


# -- every storage form, every dtype --------------------------------------------------------------


@pytest.mark.parametrize("form", ["raw", "typed", "numpy_helper", "bytes"])
@pytest.mark.parametrize("key", list(ARRAYS))
def test_storage_forms_round_trip_bit_exactly(key: str, form: str, tmp_path: pathlib.Path) -> None:
    arr = ARRAYS[key]
    name = f"t.{key}"
    if form == "typed":
        proto: Any = typed_proto(name, arr)
    elif form == "numpy_helper":
        if arr.dtype == object:
            proto = numpy_helper.from_array(np.array(arr, dtype=np.str_) if arr.size else arr, name)
        else:
            proto = numpy_helper.from_array(arr, name)
    else:
        proto = raw_proto(name, arr)
    if form != "numpy_helper" or arr.dtype != object:
        check_proto_is_valid_onnx(proto, arr)
    if form == "bytes":
        proto = proto.SerializeToString()

    param = onnx_io.from_tensor_proto(proto, trainable=False)
    assert param.name == name and not param.trainable
    assert param.data_type == data_type_of(arr)
    assert_same(param.data, arr, key)

    path = tmp_path / "c.ckpt"
    onnx_io.save_tensor_protos([proto], [], path)
    state = ortckpt.load(path)
    assert list(state.parameters) == [name]
    p = state.parameters[name]
    assert p.trainable and p.data_type == data_type_of(arr)
    assert_same(p.data, arr, key)


def test_raw_data_is_passed_through_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """raw_data becomes a buffer-backed tensor: no numpy conversion happens on the way to the spec."""
    arr = ARRAYS["bfloat16"]
    proto = raw_proto("w", arr)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("numpy_helper.to_array must not be used for raw_data")

    monkeypatch.setattr(numpy_helper, "to_array", boom)
    param = onnx_io.from_tensor_proto(proto)
    tensor = tensor_of(param)
    assert type(tensor).__name__ == "BufferTensor"
    assert bytes(memoryview(tensor.spec_data("w"))) == proto.raw_data  # type: ignore[arg-type]


def test_typed_fields_follow_ort_for_out_of_range_values() -> None:
    """ORT (static_cast) keeps the low bits of int32_data for narrow types, and reads any non-zero
    int32 as true: so does ortckpt."""
    t = helper.make_tensor("b", TensorProto.BOOL, [3], [0, 1, 1])
    del t.int32_data[:]
    t.int32_data.extend([0, 2, -1])
    assert onnx_io.from_tensor_proto(t).data.view(np.uint8).tolist() == [0, 1, 1]  # stored as 0/1
    t = TensorProto(name="u", data_type=TensorProto.UINT8, dims=[2], int32_data=[256 + 7, -1])
    assert onnx_io.from_tensor_proto(t).data.tolist() == [7, 255]
    t = TensorProto(name="i16", data_type=TensorProto.INT16, dims=[2], int32_data=[40000, -40000])
    assert onnx_io.from_tensor_proto(t).data.tolist() == [40000 - 65536, 65536 - 40000]
    # ... but refuses float16/bfloat16/float8 values that are not a bit pattern ("data overflow")
    t = TensorProto(name="h", data_type=TensorProto.FLOAT16, dims=[1], int32_data=[0xFFFF])
    assert onnx_io.from_tensor_proto(t).data.view(np.uint16).tolist() == [0xFFFF]
    for code, values in (
        (TensorProto.FLOAT16, [0x13C00]),
        (TensorProto.FLOAT16, [-1]),
        (TensorProto.BFLOAT16, [0x10000]),
        (TensorProto.FLOAT8E4M3FN, [1, 256]),
        (TensorProto.FLOAT8E5M2FNUZ, [-1]),
    ):
        t = TensorProto(name="over", data_type=code, dims=[len(values)], int32_data=values)
        with pytest.raises(TensorDataError, match=rf"'over'.*value {values[-1]} in int32_data"):
            onnx_io.from_tensor_proto(t)


# -- malformed TensorProtos ---------------------------------------------------------------------------


def _bad(kind: type[Exception], proto: Any, match: str, **kwargs: Any) -> None:
    with pytest.raises(kind, match=match):
        onnx_io.from_tensor_proto(proto, **kwargs)


def test_malformed_protos_raise_errors_naming_the_tensor() -> None:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3], float_data=[1, 2])
    _bad(TensorDataError, t, r"'w'.*needs 3 values in float_data, found 2")
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3], raw_data=b"\0" * 8)
    _bad(TensorDataError, t, r"'w'.*needs 12 bytes")
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4, float_data=[1])
    _bad(TensorDataError, t, r"'w'.*more than one place \(raw_data, float_data\)")
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1], int64_data=[1])
    _bad(TensorDataError, t, r"'w'.*belong in float_data, found int64_data")
    t = TensorProto(name="w", data_type=TensorProto.COMPLEX64, dims=[2], float_data=[1, 2, 3])
    _bad(TensorDataError, t, r"'w'.*needs 4 values")
    t = TensorProto(name="w4", data_type=TensorProto.INT4, dims=[2], raw_data=b"\x12")
    _bad(TensorDataError, t, r"'w4'.*ONNX data type 22")
    t = TensorProto(name="u", data_type=TensorProto.UNDEFINED, dims=[1])
    _bad(TensorDataError, t, r"'u'.*ONNX data type 0")
    t = TensorProto(name="neg", data_type=TensorProto.FLOAT, dims=[-1])
    _bad(TensorDataError, t, r"'neg'.*negative dimension")
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[1], string_data=[b"\xff"])
    _bad(TensorDataError, t, r"'s'.*not valid UTF-8")
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[1], raw_data=b"x")
    _bad(TensorDataError, t, r"'s'.*string_data, not raw_data")
    t = TensorProto(name="s", data_type=TensorProto.STRING, dims=[2], string_data=[b"x"])
    _bad(TensorDataError, t, r"'s'.*needs 2 strings, found 1")
    t = TensorProto(name="seg", data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4)
    t.segment.begin = 0
    t.segment.end = 1
    _bad(TensorDataError, t, r"'seg'.*segment")
    for dtype, field in ((TensorProto.FLOAT, {}), (TensorProto.FLOAT, {"raw_data": b""})):
        # empty, yet numpy cannot represent the shape: our error, not numpy's ValueError
        t = TensorProto(name="huge", data_type=dtype, dims=[0, 0, 2**62], **field)
        _bad(TensorDataError, t, r"'huge'.*too large for a numpy array")
    _bad(TensorDataError, b"\xff\xff\xff", r"not a serialized onnx.TensorProto")
    _bad(TypeError, 42, r"expected an onnx.TensorProto")


def test_hostile_typed_fields_give_our_errors_from_the_core() -> None:
    """Typed fields are decoded by the core (the 1.15 folder reader's rules): wrong counts, values
    in the wrong field, bit patterns out of range and dims far larger than the values raise
    TensorDataError naming the tensor, without allocating what the dims claim."""
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"data_type": TensorProto.INT8, "dims": [3], "int32_data": [1, 2]},
            r"int8 shape \[3\] needs 3 values in int32_data, found 2",
        ),
        (
            {"data_type": TensorProto.INT64, "dims": [2], "int64_data": [1, 2, 3]},
            r"needs 2 values in int64_data, found 3",
        ),
        (
            {"data_type": TensorProto.UINT32, "dims": [2], "uint64_data": [2**64 - 1]},
            r"needs 2 values in uint64_data, found 1",
        ),
        (
            {"data_type": TensorProto.COMPLEX128, "dims": [1], "double_data": [1.0, 2.0, 3.0]},
            r"needs 2 values in double_data, found 3",
        ),
        (
            {"data_type": TensorProto.FLOAT16, "dims": [2], "int32_data": [1]},
            r"needs 2 values in int32_data, found 1",
        ),
        ({"data_type": TensorProto.INT16, "dims": [5]}, r"needs 5 values in int32_data, found 0"),
        ({"data_type": TensorProto.FLOAT, "dims": [4]}, r"needs 4 values in float_data, found 0"),
        (
            {"data_type": TensorProto.INT8, "dims": [1], "int64_data": [1]},
            r"int8 values belong in int32_data, found int64_data",
        ),
        (
            {"data_type": TensorProto.DOUBLE, "dims": [1], "uint64_data": [1]},
            r"belong in double_data, found uint64_data",
        ),
        (
            {"data_type": TensorProto.BFLOAT16, "dims": [2], "int32_data": [1, 2**31 - 1]},
            r"value 2147483647 in int32_data",
        ),
        (
            {"data_type": TensorProto.FLOAT8E4M3FNUZ, "dims": [1], "int32_data": [-(2**31)]},
            r"value -2147483648 in int32_data",
        ),
        # dims claiming a terabyte against three values: refused by count, nothing allocated
        (
            {"data_type": TensorProto.INT8, "dims": [2**40], "int32_data": [1, 2, 3]},
            r"needs 1099511627776 values in int32_data, found 3",
        ),
        (
            {"data_type": TensorProto.UINT64, "dims": [2**20, 2**20], "uint64_data": [7]},
            r"needs 1099511627776 values",
        ),
    ]
    for fields, match in cases:
        t = TensorProto(name="hostile", **fields)
        with pytest.raises(TensorDataError, match=rf"tensor 'hostile': .*{match}") as caught:
            onnx_io.from_tensor_proto(t)
        assert caught.value.tensor == "hostile"  # type: ignore[attr-defined]
    # int32_data values outside a narrow integer wrap as ORT's conversion does (every 32-bit value)
    t = TensorProto(
        name="i8", data_type=TensorProto.INT8, dims=[4], int32_data=[128, -129, 2**31 - 1, -(2**31)]
    )
    assert onnx_io.from_tensor_proto(t).data.tolist() == [-128, 127, -1, 0]
    t = TensorProto(name="u32", data_type=TensorProto.UINT32, dims=[1], uint64_data=[2**64 - 1])
    assert onnx_io.from_tensor_proto(t).data.tolist() == [2**32 - 1]


def test_typed_fields_decode_as_the_folder_reader_decodes_them(tmp_path: pathlib.Path) -> None:
    """One decoder: a TensorProto's typed field gives the same bytes, and the same refusal, from
    ``onnx_io`` as from an ORT 1.15 folder holding the same message."""
    from tests.helpers.pbseq import pbseq

    protos = [
        TensorProto(name="i8", data_type=TensorProto.INT8, dims=[4], int32_data=[128, -129, 7, -1]),
        TensorProto(name="b", data_type=TensorProto.BOOL, dims=[3], int32_data=[0, 2, -1]),
        TensorProto(name="h", data_type=TensorProto.BFLOAT16, dims=[2], int32_data=[0x3F80, 0xFFFF]),
        TensorProto(name="u32", data_type=TensorProto.UINT32, dims=[2], uint64_data=[2**64 - 1, 5]),
        TensorProto(name="c", data_type=TensorProto.COMPLEX128, dims=[1], double_data=[1.5, -2.0]),
        TensorProto(name="i64", data_type=TensorProto.INT64, dims=[2, 1], int64_data=[-(2**63), 3]),
        _with_packed_float_data(
            TensorProto(name="f", data_type=TensorProto.FLOAT, dims=[2]),
            np.array([0x7FA00001, 1], np.uint32).view(np.float32),  # a signalling NaN keeps its payload
        ),
    ]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "paramtrain_tensors.pbseq").write_bytes(pbseq([p.SerializeToString() for p in protos]))
    loaded = ortckpt.load(folder)
    for proto in protos:
        mine = onnx_io.from_tensor_proto(proto).data
        theirs = loaded.parameters[proto.name].data
        assert (mine.dtype, mine.shape, mine.tobytes()) == (theirs.dtype, theirs.shape, theirs.tobytes())
    bad = TensorProto(name="over", data_type=TensorProto.FLOAT16, dims=[1], int32_data=[0x10000])
    (folder / "paramtrain_tensors.pbseq").write_bytes(pbseq([bad.SerializeToString()]))
    detail = "float16 value 65536 in int32_data is not a bit pattern in 0..65535"
    with pytest.raises(TensorDataError, match=detail):
        onnx_io.from_tensor_proto(bad)
    with pytest.raises(ortckpt.CheckpointError, match=detail):
        ortckpt.load(folder)


# -- external data ------------------------------------------------------------------------------------


def test_external_data_every_numeric_dtype(tmp_path: pathlib.Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    arrays = {f"x.{k}": ARRAYS[k] for k in NUMERIC}
    protos = write_external(model_dir, arrays)
    for proto, (name, arr) in zip(protos, arrays.items()):
        assert_same(onnx_io.from_tensor_proto(proto, base_dir=model_dir).data, arr, name)
    out = tmp_path / "ext.ckpt"
    half = len(protos) // 2
    onnx_io.save_tensor_protos(protos[:half], protos[half:], out, base_dir=model_dir)
    state = ortckpt.load(out)
    assert list(state.parameters) == sorted(arrays)
    for name, arr in arrays.items():
        assert_same(state.parameters[name].data, arr, name)
    assert [p.trainable for p in state.parameters.values()] == [
        name in {t.name for t in protos[:half]} for name in sorted(arrays)
    ]


def test_external_data_in_subdirectory_and_relative_forms(tmp_path: pathlib.Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    arr = np.arange(10, dtype=np.int64)
    (tmp_path / "sub" / "deeper" / "w.bin").write_bytes(b"xyz" + arr.tobytes())
    for location in ("sub/deeper/w.bin", "./sub/deeper/w.bin", "sub/../sub/deeper/w.bin"):
        t = header("w", arr)
        set_external(t, location, 3, arr.nbytes)
        assert_same(onnx_io.from_tensor_proto(t, base_dir=tmp_path).data, arr, location)
    # a symlink that stays inside the base directory is fine
    os.symlink("sub/deeper", tmp_path / "inner_link")
    t = header("w", arr)
    set_external(t, "inner_link/w.bin", 3)
    assert_same(onnx_io.from_tensor_proto(t, base_dir=tmp_path).data, arr, "symlink inside")


def test_external_data_is_memory_mapped(tmp_path: pathlib.Path) -> None:
    arr = np.arange(1000, dtype=np.float32)
    (tmp_path / "w.bin").write_bytes(arr.tobytes())
    t = header("w", arr)
    set_external(t, "w.bin", 0, arr.nbytes)
    param = onnx_io.from_tensor_proto(t, base_dir=tmp_path)
    data = param.data
    assert not data.flags.writeable
    base: Any = data
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    assert isinstance(base, ortckpt._native.MappedFile), type(base)


@pytest.mark.parametrize(
    ("location", "match"),
    [
        ("/etc/passwd", "absolute path"),
        ("../outside.bin", "not a file inside the model's directory"),
        ("model_sub/../../outside.bin", "not a file inside the model's directory"),
        ("escape_link/outside.bin", "not a file inside the model's directory"),
        ("file_link", "not a file inside the model's directory"),
        (".", "not a file inside the model's directory"),
        ("", "is empty"),
        ("a\x00b", "NUL"),
    ],
)
def test_external_data_confined_to_base_dir(tmp_path: pathlib.Path, location: str, match: str) -> None:
    base = tmp_path / "model"
    (base / "model_sub").mkdir(parents=True)
    arr = np.arange(4, dtype=np.float32)
    (tmp_path / "outside.bin").write_bytes(arr.tobytes())
    os.symlink(tmp_path, base / "escape_link")
    os.symlink(tmp_path / "outside.bin", base / "file_link")
    t = header("secret", arr)
    set_external(t, location, 0, arr.nbytes)
    with pytest.raises(ExternalDataError, match=match) as info:
        onnx_io.from_tensor_proto(t, base_dir=base)
    assert "'secret'" in str(info.value)
    with pytest.raises(ExternalDataError, match=match):
        onnx_io.save_tensor_protos([t], [], tmp_path / "x.ckpt", base_dir=base)
    assert not (tmp_path / "x.ckpt").exists()


def test_external_data_bounds_and_errors(tmp_path: pathlib.Path) -> None:
    arr = np.arange(4, dtype=np.float32)  # 16 bytes
    (tmp_path / "w.bin").write_bytes(arr.tobytes())
    path = str(tmp_path / "w.bin")

    def case(offset: int | None, length: int | None, location: str = "w.bin") -> TensorProto:
        t = header("w", arr)
        set_external(t, location, offset, length)
        return t

    _bad(
        ExternalDataError,
        case(20, 16),
        rf"'w'.*offset 20 is past the end of '{path}' \(16 bytes\)",
        base_dir=tmp_path,
    )
    _bad(
        ExternalDataError,
        case(8, 16),
        rf"'w'.*bytes 8\.\.24 of '{path}', which has 16 bytes",
        base_dir=tmp_path,
    )
    _bad(
        TensorDataError,
        case(0, 12),
        r"'w'.*needs 16 bytes, its external data .* is 12 bytes",
        base_dir=tmp_path,
    )
    _bad(TensorDataError, case(4, None), r"'w'.*needs 16 bytes.* is 12 bytes", base_dir=tmp_path)
    _bad(ExternalDataError, case(0, 16, "missing.bin"), r"'w'.*missing\.bin.*is missing", base_dir=tmp_path)
    _bad(ExternalDataError, case(0, 16), r"'w'.*no base directory")
    bad = case(0, 16)
    bad.external_data[1].value = "0x10"
    _bad(ExternalDataError, bad, r"'w'.*offset '0x10' is not an integer", base_dir=tmp_path)
    bad.external_data[1].value = "-1"
    _bad(ExternalDataError, bad, r"'w'.*offset -1 is negative", base_dir=tmp_path)
    # a location that is not UTF-8 (protobuf hands it over as bytes): our error, not a TypeError
    not_text = TensorProto()
    not_text.ParseFromString(case(0, 16, "w.biX").SerializeToString().replace(b"w.biX", b"w.bi\xff"))
    _bad(ExternalDataError, not_text, r"'w'.*location b'w\.bi\\xff' is not UTF-8 text", base_dir=tmp_path)
    s = TensorProto(name="s", data_type=TensorProto.STRING, dims=[1])
    set_external(s, "w.bin", 0, 1)
    _bad(TensorDataError, s, r"'s'.*cannot be stored externally", base_dir=tmp_path)
    both = case(0, 16)
    both.raw_data = arr.tobytes()
    _bad(TensorDataError, both, r"'w'.*raw_data, external data", base_dir=tmp_path)
    # a short file, seen only after the file shrank
    (tmp_path / "w.bin").write_bytes(arr.tobytes()[:10])
    _bad(ExternalDataError, case(0, 16), r"'w'.*bytes 0\.\.16 of .*which has 10 bytes", base_dir=tmp_path)
    # an empty file works for an empty tensor
    (tmp_path / "empty.bin").write_bytes(b"")
    e = header("e", np.zeros((0, 2), np.float32))
    set_external(e, "empty.bin", 0, 0)
    assert onnx_io.from_tensor_proto(e, base_dir=tmp_path).data.shape == (0, 2)


# -- save_tensor_protos: names, nominal, threshold ----------------------------------------------------


def test_duplicate_names(tmp_path: pathlib.Path) -> None:
    a = numpy_helper.from_array(np.ones(2, np.float32), "same")
    b = numpy_helper.from_array(np.ones(3, np.int64), "same")
    c = numpy_helper.from_array(np.ones(3, np.int64), "other")
    with pytest.raises(DuplicateNameError, match=r"'same' \(trainable and frozen\)"):
        onnx_io.save_tensor_protos([a], [c, b], tmp_path / "d.ckpt")
    with pytest.raises(DuplicateNameError, match=r"'same' \(frozen\)"):
        onnx_io.save_tensor_protos([], [b.SerializeToString(), b], tmp_path / "d.ckpt")
    with pytest.raises(DuplicateNameError, match=r"'same' \(trainable\)"):
        onnx_io.save_tensor_protos([a, a], [], tmp_path / "d.ckpt")
    assert not (tmp_path / "d.ckpt").exists()


def test_argument_types(tmp_path: pathlib.Path) -> None:
    a = numpy_helper.from_array(np.ones(2, np.float32), "a")
    with pytest.raises(TypeError, match="trainable must be a list"):
        onnx_io.save_tensor_protos(a.SerializeToString(), [], tmp_path / "x.ckpt")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="external_data_threshold must be an int"):
        onnx_io.save_tensor_protos([a], [], tmp_path / "x.ckpt", external_data_threshold=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must not be negative"):
        onnx_io.save_tensor_protos([a], [], tmp_path / "x.ckpt", external_data_threshold=-1)
    # generators and tuples are fine
    onnx_io.save_tensor_protos((p for p in [a]), (), tmp_path / "x.ckpt")
    assert list(ortckpt.load(tmp_path / "x.ckpt").parameters) == ["a"]


def test_nominal_writes_names_and_types_only(tmp_path: pathlib.Path) -> None:
    """Same content as ORT's save_checkpoint(..., nominal_checkpoint=True) in data/nominal_protos.ckpt."""
    a = numpy_helper.from_array(np.ones((2, 3), np.float32), "a.weight")
    b = numpy_helper.from_array(np.arange(3, dtype=np.int64), "b.int")
    c = numpy_helper.from_array(np.ones(2, np.float64), "c.double")
    path = tmp_path / "nominal.ckpt"
    onnx_io.save_tensor_protos([a], [b, c], path, nominal=True)
    ours = ortckpt.load(path)
    ort = ortckpt.load(DATA / "nominal_protos.ckpt")
    for state in (ours, ort):
        assert state.is_nominal
    assert [
        (n, p.data_type, p.trainable, p.shape, p.nbytes, p.is_nominal) for n, p in ours.parameters.items()
    ] == [(n, p.data_type, p.trainable, p.shape, p.nbytes, p.is_nominal) for n, p in ort.parameters.items()]
    assert [(n, p.data_type, p.trainable) for n, p in ours.parameters.items()] == [
        ("a.weight", 1, True),
        ("b.int", 7, False),
        ("c.double", 11, False),
    ]
    with pytest.raises(CheckpointError, match="nominal"):
        ours.parameters["a.weight"].data  # noqa: B018


def test_nominal_does_not_read_tensor_data(tmp_path: pathlib.Path) -> None:
    """Nominal checkpoints need names and types only: external files are not opened at all."""
    t = header("w", np.zeros(4, np.float32))
    set_external(t, "does_not_exist.bin", 0, 16)
    onnx_io.save_tensor_protos([t], [], tmp_path / "n.ckpt", nominal=True, base_dir=tmp_path)
    state = ortckpt.load(tmp_path / "n.ckpt")
    assert state.is_nominal and state.parameters["w"].data_type == _dtypes.FLOAT
    bad_type = TensorProto(name="u", data_type=TensorProto.UINT4, dims=[2])
    with pytest.raises(TensorDataError, match="'u'"):
        onnx_io.save_tensor_protos([bad_type], [], tmp_path / "n2.ckpt", nominal=True)


def test_external_data_threshold_moves_data_out(tmp_path: pathlib.Path) -> None:
    big = np.arange(4096, dtype=np.float32)
    protos = [
        numpy_helper.from_array(big, "big"),
        numpy_helper.from_array(np.arange(3, dtype=np.int64), "small"),
    ]
    path = tmp_path / "t.ckpt"
    onnx_io.save_tensor_protos(protos[:1], protos[1:], path, external_data_threshold=1024)
    assert os.path.exists(ortckpt.external_data_path(path))
    assert path.stat().st_size < big.nbytes
    state = ortckpt.load(path)
    assert state.has_external_data
    assert_same(state.parameters["big"].data, big)
    assert state.parameters["small"].data.tolist() == [0, 1, 2]
    onnx_io.save_tensor_protos(protos[:1], protos[1:], tmp_path / "inline.ckpt")
    assert not os.path.exists(ortckpt.external_data_path(tmp_path / "inline.ckpt"))
    assert not ortckpt.load(tmp_path / "inline.ckpt").has_external_data


# -- save_from_onnx -------------------------------------------------------------------------------------


MODEL_ARRAYS = {
    "fc.weight": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
    "fc.bias": np.array([0.5, -0.25, 0.0, 1.0], dtype=np.float32),
    "emb.f64": np.array([[1.0, 2.0]], dtype=np.float64),
    "half": np.array([1.5, -2.0], dtype=np.float16),
    "bf": np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16),
    "steps": np.arange(5, dtype=np.int64),
    "mask": np.array([True, False]),
    "vocab": np.array(["a", "bé"], dtype=object),
}
DEFAULT_TRAINABLE = {"fc.weight", "fc.bias", "emb.f64", "half", "bf"}


def check_model_checkpoint(
    path: pathlib.Path, trainable: set[str], arrays: dict[str, Arr] = MODEL_ARRAYS
) -> None:
    state = ortckpt.load(path)
    assert sorted(state.parameters) == sorted(arrays)
    assert set(state.trainable_parameters) == trainable
    for name, arr in arrays.items():
        assert_same(state.parameters[name].data, arr, name)


def test_save_from_onnx_model_proto_and_path(tmp_path: pathlib.Path) -> None:
    model = make_model([raw_proto(n, a) for n, a in MODEL_ARRAYS.items()])
    onnx_io.save_from_onnx(model, tmp_path / "a.ckpt")
    check_model_checkpoint(tmp_path / "a.ckpt", DEFAULT_TRAINABLE)
    onnx.save(model, tmp_path / "m.onnx")
    onnx_io.save_from_onnx(tmp_path / "m.onnx", tmp_path / "b.ckpt", trainable=["fc.weight", "steps"])
    check_model_checkpoint(tmp_path / "b.ckpt", {"fc.weight", "steps"})
    onnx_io.save_from_onnx(str(tmp_path / "m.onnx"), tmp_path / "c.ckpt", trainable=[])
    check_model_checkpoint(tmp_path / "c.ckpt", set())
    # typed-field initializers too
    typed = make_model([typed_proto(n, a) for n, a in MODEL_ARRAYS.items()])
    onnx_io.save_from_onnx(typed, tmp_path / "d.ckpt")
    check_model_checkpoint(tmp_path / "d.ckpt", DEFAULT_TRAINABLE)


def test_save_from_onnx_errors(tmp_path: pathlib.Path) -> None:
    model = make_model([raw_proto(n, a) for n, a in MODEL_ARRAYS.items()])
    with pytest.raises(ValueError, match=r"not initializers of the model: \['nope', 'x'\]"):
        onnx_io.save_from_onnx(model, tmp_path / "e.ckpt", trainable=["fc.weight", "nope", "x"])
    with pytest.raises(TypeError, match="not a single string"):
        onnx_io.save_from_onnx(model, tmp_path / "e.ckpt", trainable="fc.weight")
    dup = make_model([raw_proto("w", MODEL_ARRAYS["fc.bias"]), raw_proto("w", MODEL_ARRAYS["fc.bias"])])
    with pytest.raises(DuplicateNameError, match="two initializers named 'w'"):
        onnx_io.save_from_onnx(dup, tmp_path / "e.ckpt")
    with pytest.raises(TypeError, match="ModelProto or a path"):
        onnx_io.save_from_onnx(42, tmp_path / "e.ckpt")  # type: ignore[arg-type]
    assert not (tmp_path / "e.ckpt").exists()


def test_save_from_onnx_with_onnx_external_data(tmp_path: pathlib.Path) -> None:
    """A model saved by onnx itself with its initializers in an external file."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    model = make_model([raw_proto(n, a) for n, a in MODEL_ARRAYS.items()])
    onnx.save_model(
        model,
        model_dir / "m.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    on_disk = onnx.load(model_dir / "m.onnx", load_external_data=False)
    assert sum(t.data_location == TensorProto.EXTERNAL for t in on_disk.graph.initializer) >= 6
    onnx_io.save_from_onnx(model_dir / "m.onnx", tmp_path / "x.ckpt")
    check_model_checkpoint(tmp_path / "x.ckpt", DEFAULT_TRAINABLE)
    # a ModelProto with external references needs base_dir
    with pytest.raises(ExternalDataError, match="no base directory"):
        onnx_io.save_from_onnx(on_disk, tmp_path / "y.ckpt")
    onnx_io.save_from_onnx(on_disk, tmp_path / "y.ckpt", base_dir=model_dir)
    check_model_checkpoint(tmp_path / "y.ckpt", DEFAULT_TRAINABLE)
    # the model file moved away from its data: a clear error naming tensor and file
    os.rename(model_dir / "m.onnx", tmp_path / "m.onnx")
    with pytest.raises(ExternalDataError, match=r"m\.onnx\.data.*is missing"):
        onnx_io.save_from_onnx(tmp_path / "m.onnx", tmp_path / "z.ckpt")


def test_save_from_onnx_maps_instead_of_reading(tmp_path: pathlib.Path) -> None:
    """The external file is a 64 GiB sparse file: reading it (or even a large part of it) would
    blow the memory and time budget; mapping it touches only the pages the tensors use."""
    big = tmp_path / "huge.bin"
    size = 2**36
    a = np.arange(1024, dtype=np.float32)
    b = np.arange(7, dtype=np.int64)
    c = np.array([1.0, -1.0], dtype=np.float64)
    try:
        with open(big, "wb") as f:
            f.truncate(size)
            f.seek(0)
            f.write(a.tobytes())
            f.seek(2**35 + 3)
            f.write(b.tobytes())
            f.seek(size - c.nbytes)
            f.write(c.tobytes())
    except OSError as exc:  # pragma: no cover - file systems without sparse files
        pytest.skip(f"cannot make a sparse file here: {exc}")
    if os.stat(big).st_blocks * 512 > 2**30:  # pragma: no cover
        pytest.skip("the file system does not keep the file sparse")
    ta, tb, tc = header("a", a), header("b", b), header("c", c)
    set_external(ta, "huge.bin", 0, a.nbytes)
    set_external(tb, "huge.bin", 2**35 + 3, b.nbytes)
    set_external(tc, "huge.bin", size - c.nbytes)  # no length: to the end of the file
    model = make_model([ta, tb, tc])
    onnx.save(model, tmp_path / "m.onnx")

    opened: list[str] = []
    real_mapped_file = ortckpt._native.MappedFile

    real_dir = ortckpt._native.ExternalDataDir

    def counting(path: str) -> Any:
        opened.append(path)
        return real_mapped_file(path)

    class CountingDir:
        def __init__(self, path: str) -> None:
            self.inner = real_dir(path)

        def map(self, location: str) -> Any:
            opened.append(location)
            return self.inner.map(location)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(onnx_io._native, "MappedFile", counting)
        mp.setattr(onnx_io._native, "ExternalDataDir", CountingDir)
        onnx_io.save_from_onnx(tmp_path / "m.onnx", tmp_path / "h.ckpt")
    finally:
        mp.undo()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    assert (after - before) * scale < 256 * 2**20
    # the model file itself (opened through the core: regular files only), then one mapping shared
    # by the three tensors (opened inside the model's directory)
    assert opened == [str(tmp_path / "m.onnx"), "huge.bin"]
    state = ortckpt.load(tmp_path / "h.ckpt")
    assert_same(state.parameters["a"].data, a)
    assert_same(state.parameters["b"].data, b)
    assert_same(state.parameters["c"].data, c)
    assert set(state.trainable_parameters) == {"a", "c"}


# -- load_into_model ------------------------------------------------------------------------------------


def _ckpt(
    tmp_path: pathlib.Path, trainable: dict[str, Any], frozen: dict[str, Any] | None = None
) -> pathlib.Path:
    path = tmp_path / "ck.ckpt"
    ortckpt.save(CheckpointState(trainable, frozen=frozen), path)
    return path


def test_load_into_model_replaces_matching_initializers_only(tmp_path: pathlib.Path) -> None:
    ck = _ckpt(
        tmp_path,
        {"a": np.array([1.0, 2.0], np.float32), "extra": np.ones(3, np.float32)},
        frozen={"b": np.array([[1, 2, 3]], np.int64)},
    )
    a = helper.make_tensor("a", TensorProto.FLOAT, [2], [9, 9])  # float_data form
    a.doc_string = "old doc"
    b = numpy_helper.from_array(np.zeros(5, np.float32), "b")  # other dtype and shape
    d = numpy_helper.from_array(np.zeros(3, np.int32), "d")  # not in the checkpoint
    e = header("e", np.zeros(4, np.float32))
    set_external(e, "elsewhere.bin", 0, 16)  # not in the checkpoint, external: untouched
    model = make_model([a, b, d, e])
    before = model.SerializeToString()

    out = onnx_io.load_into_model(ck, model)
    assert model.SerializeToString() == before, "the input model must not change"
    inits = {t.name: t for t in out.graph.initializer}
    assert [t.name for t in out.graph.initializer] == ["a", "b", "d", "e"]
    # exactly the TensorProtos ORT 1.19.2 produced for these inputs (name, dtype, dims, raw_data)
    assert inits["a"].SerializeToString() == b"\x08\x02\x10\x01B\x01aJ\x08\x00\x00\x80?\x00\x00\x00@"
    assert inits["b"].SerializeToString() == (
        b"\x08\x01\x08\x03\x10\x07B\x01bJ\x18" + np.array([1, 2, 3], np.int64).tobytes()
    )
    assert inits["d"] == d and inits["e"] == e
    assert out.graph.node == model.graph.node and out.ir_version == model.ir_version
    assert out.opset_import == model.opset_import

    # the same from a CheckpointState, and from a model path
    state = ortckpt.load(ck)
    assert onnx_io.load_into_model(state, model) == out
    onnx.save(model, tmp_path / "m.onnx")
    assert onnx_io.load_into_model(str(ck), tmp_path / "m.onnx") == out


def test_load_into_model_tensor_forms_match_ort(tmp_path: pathlib.Path) -> None:
    """Byte strings ORT 1.19.2's get_model_after_loading_checkpoint returned for an ortckpt checkpoint."""
    ck = _ckpt(
        tmp_path,
        {
            "e_empty": np.zeros((0, 3), np.float32),
            "f_scalar": np.array(2.5, np.float32),
            "h16": np.array([1, 2], np.float16),
            "bf": np.array([1, 2], ml_dtypes.bfloat16),
            "s": np.array(["ab", "c"], dtype=object),
            "f8": np.array([1, 2], ml_dtypes.float8_e4m3fn),
            "c64": np.array([1 + 2j], np.complex64),
        },
    )
    names = ["e_empty", "f_scalar", "h16", "bf", "s", "f8", "c64"]
    model = make_model([numpy_helper.from_array(np.zeros(1, np.float32), n) for n in names])
    out = {t.name: t.SerializeToString() for t in onnx_io.load_into_model(ck, model).graph.initializer}
    assert out == {
        "e_empty": b"\x08\x00\x08\x03\x10\x01B\x07e_emptyJ\x00",
        "f_scalar": b"\x10\x01B\x08f_scalarJ\x04\x00\x00 @",
        "h16": b"\x08\x02\x10\nB\x03h16J\x04\x00<\x00@",
        "bf": b"\x08\x02\x10\x10B\x02bfJ\x04\x80?\x00@",
        "s": b"\x08\x02\x10\x082\x02ab2\x01cB\x01s",
        "f8": b"\x08\x02\x10\x11B\x02f8J\x028@",
        "c64": b"\x08\x01\x10\x0eB\x03c64J\x08\x00\x00\x80?\x00\x00\x00@",
    }


def test_load_into_model_refuses_nominal_and_unnamed(tmp_path: pathlib.Path) -> None:
    nominal = tmp_path / "n.ckpt"
    onnx_io.save_tensor_protos(
        [numpy_helper.from_array(np.ones(2, np.float32), "zzz")], [], nominal, nominal=True
    )
    model = make_model([numpy_helper.from_array(np.ones(2, np.float32), "a")])
    with pytest.raises(CheckpointError, match="nominal"):
        onnx_io.load_into_model(nominal, model)  # even though no name matches: ORT refuses it too
    unnamed = TensorProto(data_type=TensorProto.FLOAT, dims=[1], raw_data=b"\0" * 4)
    with pytest.raises(ValueError, match="initializer #1 has no name"):
        onnx_io.load_into_model(
            _ckpt(tmp_path, {"x": np.ones(1, np.float32)}),
            make_model([numpy_helper.from_array(np.ones(2, np.float32), "a"), unnamed]),
        )
    with pytest.raises(TypeError, match="ModelProto or a path"):
        onnx_io.load_into_model(_ckpt(tmp_path, {}), b"not a model")  # type: ignore[arg-type]


def test_load_into_model_with_external_data_checkpoint(tmp_path: pathlib.Path) -> None:
    big = np.arange(2048, dtype=np.float32)
    path = tmp_path / "e.ckpt"
    ortckpt.save(CheckpointState({"big": big}), path, external_data_threshold=0)
    assert ortckpt.load(path).has_external_data
    out = onnx_io.load_into_model(path, make_model([numpy_helper.from_array(np.zeros(1, np.float32), "big")]))
    (init,) = out.graph.initializer
    assert init.raw_data == big.tobytes() and list(init.dims) == [2048]
    assert init.data_location == TensorProto.DEFAULT and not init.external_data


# -- Parameter -> TensorProto --------------------------------------------------------------------------


@pytest.mark.parametrize("key", list(ARRAYS))
def test_to_tensor_proto(key: str) -> None:
    arr = ARRAYS[key]
    param = ortckpt.Parameter(f"p.{key}", arr, trainable=False)
    proto = onnx_io.to_tensor_proto(param)
    assert proto.name == f"p.{key}" and proto.data_type == data_type_of(arr)
    assert list(proto.dims) == list(arr.shape)
    if arr.dtype == object:
        assert not proto.HasField("raw_data")
        assert [s.decode("utf-8") for s in proto.string_data] == raw(arr)
    else:
        assert proto.HasField("raw_data") and proto.raw_data == arr.tobytes()
        assert not any(len(getattr(proto, f)) for f in ("float_data", "int32_data", "int64_data"))
    check_proto_is_valid_onnx(proto, arr)
    back = onnx_io.from_tensor_proto(proto)
    assert_same(back.data, arr, key)


def test_to_tensor_proto_of_loaded_and_nominal_parameters(tmp_path: pathlib.Path) -> None:
    path = _ckpt(tmp_path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    proto = onnx_io.to_tensor_proto(ortckpt.load(path).parameters["w"])
    assert proto.raw_data == np.arange(6, dtype=np.float32).tobytes() and list(proto.dims) == [2, 3]
    nominal = tmp_path / "n.ckpt"
    onnx_io.save_tensor_protos([proto], [], nominal, nominal=True)
    with pytest.raises(CheckpointError, match="'w' is nominal"):
        onnx_io.to_tensor_proto(ortckpt.load(nominal).parameters["w"])
    with pytest.raises(TypeError, match="expected a Parameter"):
        onnx_io.to_tensor_proto(proto)  # type: ignore[arg-type]


# -- public API ---------------------------------------------------------------------------------------


def test_exported_from_package() -> None:
    for name in (
        "save_tensor_protos",
        "save_from_onnx",
        "load_into_model",
        "from_tensor_proto",
        "to_tensor_proto",
    ):
        assert getattr(ortckpt, name) is getattr(onnx_io, name), name
        assert name in ortckpt.__all__
