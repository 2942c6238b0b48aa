"""ORT adapter files against the newest onnxruntime from PyPI (side venv made by
``scripts/setup_ort_env.sh --release current``, ``$ORTCKPT_ORT_CURRENT_VENV``; skipped with the
reason when it cannot be made, failed on CI): ORT reads ortckpt's adapters with the same names,
shapes, dtypes and values; a model run with an ortckpt adapter active gives what feeding the same
values directly gives; adapters ORT writes load in ortckpt bit-exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers.ort import import_ortckpt, ort_venv_python, run_module

ortckpt = import_ortckpt()

RNG = np.random.default_rng(19)

# Several dtypes ORT's adapter reader maps, one element, and an empty tensor. (ORT refuses bool,
# complex and scalar parameters; so does ortckpt: tests/deploy/test_adapters.py.)
OURS = {
    "lora_A": RNG.standard_normal((3, 2)).astype(np.float32),
    "half": RNG.standard_normal((4, 5)).astype(np.float16),
    "double": RNG.standard_normal(3),
    "counts": np.array([[-(2**62), 5, 2**40]], dtype=np.int64),
    "bytes": np.arange(7, dtype=np.uint8),
    "signed": np.array([-128, 0, 127], dtype=np.int8),
    "one": np.array([2.5], dtype=np.float32),
    "wide": np.array([2**63 - 1, 0], dtype=np.uint64),
    "empty": np.zeros((0, 3), dtype=np.float32),
}

THEIRS = {
    "w.lora_B": RNG.standard_normal((2, 3)).astype(np.float32),
    "h": RNG.standard_normal((5,)).astype(np.float16),
    "i": np.array([1, -2, 3], dtype=np.int32),
    "s": np.array([7], dtype=np.int64),
}


def _model(path: Path, weight: np.ndarray[Any, Any]) -> None:
    """y = x·W + (x·lora_A)·lora_B: a base weight and a LoRA pair that are model inputs with zero
    defaults (initializers of the same names), the shape of model ORT's Multi-LoRA serves."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    a = helper.make_tensor_value_info("lora_A", TensorProto.FLOAT, [3, 2])
    b = helper.make_tensor_value_info("lora_B", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["base"]),
        helper.make_node("MatMul", ["x", "lora_A"], ["down"]),
        helper.make_node("MatMul", ["down", "lora_B"], ["up"]),
        helper.make_node("Add", ["base", "up"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(weight, "W"),
        numpy_helper.from_array(np.zeros((3, 2), np.float32), "lora_A"),
        numpy_helper.from_array(np.zeros((2, 3), np.float32), "lora_B"),
    ]
    graph = helper.make_graph(nodes, "lora", [x, a, b], [y], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())


def _write_accepted_mutants(work: Path) -> None:
    """Every single-byte change of ortckpt's adapter that ortckpt still accepts (a different name,
    type, shape, value or version), into ``work/mutants`` for ORT to read."""
    data = (work / "ours.onnx_adapter").read_bytes()
    (work / "mutants").mkdir()
    for at in range(len(data)):
        for value in {0, 1, 0x40, 0xFF, data[at] ^ 0x10}:
            changed = bytearray(data)
            changed[at] = value
            try:  # accepted: opened, and every value read (from_adapter is lazy)
                for param in ortckpt.from_adapter(bytes(changed)).parameters.values():
                    assert param.data.shape == param.shape
            except ortckpt.CheckpointError:
                continue
            (work / "mutants" / f"{at}_{value}.onnx_adapter").write_bytes(changed)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = ort_venv_python("current")
    work = tmp_path_factory.mktemp("ort_adapters")
    state = ortckpt.CheckpointState(OURS)
    assert ortckpt.to_adapter(
        state, work / "ours.onnx_adapter", adapter_version=3, model_version=-4
    ) == sorted(OURS)
    weight = RNG.standard_normal((3, 3)).astype(np.float32)
    lora = {"W": weight, "lora_A": OURS["lora_A"], "lora_B": RNG.standard_normal((2, 3)).astype(np.float32)}
    written = ortckpt.to_adapter(
        ortckpt.CheckpointState(lora), work / "model_adapter.onnx_adapter", parameters="lora_*"
    )
    assert written == ["lora_A", "lora_B"]
    _model(work / "model.onnx", weight)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.savez(work / "feeds.npz", x=x, lora_A=lora["lora_A"], lora_B=lora["lora_B"])
    np.savez(work / "theirs_in.npz", **THEIRS)
    _write_accepted_mutants(work)
    run_module(python, "tests.ort.adapter_runner", str(work), timeout=600)
    return work


def test_ort_reads_ortckpt_adapters(work: Path) -> None:
    meta = json.loads((work / "read.json").read_text())
    assert (meta["format_version"], meta["adapter_version"], meta["model_version"]) == (1, 3, -4)
    read = dict(np.load(work / "read.npz"))
    assert sorted(read) == sorted(OURS)
    for name, expected in OURS.items():
        got = read[name]
        assert meta["dtypes"][name] == str(expected.dtype), name
        assert tuple(meta["shapes"][name]) == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name


def test_active_adapter_gives_the_direct_feed_output(work: Path) -> None:
    outputs = np.load(work / "outputs.npz")
    assert outputs["direct"].shape == (2, 3)
    np.testing.assert_array_equal(outputs["with_adapter"], outputs["direct"])
    # The adapter's values made a difference: without it (zero LoRA defaults) the output differs.
    assert not np.array_equal(outputs["with_adapter"], outputs["without"])


def test_ort_written_adapters_load_bit_exact(work: Path) -> None:
    state = ortckpt.from_adapter(work / "theirs.onnx_adapter")
    assert set(state.parameters) == set(THEIRS)
    for name, expected in THEIRS.items():
        got = state.parameters[name].data
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert got.tobytes() == expected.tobytes(), name
    assert (state.properties["adapter_version"], state.properties["model_version"]) == (7, 11)
    # ortckpt writes back what ORT wrote: the same contents, read by ORT's own format again.
    again = ortckpt.from_adapter(ortckpt.deploy.adapters._serialize(state, None, None, None)[0])
    assert again.to_numpy().keys() == state.to_numpy().keys()
    assert all(again.to_numpy()[n].tobytes() == a.tobytes() for n, a in state.to_numpy().items())


def test_every_changed_file_ortckpt_accepts_ort_reads_the_same(work: Path) -> None:
    """ortckpt accepts no adapter ONNX Runtime refuses, and reads each as ORT does."""
    seen = json.loads((work / "mutants.json").read_text())
    assert len(seen) > 100, len(seen)  # value bytes alone give many
    for name, theirs in seen.items():
        assert isinstance(theirs, dict), f"{name}: ortckpt accepts it, ORT refuses it: {theirs}"
        ours = ortckpt.from_adapter(work / "mutants" / name).parameters
        assert set(ours) == set(theirs), name
        for param, (ort_type, shape, values) in theirs.items():
            ours_type = f"tensor({TensorProto.DataType.Name(ours[param].data_type).lower()})"
            assert (ours_type, list(ours[param].shape)) == (ort_type, shape), (name, param)
            # (None: a float8 type, whose values ORT's Python API cannot show)
            assert values is None or ours[param].data.tobytes().hex() == values, (name, param)
