"""``export_for_inference`` against ORT's own ``Module.export_model_for_inferencing``.

ORT 1.19.2 (side venv ``$ORTCKPT_ORT_VENV``) makes training artifacts for two small models (one
with a frozen parameter and a constant, one with several outputs), trains two steps and exports
inference models for several lists of outputs; ortckpt exports from the same eval model and trained
checkpoint. The graphs must have the same inputs, outputs, nodes and initializers (names, data
types, dims, values), and the current onnxruntime from PyPI (``$ORTCKPT_ORT_CURRENT_VENV``) must
compute the same outputs from both on the same inputs. A model over 2 GiB, exported with external
data, must load and run in the current onnxruntime (skipped, with the reason, on a short disk).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.ort import import_ortckpt, ort_venv_python, run_module

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ortckpt = import_ortckpt()
pytestmark = pytest.mark.ort

RNG_SEED = 23


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[list[str]]]]:
    """ORT 1.19.2's artifacts, trained checkpoints and exports."""
    work = tmp_path_factory.mktemp("ort_export")
    run_module(ort_venv_python("1.19.2"), "tests.ort.export_runner", "make", str(work), timeout=600)
    return work, json.loads((work / "cases.json").read_text())


def _jobs(made: tuple[Path, dict[str, list[list[str]]]]) -> list[tuple[str, int, list[str]]]:
    cases = made[1]
    return [(case, k, names) for case, lists in cases.items() for k, names in enumerate(lists)]


def _node_key(node: Any) -> tuple[Any, ...]:
    """A node as ORT and onnx may both write it (ORT writes an empty name and domain explicitly)."""
    attrs = sorted(a.SerializeToString(deterministic=True) for a in node.attribute)
    return (node.name, node.domain, node.op_type, tuple(node.input), tuple(node.output), tuple(attrs))


def _initializers(model: Any) -> dict[str, tuple[int, list[int], bytes]]:
    return {
        t.name: (t.data_type, list(t.dims), numpy_helper.to_array(t).tobytes())
        for t in model.graph.initializer
    }


def _feeds(model: Any, seed: int) -> dict[str, np.ndarray]:
    """Random values for a model's inputs (symbolic dims: 5; int64 inputs: class labels 0..2)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in model.graph.input:
        t = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 5 for d in t.shape.dim]
        if t.elem_type == TensorProto.INT64:
            feeds[v.name] = rng.integers(0, 3, shape).astype(np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.fixture(scope="module")
def exported(made: tuple[Path, dict[str, list[list[str]]]]) -> Path:
    """ortckpt's exports beside ORT's, and both run by the current onnxruntime on the same feeds."""
    work, _ = made
    jobs = []
    for case, k, names in _jobs(made):
        art = work / case
        written = ortckpt.export_for_inference(
            art / "eval_model.onnx", art / "trained.ckpt", names, art / f"ours_{k}.onnx"
        )
        assert written == [str(art / f"ours_{k}.onnx")]
        theirs = onnx.load(art / f"theirs_{k}.onnx")
        np.savez(art / f"feeds_{k}.npz", **_feeds(theirs, RNG_SEED + k))
        for who in ("ours", "theirs"):
            jobs.append(
                [str(art / f"{who}_{k}.onnx"), str(art / f"feeds_{k}.npz"), str(art / f"out_{who}_{k}.npz")]
            )
    (work / "run.json").write_text(json.dumps(jobs))
    run_module(ort_venv_python("current"), "tests.ort.export_runner", "run", str(work), timeout=600)
    return work


def test_same_graph_as_ort(made: tuple[Path, dict[str, list[list[str]]]], exported: Path) -> None:
    for case, k, names in _jobs(made):
        art = exported / case
        ours, theirs = onnx.load(art / f"ours_{k}.onnx"), onnx.load(art / f"theirs_{k}.onnx")
        onnx.checker.check_model(ours, full_check=True)
        label = f"{case} {names}"
        assert [v.SerializeToString() for v in ours.graph.input] == [
            v.SerializeToString() for v in theirs.graph.input
        ], label
        assert [o.name for o in ours.graph.output] == names, label
        assert [v.SerializeToString() for v in ours.graph.output] == [
            v.SerializeToString() for v in theirs.graph.output
        ], label
        # the same nodes (ORT writes them in its own topological order; ortckpt keeps the eval model's)
        assert sorted(map(_node_key, ours.graph.node)) == sorted(map(_node_key, theirs.graph.node)), label
        assert _initializers(ours) == _initializers(theirs), label
        assert [t.name for t in ours.graph.initializer] == [t.name for t in theirs.graph.initializer], label
        assert (ours.ir_version, ours.graph.name) == (theirs.ir_version, theirs.graph.name), label
        ours_opsets = {(o.domain, o.version) for o in ours.opset_import}
        assert ours_opsets <= {(o.domain, o.version) for o in theirs.opset_import}, label


def test_trained_values_not_initial(made: tuple[Path, dict[str, list[list[str]]]], exported: Path) -> None:
    """The initializers hold the trained checkpoint's values, which training changed."""
    for case in made[1]:
        trained = ortckpt.load(exported / case / "trained.ckpt")
        initial = ortckpt.load(exported / case / "checkpoint")
        ours = _initializers(onnx.load(exported / case / "ours_0.onnx"))
        changed = 0
        for name in trained.parameters:
            if name not in ours:
                continue
            assert ours[name][2] == trained.parameters[name].data.tobytes(), (case, name)
            if trained.parameters[name].trainable:
                changed += ours[name][2] != initial.parameters[name].data.tobytes()
        assert changed >= 2, case


