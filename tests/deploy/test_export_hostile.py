"""Hostile eval models and hostile directories against ``export_for_inference`` (issue 32, items 1,
3, 4 and 8), each attack first reproduced against the previous code:

* nodes that crash onnx's C++ shape inference (SIGSEGV) on a model whose requested output has no
  declared type: the export never runs inference, it refuses the output by name (API and CLI,
  ``--dry-run`` too; in a subprocess, where a crash is a signal);
* initializers of the eval model with negative dims, raw data that does not match them, or an
  unknown data type in external data: refused as the checkpoint reader refuses such tensors;
* a directory of an external data location swapped for a symlink leading out, over and over
  while exports and conversions run: no byte from outside the model's directory is ever embedded;
* a symlink at ``<out>.data``: replaced as a name, never followed (as a checkpoint's ``.data``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt.deploy._export import plan_export
from ortckpt.formats._onnx_write import write_model

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.deploy.test_export import _ckpt, _eval_model, _vi  # noqa: E402

#: single nodes whose shape inference dereferences what the node lacks (found by a fuzz of
#: single-node models; onnx 1.23's infer_shapes dies with SIGSEGV on each)
CRASHERS = {
    "GatherND": helper.make_node("GatherND", ["x", "idx"], ["crash"]),
    "RegexFullMatch": helper.make_node("RegexFullMatch", [""], ["crash"], pattern="a"),
    "DictVectorizer": helper.make_node(
        "DictVectorizer", [""], ["crash"], domain="ai.onnx.ml", int64_vocabulary=[1]
    ),
    "LabelEncoder": helper.make_node(
        "LabelEncoder", [""], ["crash"], domain="ai.onnx.ml", keys_int64s=[1], values_int64s=[1]
    ),
}


def _hostile_model(path: Path, crasher: onnx.NodeProto) -> Path:
    """The eval model of tests/deploy/test_export.py plus a node off the exported path that crashes
    shape inference, and an output ``h`` (x·w transposed) with no declared type."""
    model = onnx.load(_eval_model(path))
    graph = model.graph
    graph.node.append(helper.make_node("Transpose", ["xw"], ["h"]))
    graph.node.append(crasher)
    inputs = [_vi("idx", TensorProto.INT64, [2, -1]), *graph.input]  # a user input: before the parameters
    del graph.input[:]
    graph.input.extend(inputs)
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 3)])
    path.write_bytes(model.SerializeToString())
    return path


EXPORT = """
import sys, ortckpt
try:
    ortckpt.export_for_inference(sys.argv[1], sys.argv[2], ["h"])
except ortckpt.CheckpointError as exc:
    print(type(exc).__name__, exc)
