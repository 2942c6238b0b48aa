#!/usr/bin/env python3
"""A federated learning round on the server side, end to end, with ortckpt only (no onnxruntime):

1. make a small ONNX inference model (a 2-layer MLP) and its training checkpoint (``save_from_onnx``);
2. simulate a fleet of devices: each "trains" (moves the trainable weights towards a common target
   with its own noise), records its sample count as a property and uploads its checkpoint; a few
   uploads are broken (truncated, garbage, a NaN, a wrong shape);
3. validate and average the uploads, weighted by sample count (``ortckpt.average``), and print the
   report: the broken uploads are rejected and named, the others averaged;
4. export the averaged weights into the inference model (``ortckpt.load_into_model``), check it with
   onnx's checker and run it with onnx's reference evaluator against numpy;
5. export the weights to safetensors for other tools (``ortckpt.to_safetensors``) and write the
   nominal checkpoint to ship the next round's structure to devices (``ortckpt.to_nominal``).

Run: ``python examples/federated_average.py [--devices 50] [--out DIR]`` (needs ``onnx``;
safetensors for step 5). See docs/federated.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ortckpt

IN, HIDDEN, OUT = 4, 8, 3


def make_model(rng: np.random.Generator) -> onnx.ModelProto:
    weights = {
        "fc1.weight": rng.standard_normal((IN, HIDDEN)).astype(np.float32),
        "fc1.bias": np.zeros(HIDDEN, np.float32),
        "fc2.weight": rng.standard_normal((HIDDEN, OUT)).astype(np.float32),
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
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def simulate_fleet(base: Path, folder: Path, devices: int, rng: np.random.Generator) -> list[Path]:
    """Device uploads: trained copies of ``base`` (and a few broken ones, as real fleets have)."""
    target = {
        name: rng.standard_normal(p.shape).astype(p.dtype)
        for name, p in ortckpt.load(base).trainable_parameters.items()
    }
    uploads = []
    for i in range(devices):
        state = ortckpt.load(base)
        for name, p in state.trainable_parameters.items():
            local = (
                p.data + 0.5 * (target[name] - p.data) + 0.05 * rng.standard_normal(p.shape).astype(p.dtype)
            )
            p.data = local.astype(p.dtype)
        state.properties["samples"] = int(rng.integers(10, 500))
        path = folder / f"device{i:04d}.ckpt"
        ortckpt.save(state, path)
        uploads.append(path)
    # what else arrives at a server
    good = uploads[0].read_bytes()
    (folder / "truncated.ckpt").write_bytes(good[: len(good) // 2])
    (folder / "garbage.ckpt").write_bytes(b"<html>502 Bad Gateway</html>")
    nan = ortckpt.load(base)
    nan.parameters["fc1.weight"].data = np.full((IN, HIDDEN), np.nan, np.float32)
    nan.properties["samples"] = 100
    ortckpt.save(nan, folder / "diverged.ckpt")
    wrong = ortckpt.CheckpointState(
        {n: p.data for n, p in ortckpt.load(base).trainable_parameters.items() if n != "fc2.bias"}
        | {"fc2.bias": np.zeros(OUT + 1, np.float32)},
        properties={"samples": 100},
    )
    ortckpt.save(wrong, folder / "old_app_version.ckpt")
    return [
        *uploads,
        *(folder / n for n in ("truncated.ckpt", "garbage.ckpt", "diverged.ckpt", "old_app_version.ckpt")),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--devices", type=int, default=50, help="number of healthy device uploads")
    parser.add_argument("--out", type=Path, help="folder for every file made (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        uploads_dir = out / "uploads"
        uploads_dir.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(2024)

        model_path = out / "model.onnx"
        onnx.save(make_model(rng), model_path)
        base = out / "base.ckpt"
        ortckpt.save_from_onnx(model_path, base)  # every float initializer trainable
        uploads = simulate_fleet(base, uploads_dir, args.devices, rng)

        report = ortckpt.average(uploads, out / "global.ckpt", weights="samples", reference=base)
        print(report.summary())

        trained = ortckpt.load_into_model(out / "global.ckpt", model_path)
        onnx.checker.check_model(trained)
        onnx.save(trained, out / "global.onnx")
        x = rng.standard_normal((5, IN)).astype(np.float32)
        (y,) = ReferenceEvaluator(trained).run(None, {"x": x})
        p = {n: q.data for n, q in report.state.parameters.items()}
        expected = np.maximum(x @ p["fc1.weight"] + p["fc1.bias"], 0) @ p["fc2.weight"] + p["fc2.bias"]
        if not np.allclose(y, expected, rtol=1e-5, atol=1e-5):
            print("the exported model does not compute with the averaged weights", file=sys.stderr)
            return 1
        print(f"exported {out / 'global.onnx'}: inference matches the averaged weights")

        try:
            ortckpt.to_safetensors(out / "global.ckpt", out / "global.safetensors")
            print(f"exported {out / 'global.safetensors'}")
        except ImportError as exc:  # safetensors is optional
            print(f"skipped safetensors export: {exc}")
        ortckpt.save(ortckpt.to_nominal(out / "global.ckpt"), out / "nominal.ckpt")
        print(f"wrote {out / 'nominal.ckpt'} (structure only, for the next round's devices)")
        return 0 if len(report.rejected) == 4 else 1


if __name__ == "__main__":
    sys.exit(main())
