"""The device side of the example: ONNX Runtime on-device training (onnxruntime-training), run as a
separate program under ORT's own Python environment (ORT 1.19 needs numpy<2; Flower needs numpy 2).
Nothing here imports ortckpt or flwr: it is what a phone or browser runs.

    python ort_device.py artifacts DIR                      # generate_artifacts for a small MLP
    python ort_device.py train DIR IN.ckpt OUT.ckpt --partition P --steps N --lr LR
        [--buffer-in IN.bin]    IN.ckpt is nominal: load every parameter from this float32 buffer
        [--buffer-out OUT.bin]  also write get_contiguous_parameters(trainable_only=True)
        [--keep-optimizer]      save OUT.ckpt with the optimizer's state (AdamW's momentums)
    python ort_device.py loss DIR CKPT                       # mean training loss on held-out data

Each prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types

import numpy as np

IN, HIDDEN, OUT = 4, 8, 3
TRAINABLE = ["fc1.weight", "fc1.bias", "fc2.weight"]
FROZEN = ["fc2.bias"]  # a frozen parameter, as fine-tuning on devices usually has


def training() -> types.ModuleType:
    """``onnxruntime.training`` without running its package ``__init__``, which imports torch for
    ORTModule; on-device training (``artifacts``, ``api``) does not need torch."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    if "onnxruntime.training" not in sys.modules:
        package = types.ModuleType("onnxruntime.training")
        package.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
        sys.modules["onnxruntime.training"] = package
    package = sys.modules["onnxruntime.training"]
    for part in ("api", "artifacts"):
        setattr(package, part, importlib.import_module(f"onnxruntime.training.{part}"))
    return package


def make_artifacts(folder: str) -> dict[str, object]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    artifacts = training().artifacts
    rng = np.random.default_rng(0)
    weights = {
        "fc1.weight": (0.5 * rng.standard_normal((IN, HIDDEN))).astype(np.float32),
        "fc1.bias": np.zeros(HIDDEN, np.float32),
        "fc2.weight": (0.5 * rng.standard_normal((HIDDEN, OUT))).astype(np.float32),
        "fc2.bias": np.zeros(OUT, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "fc1.weight"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"]),
        helper.make_node("Add", ["h3", "fc2.bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # what onnxruntime 1.19 reads
    onnx.checker.check_model(model)
    os.makedirs(folder, exist_ok=True)
    artifacts.generate_artifacts(
        model,
        requires_grad=TRAINABLE,
        frozen_params=FROZEN,
        loss=artifacts.LossType.MSELoss,
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=folder,
    )
    return {"files": sorted(os.listdir(folder))}


def data(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The task every device shares: y = tanh(x A) B (A, B fixed), x from the device's own seed."""
    task = np.random.default_rng(1234)
    a = task.standard_normal((IN, HIDDEN)).astype(np.float32)
    b = task.standard_normal((HIDDEN, OUT)).astype(np.float32)
    x = np.random.default_rng(seed).standard_normal((n, IN)).astype(np.float32)
    return x, np.tanh(x @ a) @ b


def _module(folder: str, ckpt: str):
    api = training().api
    state = api.CheckpointState.load_checkpoint(ckpt)
    module = api.Module(
        os.path.join(folder, "training_model.onnx"), state, os.path.join(folder, "eval_model.onnx")
    )
    return state, module


def train(
    folder: str,
    src: str,
    out: str,
    partition: int,
    steps: int,
    lr: float,
    batch: int,
    buffer_in: str | None = None,
    buffer_out: str | None = None,
    keep_optimizer: bool = False,
) -> dict[str, object]:
    import onnxruntime

    api = training().api
    state, module = _module(folder, src)
    if buffer_in is not None:  # a nominal checkpoint: the values come as one flat buffer
        values = np.fromfile(buffer_in, dtype="<f4")
        # ORT 1.19's Python wrapper hands its argument to the C++ binding as it is, which wants the
        # binding's own OrtValue (the wrapper's ._ortvalue), not the wrapper
        ort_value = onnxruntime.OrtValue.ortvalue_from_numpy(values)._ortvalue
        module.copy_buffer_to_parameters(ort_value, trainable_only=False)
    optimizer = api.Optimizer(os.path.join(folder, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(lr)
    x, y = data(100 + partition, steps * batch)
    module.train()
    losses = []
    for i in range(steps):
        part = slice(i * batch, (i + 1) * batch)
        losses.append(float(module(x[part], y[part])))
        optimizer.step()
        module.lazy_reset_grad()
    samples = steps * batch
    # what the server weighs and reports by: properties the device sets before saving
    state.properties["samples"] = samples
    state.properties["loss"] = float(np.mean(losses))
    api.CheckpointState.save_checkpoint(state, out, include_optimizer_state=keep_optimizer)
    if buffer_out is not None:  # what ORT's federated-learning design uploads instead of a checkpoint
        module.get_contiguous_parameters(trainable_only=True).numpy().astype("<f4").tofile(buffer_out)
    return {
        "samples": samples,
        "loss": float(np.mean(losses)),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }


def loss(folder: str, ckpt: str) -> dict[str, object]:
    _, module = _module(folder, ckpt)
    module.eval()
    x, y = data(7, 256)
    return {"loss": float(module(x, y))}


def main() -> None:
    parser = argparse.ArgumentParser(description="ONNX Runtime device side of examples/flower_ort")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("artifacts").add_argument("folder")
    t = sub.add_parser("train")
    for name in ("folder", "src", "out"):
        t.add_argument(name)
    t.add_argument("--partition", type=int, default=0)
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--lr", type=float, default=0.02)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--buffer-in")
    t.add_argument("--buffer-out")
    t.add_argument("--keep-optimizer", action="store_true")
    e = sub.add_parser("loss")
    e.add_argument("folder")
    e.add_argument("ckpt")
    args = parser.parse_args()
    if args.command == "artifacts":
        result = make_artifacts(args.folder)
    elif args.command == "train":
        result = train(
            args.folder,
            args.src,
            args.out,
            args.partition,
            args.steps,
            args.lr,
            args.batch,
            args.buffer_in,
            args.buffer_out,
            args.keep_optimizer,
        )
    else:
        result = loss(args.folder, args.ckpt)
    # the last line of stdout (generate_artifacts prints its progress before it)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
