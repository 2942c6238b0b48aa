"""Hostile bytes raise ortckpt's own exceptions, never another library's (issue 32, item 7): each
input below raised TypeError, a plain ValueError or a protobuf DecodeError from numpy, ast,
protobuf or the buffer protocol before. Every one is now a ``CheckpointError`` subclass naming the
tensor or file."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _ours(call: Callable[[], Any], kind: type[CheckpointError], *words: str) -> None:
    with pytest.raises(CheckpointError) as info:
        call()
    assert isinstance(info.value, kind), repr(info.value)
    for word in words:
        assert word in str(info.value), str(info.value)


def _npy(header: str) -> bytes:
    text = header.encode("latin1")
    text += b" " * ((16 - (10 + len(text) + 1) % 16) % 16) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


@pytest.mark.parametrize(
    ("header", "shape", "words"),
    [
        ("{[1]: 2}", (2,), "malformed .npy header"),  # TypeError inside ast.literal_eval
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1180591620717411303424)}",
            (0, 2**70),
            "too large",
        ),
        (f"{{'descr': '<f4', 'fortran_order': False, 'shape': {(1,) * 65}}}", (1,) * 65, "65 dims"),
    ],
    ids=["unhashable-key", "zero-size-huge-dims", "65-dims"],
)
def test_npy_headers_in_flower_records(header: str, shape: tuple[int, ...], words: str) -> None:
    pytest.importorskip("flwr.app", reason="needs flwr (ortckpt[flower])")
    from flwr.app import Array, ArrayRecord

    from ortckpt.flower import from_arrayrecord

    data = _npy(header) + (b"\x00" * 4 if len(shape) == 65 else b"")
    record = ArrayRecord({"w": Array(dtype="float32", shape=shape, stype="numpy.ndarray", data=data)})
    _ours(lambda: from_arrayrecord(record), ortckpt.ConversionError, "'w'", words)


def test_zero_size_tensors_with_huge_dims_in_safetensors_and_npz(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}}).encode()
    path = tmp_path / "z.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    _ours(lambda: ortckpt.from_safetensors(path), ortckpt.ConversionError, str(path), "'w'", "too large")
    npz = tmp_path / "z.npz"
    with zipfile.ZipFile(npz, "w") as z:
        z.writestr(
            "w.npy", _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 8), }")
        )
    _ours(lambda: ortckpt.from_npz(npz), ortckpt.ConversionError, "'w'", "too large")


def _external_tensor(data_type: int = TensorProto.FLOAT) -> onnx.TensorProto:
    t = helper.make_tensor("w", TensorProto.FLOAT, [2], b"\x00" * 8, raw=True)
    t.ClearField("raw_data")
    t.data_type = data_type
    t.data_location = TensorProto.EXTERNAL
    entry = t.external_data.add()
    entry.key, entry.value = "location", "PLACEHOLDER"
    return t


def test_external_initializers_of_unknown_type_and_non_utf8_locations(tmp_path: Path) -> None:
    (tmp_path / "w.bin").write_bytes(b"\x00" * 8)
    t999 = _external_tensor(999)
    t999.external_data[0].value = "w.bin"
    _ours(lambda: ortckpt.from_tensor_proto(t999, base_dir=tmp_path), ortckpt.TensorDataError, "999")
    model = helper.make_model(helper.make_graph([], "g", [], [], [t999]))
    (tmp_path / "m999.onnx").write_bytes(model.SerializeToString())
    _ours(
        lambda: ortckpt.onnx_io.save_from_onnx(tmp_path / "m999.onnx", tmp_path / "o.ckpt"),
        ortckpt.TensorDataError,
        "999",
    )
    # a location that is not UTF-8: protobuf refuses the message (DecodeError, which escaped)
    bad = helper.make_model(helper.make_graph([], "g", [], [], [_external_tensor()]))
    raw = bad.SerializeToString().replace(b"PLACEHOLDER", b"\xff\xfe\xfdLACEHOLDE")
    (tmp_path / "bad.onnx").write_bytes(raw)
    _ours(
        lambda: ortckpt.onnx_io.save_from_onnx(tmp_path / "bad.onnx", tmp_path / "o.ckpt"),
        ortckpt.ModelError,
        "not an ONNX model",
    )
    one = _external_tensor().SerializeToString().replace(b"PLACEHOLDER", b"\xff\xfe\xfdLACEHOLDE")
    _ours(lambda: ortckpt.from_tensor_proto(one, base_dir=tmp_path), ortckpt.TensorDataError, "TensorProto")


def test_strided_buffers_are_read_in_order() -> None:
    """A non-contiguous memoryview: ValueError / TypeError from the buffer protocol before."""
    data = ortckpt.CheckpointState({"w": np.arange(4, dtype=np.float32)}).to_bytes()
    doubled = np.repeat(np.frombuffer(data, np.uint8), 2)[::2]  # the same bytes, strided
    state = ortckpt.load_bytes(memoryview(doubled))
    np.testing.assert_array_equal(state.parameters["w"].data, np.arange(4, dtype=np.float32))


def test_training_models_with_shapes_numpy_cannot_hold(tmp_path: Path) -> None:
    reference = ortckpt.to_nominal(ortckpt.CheckpointState({"w": np.ones(2, np.float32)}))
    for dims, values, words in (([0, 2**62, 2**62], 0, "too large"), ([1] * 70, 1, "70 dims")):
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("w", "w_grad")]
        path = tmp_path / "train.onnx"
        path.write_bytes(helper.make_model(helper.make_graph([], "g", inputs, [])).SerializeToString())
        _ours(
            lambda p=path, n=values: ortckpt.parameters_from_buffer(
                np.ones(n, np.float32), reference, p, trainable_only=False
            ),
            ortckpt.ConversionError,
            words,
        )
    good = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("w", "w_grad")]
    path.write_bytes(helper.make_model(helper.make_graph([], "g", good, [])).SerializeToString())
    strided = memoryview(np.arange(4, dtype=np.float32))[::2]
    state = ortckpt.parameters_from_buffer(
        strided, ortckpt.CheckpointState({"w": np.ones(2, np.float32)}), path
    )
    np.testing.assert_array_equal(state.parameters["w"].data, [0.0, 2.0])


def test_chained_urls_find_the_data_beside_the_file_not_the_archive(tmp_path: Path) -> None:
    """``zip://a.ckpt::file:///x/arch.zip``: the external data is ``a.ckpt.data`` in the archive.
    Before: ``.data`` was appended to the whole URL, so it was looked for in ``arch.zip.data``."""
    pytest.importorskip("fsspec")
    values = np.arange(100, dtype=np.float32)
    ortckpt.save(ortckpt.CheckpointState({"w": values}), tmp_path / "a.ckpt", external_data_threshold=0)
    with zipfile.ZipFile(tmp_path / "arch.zip", "w") as z:
        z.write(tmp_path / "a.ckpt", "a.ckpt")
        z.write(tmp_path / "a.ckpt.data", "a.ckpt.data")
    url = f"zip://a.ckpt::file://{tmp_path}/arch.zip"
    from ortckpt._sources import open_state

    state = open_state(url)
    np.testing.assert_array_equal(state.parameters["w"].data, values)
    report = ortckpt.average([url])
    np.testing.assert_array_equal(report.state.parameters["w"].data, values)
