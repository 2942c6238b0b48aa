#!/usr/bin/env python3
"""Regenerate tests/data/artifacts/: the training artifacts ONNX Runtime 1.19.2 makes for a small
model, checkpoints it trained, and an ORT adapter — the files the README, the docs' code blocks and
the examples run on.

Run with the ORT 1.19.2 side venv's python; the adapter is written by the newest onnxruntime (ORT
1.19.2 has no adapter writer; ``AdapterFormat`` came in 1.20), whose venv ``--adapter-python`` names::

    PY=$(bash scripts/setup_ort_env.sh | tail -n1)
    CUR=$(bash scripts/setup_ort_env.sh --release current | tail -n1)
    $PY scripts/make_artifact_fixtures.py --adapter-python "$CUR"           # writes the files
    $PY scripts/make_artifact_fixtures.py --adapter-python "$CUR" --check   # compares, writes nothing

The model: ``input[batch,4] -> fc1 (4x8, with a rank-2 LoRA branch fc1.lora_A 4x2 @ fc1.lora_B 2x8)
-> relu -> fc2 (8x3) -> output``, float32. The files:

* ``model.onnx``: that model (the inference model training starts from);
* ``training_model.onnx``, ``eval_model.onnx``, ``optimizer_model.onnx``, ``checkpoint``:
  ``generate_artifacts`` with the LoRA branch and fc2 trainable, fc1 frozen, MSE loss, AdamW;
* ``trained.ckpt``: 5 AdamW steps on that checkpoint, saved with its optimizer state and the
  properties ``epoch`` (int), ``samples`` (int) and ``loss`` (float) a device sets;
* ``uploads/device{0,1,2}.ckpt``: three devices' checkpoints (3, 4 and 5 steps from the same
  start, different data, 30/40/50 samples), saved without optimizer state, as devices upload them;
* ``lora.onnx_adapter``: ``trained.ckpt``'s LoRA parameters, written by ``AdapterFormat``.

Each ``.ckpt`` (and ``checkpoint``) gets a ``.json`` manifest as scripts/make_fixtures.py makes
them (read back with ORT); ``files.json`` records every file's size and sha256 and what wrote it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "artifacts")

# sibling scripts (scripts/ is on the path when this one runs as a script)
import make_fixtures as F  # noqa: E402
import ort_oracle as O  # noqa: E402

TRAINABLE = ["fc1.lora_A", "fc1.lora_B", "fc2.weight", "fc2.bias"]
FROZEN = ["fc1.weight", "fc1.bias"]
LORA = ["fc1.lora_A", "fc1.lora_B"]
ARTIFACTS = ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"]


def lora_model():
    """The MLP with a LoRA branch on fc1 (seed 7), opset 17, IR 9 (what ORT 1.19.2 reads)."""
    from onnx import helper

    rng = np.random.default_rng(7)
    inits = {
        "fc1.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "fc1.bias": (0.1 * rng.standard_normal(8)).astype(np.float32),
        "fc1.lora_A": (0.1 * rng.standard_normal((4, 2))).astype(np.float32),
        "fc1.lora_B": np.zeros((2, 8), np.float32),  # LoRA starts as the identity change
        "fc2.weight": rng.standard_normal((8, 3)).astype(np.float32),
        "fc2.bias": (0.1 * rng.standard_normal(3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["input", "fc1.weight"], ["base"]),
        helper.make_node("MatMul", ["input", "fc1.lora_A"], ["down"]),
        helper.make_node("MatMul", ["down", "fc1.lora_B"], ["up"]),
        helper.make_node("Add", ["base", "up"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"]),
        helper.make_node("Add", ["h3", "fc2.bias"], ["output"]),
    ]
    return F.mlp_model_of("mlp_lora", nodes, inits)


def train(art: str, steps: int, seed: int, samples: int, out: str, with_optimizer: bool) -> None:
    """``steps`` AdamW steps from the artifacts' checkpoint on batches drawn with ``seed``; saves
    the state to ``out`` with the properties a device sets."""
    _, CheckpointState, Module, Optimizer, _ = F._import_training()
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state, os.path.join(art, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    module.train()
    rng = np.random.default_rng(seed)
    loss = 0.0
    for _ in range(steps):
        x = rng.standard_normal((10, 4)).astype(np.float32)
        y = rng.standard_normal((10, 3)).astype(np.float32)
        loss = float(module(x, y))
        optimizer.step()
        module.lazy_reset_grad()
    F.set_properties(state, {"epoch": 1, "samples": samples, "loss": float(np.float32(loss))})
    CheckpointState.save_checkpoint(state, out, include_optimizer_state=with_optimizer)


def write_adapter(python: str, ckpt: str, out: str) -> str:
    """``ckpt``'s LoRA parameters as an ORT adapter, written by ``AdapterFormat`` under ``python``
    (the newest onnxruntime)."""
    from onnxruntime.capi import _pybind_state as C

    state = C.load_checkpoint(ckpt)
    with tempfile.TemporaryDirectory(prefix="ortckpt_adapter_") as tmp:
        npz = os.path.join(tmp, "lora.npz")
        np.savez(npz, **{name: np.array(state.get_parameter(name).data.numpy()) for name in LORA})
        code = (
            "import sys, numpy as np, onnxruntime as ort\n"
            "arrays = dict(np.load(sys.argv[1]))\n"
            "a = ort.AdapterFormat()\n"
            "a.set_adapter_version(1)\n"
            "a.set_model_version(1)\n"
            "a.set_parameters({k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in sorted(arrays.items())})\n"
            "a.export_adapter(sys.argv[2])\n"
            "print(ort.__version__)\n"
        )
        done = subprocess.run([python, "-c", code, npz, out], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_all(out: str, work: str, adapter_python: str) -> dict[str, str]:
    """Writes every file into ``out``; returns {file: what wrote it}."""
    import onnx

    os.makedirs(os.path.join(out, "uploads"), exist_ok=True)
    model = lora_model()
    onnx.save(model, os.path.join(out, "model.onnx"))
    art = os.path.join(work, "artifacts")
    F.make_artifacts(art, 0, model=model, trainable=TRAINABLE, frozen=FROZEN)
    ort = "onnxruntime-training " + O.versions()["onnxruntime"]
    made = {"model.onnx": f"onnx {onnx.__version__} (the model generate_artifacts started from)"}
    for name in ARTIFACTS:
        shutil.copyfile(os.path.join(art, name), os.path.join(out, name))
        made[name] = f"{ort} generate_artifacts"
    train(art, steps=5, seed=11, samples=40, out=os.path.join(out, "trained.ckpt"), with_optimizer=True)
    made["trained.ckpt"] = f"{ort}: 5 AdamW steps, saved with optimizer state"
    for i, (steps, samples) in enumerate([(3, 30), (4, 40), (5, 50)]):
        name = f"uploads/device{i}.ckpt"
        train(art, steps, seed=100 + i, samples=samples, out=os.path.join(out, name), with_optimizer=False)
        made[name] = f"{ort}: {steps} AdamW steps on device {i}'s data, saved without optimizer state"
    version = write_adapter(
        adapter_python, os.path.join(out, "trained.ckpt"), os.path.join(out, "lora.onnx_adapter")
    )
    made["lora.onnx_adapter"] = f"onnxruntime {version} AdapterFormat: trained.ckpt's {' and '.join(LORA)}"
    return made


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def generate(out: str, adapter_python: str) -> list[str]:
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ortckpt_artifacts_") as work:
        made = make_all(out, work, adapter_python)
    for name in made:
        if name.endswith(".ckpt") or name == "checkpoint":
            path = os.path.join(out, name)
            manifest = F.manifest(path, made[name])
            with open(os.path.splitext(path)[0] + ".json", "w", encoding="utf-8") as f:
                f.write(F.format_manifest(manifest))
    files = {
        name: {
            "bytes": os.path.getsize(os.path.join(out, name)),
            "sha256": sha256(os.path.join(out, name)),
            "made_by": by,
        }
        for name, by in made.items()
    }
    with open(os.path.join(out, "files.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(files, indent=1, ensure_ascii=False) + "\n")
    write_readme(out, files)
    return sorted(
        os.path.relpath(os.path.join(root, n), out) for root, _, names in os.walk(out) for n in names
    )


def write_readme(out: str, files: dict[str, dict[str, Any]]) -> None:
    lines = [
        "# A training artifact set written by ONNX Runtime",
        "",
        "Generated by `scripts/make_artifact_fixtures.py` (do not edit by hand; its docstring says how",
        "to regenerate and check). The README's and the docs' code blocks run on these files",
        "(`scripts/docs_code.py`), and so can you: `cp -r tests/data/artifacts /tmp/try && cd /tmp/try`.",
        "Each checkpoint has a `.json` manifest made by reading it back with ORT 1.19.2;",
        "`files.json` holds every file's size and sha256 (checked by `tests/ort/test_fixture_manifests.py`).",
        "",
        "| file | bytes | made by |",
        "|---|---:|---|",
    ]
    lines += [f"| `{name}` | {f['bytes']} | {f['made_by']} |" for name, f in files.items()]
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: tests/data/artifacts)")
    ap.add_argument("--adapter-python", required=True, help="python of a venv with onnxruntime >= 1.20")
    ap.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare with --out")
    args = ap.parse_args(argv)
    return F.write_or_check(args.out, args.check, lambda out: generate(out, args.adapter_python))


if __name__ == "__main__":
    sys.exit(main())