def test_frozen_parameter_and_constant_kept(
    made: tuple[Path, dict[str, list[list[str]]]], exported: Path
) -> None:
    mlp = _initializers(onnx.load(exported / "mlp" / "ours_0.onnx"))
    assert (
        "fc2.bias" in mlp
        and not ortckpt.load(exported / "mlp" / "trained.ckpt").parameters["fc2.bias"].trainable
    )
    heads = onnx.load(exported / "heads" / "ours_0.onnx")
    assert [t.name for t in heads.graph.initializer] == ["scale", "w1", "b1", "w2", "w3"]
    probs_only = onnx.load(exported / "heads" / "ours_1.onnx")
    assert [t.name for t in probs_only.graph.initializer] == ["w1", "b1", "w2"]  # aux branch gone
    with_loss = onnx.load(exported / "heads" / "ours_3.onnx")
    assert [v.name for v in with_loss.graph.input] == ["x", "labels"]  # the loss still needs labels


def test_same_outputs_in_current_onnxruntime(
    made: tuple[Path, dict[str, list[list[str]]]], exported: Path
) -> None:
    for case, k, names in _jobs(made):
        art = exported / case
        ours, theirs = np.load(art / f"out_ours_{k}.npz"), np.load(art / f"out_theirs_{k}.npz")
        assert list(ours) == list(theirs) == names, (case, names)
        for name in names:
            assert ours[name].dtype == theirs[name].dtype and ours[name].shape == theirs[name].shape
            assert ours[name].tobytes() == theirs[name].tobytes(), (case, name)


# ------------------------------------------------------------------------------------------------
# Over 2 GiB
# ------------------------------------------------------------------------------------------------

GiB = 1 << 30
BIG = (1 << 29) + 4096  # float32 elements: just over 2 GiB
DISK_NEEDED = 6 * GiB  # checkpoint + exported model (about 2 GiB each) + room


def _big_eval_model(path: Path) -> None:
    """y = Gather(big, idx): one parameter input of BIG float32, as generate_artifacts lays out an
    eval model (user input first, then the parameter)."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["big", "idx"], ["y"], axis=0)],
        "big",
        [
            helper.make_tensor_value_info("idx", TensorProto.INT64, [4]),
            helper.make_tensor_value_info("big", TensorProto.FLOAT, [BIG]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path.write_bytes(model.SerializeToString())


@pytest.mark.slow
def test_export_over_2gib_runs_in_current_onnxruntime(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    if free < DISK_NEEDED:
        pytest.skip(f"needs {DISK_NEEDED / GiB:.0f} GiB free in {tmp_path}, has {free / GiB:.1f} GiB")
    python = ort_venv_python("current")
    values = np.zeros(BIG, np.float32)  # untouched pages: no memory until written
    picks = {0: 1.5, BIG // 2: 3.25, BIG - 1: -2.5, 7: 0.0}
    for i, v in picks.items():
        values[i] = v
    ortckpt.save(ortckpt.CheckpointState({"big": values}), tmp_path / "big.ckpt")
    del values
    _big_eval_model(tmp_path / "eval_model.onnx")

    out = tmp_path / "model.onnx"
    written = ortckpt.export_for_inference(tmp_path / "eval_model.onnx", tmp_path / "big.ckpt", ["y"], out)
    assert written == [str(out), str(out) + ".data"]
    assert out.stat().st_size < 1 << 20 and Path(written[1]).stat().st_size >= 4 * BIG
    model = onnx.load(out, load_external_data=False)
    (init,) = model.graph.initializer
    assert init.data_location == TensorProto.EXTERNAL
    assert {e.key: e.value for e in init.external_data}["location"] == "model.onnx.data"

    np.savez(tmp_path / "feeds.npz", idx=np.array(list(picks), np.int64))
    (tmp_path / "run.json").write_text(
        json.dumps([[str(out), str(tmp_path / "feeds.npz"), str(tmp_path / "outputs.npz")]])
    )
    run_module(python, "tests.ort.export_runner", "run", str(tmp_path), timeout=600)
    got = np.load(tmp_path / "outputs.npz")["y"]
    np.testing.assert_array_equal(got, np.array(list(picks.values()), np.float32))
