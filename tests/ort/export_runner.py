"""The ORT side of tests/ort/test_ort_export.py, run through ``tests.helpers.ort.run_module``.

    python -m tests.ort.export_runner make WORKDIR   (ORT 1.19.2, onnxruntime-training)
    python -m tests.ort.export_runner run WORKDIR    (the current onnxruntime from PyPI)

``make``: for each case, ``generate_artifacts`` into ``WORKDIR/<case>/``, two training steps,
``trained.ckpt``, and ORT's ``export_model_for_inferencing`` for each list of output names into
``theirs_<k>.onnx``; ``WORKDIR/cases.json`` maps each case to its lists of output names.
``run``: each model named in ``WORKDIR/run.json`` (a list of [model, feeds.npz, outputs.npz])
is run on the feeds; its outputs go to outputs.npz under their names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def heads_model():  # type: ignore[no-untyped-def]
    """Several outputs: x -> tanh(x·w1 + b1) = h2 -> logits (w2) -> probs, and aux = (h2·w3)·scale;
    ``scale`` is a constant initializer that is not a parameter."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = {
        "w1": rng.standard_normal((4, 6)).astype(np.float32),
        "b1": rng.standard_normal(6).astype(np.float32),
        "w2": rng.standard_normal((6, 3)).astype(np.float32),
        "w3": rng.standard_normal((6, 2)).astype(np.float32),
        "scale": np.array([0.5], np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["h2", "w3"], ["aux0"]),
        helper.make_node("Mul", ["aux0", "scale"], ["aux"]),
    ]
    outputs = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", n])
        for name, n in (("logits", 3), ("probs", 3), ("aux", 2))
    ]
    graph = helper.make_graph(
        nodes,
        "heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _train(art: Path, training, labels):  # type: ignore[no-untyped-def]
    """Two AdamW steps (so the values are not the initial ones); saves trained.ckpt; returns the
    Module, which exports."""
    _, CheckpointState, Module, Optimizer, _ = training
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(art / "training_model.onnx"), state, str(art / "eval_model.onnx"))
    opt = Optimizer(str(art / "optimizer_model.onnx"), module)
    module.train()
    rng = np.random.default_rng(7)
    for _ in range(2):
        module(rng.standard_normal((5, 4)).astype(np.float32), labels(rng))
        opt.step()
        module.lazy_reset_grad()
    CheckpointState.save_checkpoint(state, str(art / "trained.ckpt"))
    return module


def make(work: Path) -> None:
    import make_fixtures as F

    cases: dict[str, list[list[str]]] = {}
    training = F._import_training()
    artifacts = training[0]

    # mlp: fc1.weight, fc1.bias, fc2.weight trainable, fc2.bias frozen; MSE loss with a target input
    art = work / "mlp"
    F.make_artifacts(str(art), seed=3)
    module = _train(art, training, lambda r: r.standard_normal((5, 3)).astype(np.float32))
    cases["mlp"] = [["output"], ["h2", "output"]]
    for k, names in enumerate(cases["mlp"]):
        module.export_model_for_inferencing(str(art / f"theirs_{k}.onnx"), names)

    # heads: w1, b1, w2 trainable, w3 frozen, scale a constant; cross-entropy on logits only
    art = work / "heads"
    art.mkdir()
    with F._quiet_fds():
        artifacts.generate_artifacts(
            heads_model(),
            requires_grad=["w1", "b1", "w2"],
            frozen_params=["w3"],
            loss=artifacts.LossType.CrossEntropyLoss,
            optimizer=artifacts.OptimType.AdamW,
            artifact_directory=str(art),
            loss_input_names=["logits"],
            additional_output_names=["probs", "aux"],
        )
    module = _train(art, training, lambda r: r.integers(0, 3, 5).astype(np.int64))
    import onnx

    loss = onnx.load(str(art / "eval_model.onnx")).graph.output[0].name
    cases["heads"] = [["logits", "probs", "aux"], ["probs"], ["h2", "aux"], ["aux", loss, "w3"]]
    for k, names in enumerate(cases["heads"]):
        module.export_model_for_inferencing(str(art / f"theirs_{k}.onnx"), names)
    (work / "cases.json").write_text(json.dumps(cases))


def run(work: Path) -> None:
    import onnxruntime as ort

    for model, feeds, outputs in json.loads((work / "run.json").read_text()):
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, dict(np.load(feeds)))
        np.savez(outputs, **dict(zip(names, values)))
    (work / "versions.json").write_text(json.dumps({"onnxruntime": ort.__version__}))


if __name__ == "__main__":
    {"make": make, "run": run}[sys.argv[1]](Path(sys.argv[2]))