"""


@pytest.mark.parametrize("op", list(CRASHERS))
def test_nodes_that_crash_shape_inference_never_reach_it(op: str, tmp_path: Path) -> None:
    """Before: export ran onnx.shape_inference.infer_shapes on the whole model for ``h`` and the
    process died (returncode -11), the CLI too, even with --dry-run."""
    model = _hostile_model(tmp_path / "eval.onnx", CRASHERS[op])
    ckpt = _ckpt(tmp_path / "t.ckpt")
    done = subprocess.run(
        [sys.executable, "-c", EXPORT, str(model), str(ckpt)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "ModelError" in done.stdout and "output 'h' is not declared" in done.stdout, done.stdout
    for extra in ([], ["--dry-run"]):
        argv = ["export-inference", str(model), str(ckpt), str(tmp_path / "out.onnx"), "--output", "h"]
        cli = subprocess.run(
            [sys.executable, "-m", "ortckpt", *argv, *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 2, (cli.returncode, cli.stderr[-2000:])
        assert "output 'h' is not declared" in cli.stderr and "Traceback" not in cli.stderr
    assert not (tmp_path / "out.onnx").exists()
    # declared outputs of the same model export as before: the crashing node is dropped
    exported = ortckpt.export_for_inference(model, ckpt, ["y"])
    assert [n.op_type for n in exported.graph.node] == ["MatMul", "Add", "Mul"]


def _with_initializer(path: Path, tensor: onnx.TensorProto) -> Path:
    """The eval model with its constant ``c`` replaced by ``tensor``."""
    model = onnx.load(_eval_model(path))
    model.graph.initializer[0].CopyFrom(tensor)
    path.write_bytes(model.SerializeToString())
    return path


def _c(**fields: object) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.array([0.5, -2.0], np.float32), "c")
    for key, value in fields.items():
        if key == "dims":
            del t.dims[:]
            t.dims.extend(value)  # type: ignore[arg-type]
        else:
            setattr(t, key, value)
    return t


def _external_999() -> onnx.TensorProto:
    t = _c(data_type=999)
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "c.bin"), ("offset", "0"), ("length", "8")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


@pytest.mark.parametrize(
    ("tensor", "kind", "words"),
    [
        (_c(dims=[-2]), ortckpt.TensorDataError, "negative dimension"),
        (_c(dims=[3]), ortckpt.TensorDataError, "needs 12 bytes"),
        (_c(raw_data=b"\x00" * 5), ortckpt.TensorDataError, "needs 8 bytes"),
        (_c(data_type=999), ortckpt.TensorDataError, "ONNX data type 999"),
        (_external_999(), ortckpt.TensorDataError, "ONNX data type 999"),
        (_c(data_type=TensorProto.INT4, raw_data=b"\x00" * 3), ortckpt.TensorDataError, "need 1 bytes"),
    ],
    ids=[
        "negative-dims",
        "raw-short-for-dims",
        "raw-wrong-size",
        "dtype-999",
        "external-dtype-999",
        "int4-size",
    ],
)
def test_own_initializers_are_checked_as_checkpoint_tensors(
    tmp_path: Path, tensor: onnx.TensorProto, kind: type[Exception], words: str
) -> None:
    """Before: copied unchecked into a model onnx.checker refuses (or a foreign exception for
    the external one)."""
    (tmp_path / "c.bin").write_bytes(b"\x00" * 8)
    model = _with_initializer(tmp_path / "eval.onnx", tensor)
    out = tmp_path / "out.onnx"
    with pytest.raises(kind, match=words) as info:
        ortckpt.export_for_inference(model, _ckpt(tmp_path / "t.ckpt"), ["y"], out)
    assert "initializer of the eval model" in str(info.value) and "'c'" in str(info.value)
    assert not out.exists()


def test_external_data_swapped_for_links_during_exports_never_leaks(tmp_path: Path) -> None:
    """A thread swaps the model's data directory for a symlink to a directory outside holding a
    secret of the same size, over and over, while exports and ``save_from_onnx`` run. Before:
    the location was checked with realpath, then opened again by name (20 leaks in 8 s). Now
    every run gives the inside values or an error; never the secret."""
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    inside = np.array([0.5, -2.0], np.float32)
    secret = np.array([13.0, 13.0], np.float32)
    (model_dir / "sub" / "c.bin").write_bytes(inside.tobytes())
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "c.bin").write_bytes(secret.tobytes())
    eval_model = _eval_model(model_dir / "eval.onnx", c_external="sub/c.bin")
    ckpt = _ckpt(tmp_path / "t.ckpt")
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(model_dir / "sub", model_dir / "sub.real")
                os.symlink(tmp_path / "outside", model_dir / "sub")
                os.unlink(model_dir / "sub")
                os.rename(model_dir / "sub.real", model_dir / "sub")
            except OSError:
                pass

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    seen = {"inside": 0, "error": 0}
    try:
        for i in range(300):
            try:
                if i % 2:
                    model = ortckpt.export_for_inference(eval_model, ckpt, ["y"])
                    values = numpy_helper.to_array(model.graph.initializer[0])
                else:
                    ortckpt.onnx_io.save_from_onnx(eval_model, tmp_path / "c.ckpt", trainable=[])
                    values = ortckpt.load(tmp_path / "c.ckpt").parameters["c"].data
            except (ortckpt.CheckpointError, OSError):
                seen["error"] += 1
                continue
            assert values.tobytes() != secret.tobytes(), f"run {i} embedded the file outside"
            assert values.tobytes() == inside.tobytes()
            seen["inside"] += 1
    finally:
        stop.set()
        swapper.join()
    assert seen["inside"] > 0, seen


def test_a_link_at_the_companion_name_is_replaced_never_followed(tmp_path: Path) -> None:
    """The caller's own symlink at ``<out>.data`` (the same-user form of the two-uid attack in
    tests/test_shared_dirs.py). Before: followed, the file it names replaced by tensor bytes."""
    eval_model = _eval_model(tmp_path / "wide.onnx", w_shape=[3, "n"])
    w = np.ones((3, 700), np.float32)
    plan = plan_export(eval_model, _ckpt(tmp_path / "wide.ckpt", w=w, unrelated=None), ["y"])
    victim = tmp_path / "victim"
    victim.write_bytes(b"the victim's file")
    out = tmp_path / "model.onnx"
    os.symlink(victim, tmp_path / "model.onnx.data")
    assert write_model(plan.model, plan.initializers, str(out), limit=4096)
    assert victim.read_bytes() == b"the victim's file"
    data = tmp_path / "model.onnx.data"
    assert not data.is_symlink() and data.stat().st_size >= w.nbytes
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.load(out).graph.initializer[1]), w)


def test_the_companion_of_an_own_linked_model_is_named_after_it(tmp_path: Path) -> None:
    """A model path that is the caller's own symlink: the model lands at the link's target and its
    data beside it under the target's name, which is the location the model records."""
    eval_model = _eval_model(tmp_path / "wide.onnx", w_shape=[3, "n"])
    w = np.ones((3, 700), np.float32)
    plan = plan_export(eval_model, _ckpt(tmp_path / "wide.ckpt", w=w, unrelated=None), ["y"])
    (tmp_path / "models").mkdir()
    os.symlink("models/real.onnx", tmp_path / "link.onnx")
    assert write_model(plan.model, plan.initializers, str(tmp_path / "link.onnx"), limit=4096)
    assert sorted(os.listdir(tmp_path / "models")) == ["real.onnx", "real.onnx.data"]
    loaded = onnx.load(tmp_path / "models" / "real.onnx")
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[1]), w)
