#!/usr/bin/env python3
"""Regenerate tests/data/: small checkpoints written by the real ONNX Runtime 1.19.2.

Run with the ORT side venv's python (no torch needed)::

    PY=$(scripts/setup_ort_env.sh | tail -n1)
    $PY scripts/make_fixtures.py            # writes tests/data/*.ckpt, *.json, README.md
    $PY scripts/make_fixtures.py --check    # regenerate into a temp dir and compare, write nothing

Models are tiny MLPs built with ``onnx.helper``; ``onnxruntime.training.artifacts.generate_artifacts``
makes the training artifacts and ``onnxruntime.training.api`` (Module, Optimizer, CheckpointState,
LinearLRScheduler) trains a few steps with fixed seeds. Other fixtures come straight from
``save_checkpoint`` on TensorProtos. Each ``X.ckpt`` gets an ``X.json`` manifest made by reading
the file back with ORT (``ort_oracle.inspect_checkpoint``):

    file, size, sha256, description, oracle versions,
    version / is_nominal / has_external_data       (the file through ORT's flatbuffers bindings)
    file_order: {"trainable": [names], "frozen": [names]}      (order inside the file)
    parameters: [{name, trainable, data_type, dtype, dims, sha256}]  (CheckpointState view, sorted;
                 sha256 of the C-order little-endian bytes; for a nominal file dims [] and sha256 null)
    optimizer_groups: [{name, step, initial_learning_rate,
                        states: {param: {momentum: {data_type, dtype, dims, sha256}}}}]
                 (what ORT loaded: its re-serialization of the loaded state)
    properties: [{name, type, value}]             (get_property; floats are float32 values)

The whole run is deterministic: the same ORT build writes byte-identical files (``--check``).
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import hashlib
import json
import os
import shutil
import sys
import tempfile
import types
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(REPO, "tests", "data")

# a sibling script: scripts/ is on the path when this one runs as a script, and is an import root
# wherever it is imported (pyproject.toml's pytest pythonpath, tests.helpers.ort.run_module)
import ort_oracle as O  # noqa: E402

COMMAND = "PY=$(scripts/setup_ort_env.sh | tail -n1) && $PY scripts/make_fixtures.py"

NOTE = "héllo ✓ — ünïcødé 🚀"


def _import_training():
    """Import onnxruntime.training's artifacts/api without its package __init__ (which imports
    torch for ORTModule and friends; the on-device training pieces do not need it)."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    if "onnxruntime.training" not in sys.modules:
        pkg = types.ModuleType("onnxruntime.training")
        pkg.__path__ = [os.path.join(os.path.dirname(onnxruntime.__file__), "training")]
        sys.modules["onnxruntime.training"] = pkg
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    from onnxruntime.training.api.lr_scheduler import LinearLRScheduler

    return artifacts, CheckpointState, Module, Optimizer, LinearLRScheduler


@contextlib.contextmanager
def _quiet_fds():
    """generate_artifacts makes ORT log every graph transformer at INFO level to the process's
    stdout/stderr, ignoring the default severity; silence the file descriptors meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def mlp_model(seed: int):
    """input[batch,4] -> fc1 (4x8) -> relu -> fc2 (8x3) -> output, float32, opset 17, IR 9."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {
        "fc1.weight": rng.standard_normal((4, 8)).astype(np.float32),
        "fc1.bias": (0.1 * rng.standard_normal(8)).astype(np.float32),
        "fc2.weight": rng.standard_normal((8, 3)).astype(np.float32),
        "fc2.bias": (0.1 * rng.standard_normal(3)).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["input", "fc1.weight"], ["h0"]),
        helper.make_node("Add", ["h0", "fc1.bias"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "fc2.weight"], ["h3"]),
        helper.make_node("Add", ["h3", "fc2.bias"], ["output"]),
    ]
    return mlp_model_of("mlp", nodes, inits)


def mlp_model_of(name: str, nodes: list, inits: dict[str, np.ndarray]):
    """A float32 model ``input[batch,4] -> output[batch,3]`` of ``nodes`` with ``inits`` as its
    initializers, opset 17, IR 9 (what ORT 1.19.2 reads), checked by onnx."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model


TRAINABLE = ["fc1.weight", "fc1.bias", "fc2.weight"]
FROZEN = ["fc2.bias"]


def make_artifacts(
    art: str,
    seed: int,
    optim: str = "adamw",
    nominal: bool = False,
    model=None,
    trainable: list[str] = TRAINABLE,
    frozen: list[str] = FROZEN,
):
    """generate_artifacts for ``model`` (default ``mlp_model(seed)``; MSE loss, ``optim`` "adamw" or
    "sgd") into ``art``; returns the onnxruntime.training pieces (as ``_import_training``). Also used
    by the modules of tests/ort that run under an ORT venv (compat_parity_runner.py,
    release_train.py) and by make_artifact_fixtures.py."""
    training = _import_training()
    artifacts = training[0]
    # nominal_checkpoint only when asked: ORT 1.17.3 (release_train.py) predates the argument
    extra = {"nominal_checkpoint": True} if nominal else {}
    os.makedirs(art, exist_ok=True)
    with _quiet_fds():
        artifacts.generate_artifacts(
            mlp_model(seed) if model is None else model,
            requires_grad=trainable,
            frozen_params=frozen,
            loss=artifacts.LossType.MSELoss,
            optimizer=artifacts.OptimType.AdamW if optim == "adamw" else artifacts.OptimType.SGD,
            artifact_directory=art,
            **extra,
        )
    return training


def train(workdir: str, optim: str, steps: int, seed: int, initial_lr: float | None, nominal: bool = False):
    """generate_artifacts + `steps` training steps. Returns (CheckpointState, artifact dir, losses)."""
    art = os.path.join(workdir, f"artifacts_{optim}_{seed}")
    _, CheckpointState, Module, Optimizer, LinearLRScheduler = make_artifacts(art, seed, optim, nominal)
    state = CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = Module(os.path.join(art, "training_model.onnx"), state, os.path.join(art, "eval_model.onnx"))
    opt = Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    sched = LinearLRScheduler(opt, 1, 2 * steps, initial_lr) if initial_lr is not None else None
    module.train()
    rng = np.random.default_rng(seed + 1000)
    losses = []
    for _ in range(steps):
        x = rng.standard_normal((5, 4)).astype(np.float32)
        y = rng.standard_normal((5, 3)).astype(np.float32)
        losses.append(float(module(x, y)))
        opt.step()
        if sched is not None:
            sched.step()
        module.lazy_reset_grad()
    return state, art, losses


def set_properties(state, props: dict[str, Any]) -> None:
    for k, v in props.items():
        state.properties[k] = v


def save_protos(path: str, trainable: dict[str, np.ndarray], frozen: dict[str, np.ndarray], nominal=False):
    from onnx import numpy_helper
    from onnxruntime.capi import _pybind_state as C

    C.save_checkpoint(
        [
            numpy_helper.from_array(np.array(v, order="C"), k).SerializeToString()
            for k, v in trainable.items()
        ],
        [numpy_helper.from_array(np.array(v, order="C"), k).SerializeToString() for k, v in frozen.items()],
        path,
        nominal,
    )


def add_properties_and_resave(path: str, props: dict[str, Any]) -> None:
    from onnxruntime.capi import _pybind_state as C

    state = C.load_checkpoint(path)
    for k, v in props.items():
        state.add_property(k, v)
    C.save_checkpoint(state, path, False)


# ---------------------------------------------------------------------------------------------


def make_all(out: str, work: str) -> dict[str, str]:
    """Write every fixture into `out`; return {file name: description}."""
    _, CheckpointState, *_ = _import_training()
    from onnxruntime.capi import _pybind_state as C

    made: dict[str, str] = {}

    def p(name: str) -> str:
        return os.path.join(out, name)

    # 1. AdamW, 3 steps -------------------------------------------------------------------
    state, art, losses = train(work, "adamw", steps=3, seed=1, initial_lr=None, nominal=True)
    shutil.copyfile(os.path.join(art, "checkpoint"), p("mlp_fresh_artifact.ckpt"))
    made["mlp_fresh_artifact.ckpt"] = (
        "the `checkpoint` generate_artifacts writes (AdamW artifacts): fc1.weight, fc1.bias, fc2.weight "
        "trainable, fc2.bias frozen, float32; tensors in model order (not sorted), no properties"
    )
    shutil.copyfile(os.path.join(art, "nominal_checkpoint"), p("mlp_nominal.ckpt"))
    made["mlp_nominal.ckpt"] = (
        "generate_artifacts(nominal_checkpoint=True): is_nominal_state, names and data types only "
        "(no dims, no raw_data), model order"
    )
    props = {
        "epoch": 3,
        "best_loss": float(np.float32(min(losses))),
        "note": NOTE,
        "ĉefa_ŝlosilo": "ŝlosila valoro",
    }
    set_properties(state, props)
    CheckpointState.save_checkpoint(state, p("mlp_adamw_with_optimizer.ckpt"), include_optimizer_state=True)
    made["mlp_adamw_with_optimizer.ckpt"] = (
        "3 AdamW steps (seed 1), saved with optimizer state: group0, step 3, initial_learning_rate "
        "0.001, momentum0/momentum1 per trainable parameter; properties epoch=3 (int), best_loss "
        "(float), note and ĉefa_ŝlosilo (unicode str)"
    )
    CheckpointState.save_checkpoint(state, p("mlp_adamw_params_only.ckpt"), include_optimizer_state=False)
    made["mlp_adamw_params_only.ckpt"] = "the same state saved with include_optimizer_state=False"

    # 2. Edit that state in ORT and save again -------------------------------------------
    edited = C.load_checkpoint(p("mlp_adamw_with_optimizer.ckpt"))
    # copy_parameter_from needs a training session; OrtValue.update_inplace writes the CPU buffer.
    edited.get_parameter("fc1.bias").data.update_inplace(np.linspace(-1, 1, 8, dtype=np.float32))
    edited.add_property("epoch", 4)
    edited.add_property("edited_by", "ort_oracle ✎")
    edited.add_property("scale", 2.5)
    C.save_checkpoint(edited, p("mlp_adamw_edited.ckpt"), True)
    made["mlp_adamw_edited.ckpt"] = (
        "mlp_adamw_with_optimizer.ckpt loaded in ORT, fc1.bias replaced by linspace(-1, 1, 8) "
        "(OrtValue.update_inplace), epoch set to 4, edited_by (str) and scale=2.5 added, saved with "
        "optimizer state"
    )

    # 3. SGD, 5 steps, initial lr 0.05 ------------------------------------------------------
    state, _, losses = train(work, "sgd", steps=5, seed=2, initial_lr=0.05)
    set_properties(state, {"epoch": 5, "last_loss": float(np.float32(losses[-1])), "note": NOTE})
    CheckpointState.save_checkpoint(state, p("mlp_sgd_with_optimizer.ckpt"), include_optimizer_state=True)
    made["mlp_sgd_with_optimizer.ckpt"] = (
        "5 SGD steps (seed 2) under LinearLRScheduler(initial_lr=0.05): group0, step 5, "
        "initial_learning_rate 0.05, one momentum0 per trainable parameter; properties epoch, last_loss, note"
    )

    # 4. Many dtypes, via save_checkpoint on TensorProtos -------------------------------------
    rng = np.random.default_rng(3)
    trainable = {
        "w.f32": rng.standard_normal((3, 4)).astype(np.float32),
        "w.f64": rng.standard_normal((2, 2)).astype(np.float64),
        "w.scalar": np.array(-0.0, np.float32),
    }
    frozen = {
        "f.bool": np.array([[True, False, True], [False, False, True]]),
        "f.empty": np.zeros((0, 3), np.float32),
        "f.f32.special": np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], np.float32),
        "f.f64.special": np.array([np.nan, -np.inf, 5e-324, np.pi], np.float64),
        "f.i16": np.array([-32768, 32767, 0], np.int16),
        "f.i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "f.i64": np.array([-(2**63), 2**63 - 1, 42], np.int64),
        "f.i8": np.array([-128, 127], np.int8),
        "f.u16": np.array([0, 65535], np.uint16),
        "f.u32": np.array([0, 2**32 - 1], np.uint32),
        "f.u64": np.array([0, 2**64 - 1], np.uint64),
        "f.u8": np.arange(0, 256, 51, dtype=np.uint8),
        "f.scalar_i64": np.array(7, np.int64),
        "f.5d": rng.integers(-100, 100, size=(1, 2, 1, 3, 2)).astype(np.int32),
    }
    save_protos(p("dtypes.ckpt"), trainable, frozen)
    add_properties_and_resave(
        p("dtypes.ckpt"),
        {
            "i_max": 2**63 - 1,
            "i_min": -(2**63),
            "f_third": 1.0 / 3.0,
            "f_neg": -1e-30,
            "s_empty": "",
            "s_nul": "a\0b",
        },
    )
    made["dtypes.ckpt"] = (
        "save_checkpoint of TensorProtos then add_property and resave: every dtype ORT 1.19.2 accepts "
        "(float32/64, (u)int8/16/32/64, bool), scalars, an empty [0,3] tensor, a 5-d tensor, NaN/inf/"
        "-0/denormals; int64 extremes, float, empty and NUL-containing string properties"
    )

    # 5. Many small tensors --------------------------------------------------------------------
    rng = np.random.default_rng(4)
    trainable, frozen = {}, {}
    for i in range(300):
        shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 4))))
        name = f"layers.{i:03d}.{'wéight' if i % 7 == 0 else 'weight' if i % 2 else 'bias'}"
        if i % 3 == 0:
            frozen[name] = rng.integers(-9, 9, size=shape).astype(np.int32)
        else:
            trainable[name] = rng.standard_normal(shape).astype(np.float32)
    save_protos(p("many_tensors.ckpt"), trainable, frozen)
    add_properties_and_resave(p("many_tensors.ckpt"), {f"prop{i:02d}": i for i in range(20)})
    made["many_tensors.ckpt"] = (
        "300 tiny tensors (0-3 dims of 1-3), 200 float32 trainable and 100 int32 frozen, some with "
        "unicode names; 20 int properties"
    )

    # 6. Nominal from save_checkpoint, and a parameters-only file ------------------------------
    save_protos(
        p("nominal_protos.ckpt"),
        {"a.weight": np.ones((2, 3), np.float32)},
        {"b.int": np.ones(4, np.int64), "c.double": np.ones(1, np.float64)},
        nominal=True,
    )
    made["nominal_protos.ckpt"] = (
        "save_checkpoint(..., nominal_checkpoint=True) on TensorProtos of float32 (trainable), int64 "
        "and float64 (frozen): data types kept, dims and data dropped"
    )
    save_protos(p("trainable_only.ckpt"), {"only.weight": np.arange(4, dtype=np.float32)}, {})
    made["trainable_only.ckpt"] = "one trainable float32 tensor, nothing frozen, no properties"

    # 7. Empty states: ORT's CheckpointState save writes no module_state table at all -------------
    save_protos(p("empty_state.ckpt"), {}, {})
    empty = C.load_checkpoint(p("empty_state.ckpt"))
    C.save_checkpoint(empty, p("empty_state.ckpt"), True)
    made["empty_state.ckpt"] = (
        "an empty CheckpointState saved by ORT: no module_state table (ORT loads that as no "
        "parameters), an empty optimizer_groups vector, no property bag"
    )
    empty.add_property("only", "property ✓")
    C.save_checkpoint(empty, p("empty_state_with_property.ckpt"), True)
    made["empty_state_with_property.ckpt"] = "the same with one str property: no module_state, a property bag"
    return made


def manifest(path: str, description: str) -> dict[str, Any]:
    meta, arrays = O.inspect_checkpoint(path)
    written = meta["as_written"]
    resaved = meta["resaved"]

    def sha(key: str | None) -> str | None:
        return (
            None if key is None else hashlib.sha256(np.ascontiguousarray(arrays[key]).tobytes()).hexdigest()
        )

    if meta["is_nominal"]:
        params = [
            {
                "name": t["name"],
                "trainable": flag,
                "data_type": t["data_type"],
                "dtype": O.NP_DTYPES[t["data_type"]].name,
                "dims": t["dims"],
                "sha256": None,
            }
            for flag, group in ((True, written["trainable"]), (False, written["frozen"]))
            for t in group
        ]
        params.sort(key=lambda d: d["name"].encode("utf-8"))
    else:
        params = [
            {
                "name": q["name"],
                "trainable": q["trainable"],
                "data_type": q["data_type"],
                "dtype": q["dtype"],
                "dims": q["shape"],
                "sha256": sha(q["key"]),
            }
            for q in meta["parameters"]
        ]
    groups = []
    for g in resaved["optimizer_groups"]:
        groups.append(
            {
                "name": g["name"],
                "step": g["step"],
                "initial_learning_rate": g["initial_learning_rate"],
                "states": {
                    s["param"]: {
                        m["name"]: {
                            "data_type": m["data_type"],
                            "dtype": O.NP_DTYPES[m["data_type"]].name,
                            "dims": m["dims"],
                            "sha256": sha(m["key"]),
                        }
                        for m in s["momentums"]
                    }
                    for s in g["states"]
                },
            }
        )
    return {
        "file": os.path.basename(path),
        "description": description,
        "size": meta["size"],
        "sha256": meta["sha256"],
        "oracle": meta["versions"],
        "version": written["version"],
        "is_nominal": written["is_nominal"],
        "has_external_data": written["has_external_data"],
        "file_order": {
            "trainable": [t["name"] for t in written["trainable"]],
            "frozen": [t["name"] for t in written["frozen"]],
        },
        "parameters": params,
        "optimizer_groups": groups,
        "properties": meta["properties"],
    }


def format_manifest(m: dict[str, Any]) -> str:
    """JSON with one line per parameter / momentum, to keep big manifests short and diffable."""

    def one(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False)

    parts = []
    for k, v in m.items():
        if k in ("parameters", "properties") and v:
            body = "[\n" + ",\n".join("  " + one(x) for x in v) + "\n ]"
        elif k == "optimizer_groups" and v:
            groups = []
            for g in v:
                head = ", ".join(f"{one(a)}: {one(b)}" for a, b in g.items() if a != "states")
                states = ",\n".join(
                    f"    {one(param)}: {{" + ", ".join(f"{one(n)}: {one(t)}" for n, t in moms.items()) + "}"
                    for param, moms in g["states"].items()
                )
                groups.append(f'  {{{head}, "states": {{\n{states}\n  }}}}')
            body = "[\n" + ",\n".join(groups) + "\n ]"
        else:
            body = one(v)
        parts.append(f" {one(k)}: {body}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_readme(out: str, made: dict[str, str], manifests: dict[str, dict[str, Any]]) -> None:
    lines = [
        "# Checkpoints written by ONNX Runtime 1.19.2",
        "",
        "Generated by `scripts/make_fixtures.py` (do not edit by hand). Regenerate with:",
        "",
        "```sh",
        COMMAND,
        "```",
        "",
        "`$PY scripts/make_fixtures.py --check` regenerates into a temporary directory and fails if",
        "anything differs. Each `X.json` is a manifest of `X.ckpt` made by reading it back with ORT",
        "(see the script's docstring for the fields): names, trainable flags, dtypes, dims, sha256 of",
        "the values, optimizer groups (step, initial learning rate, momentums) and properties.",
        "",
        "| file | bytes | params | optimizer | properties | what it is |",
        "|---|---:|---:|---|---:|---|",
    ]
    for name, desc in made.items():
        m = manifests[name]
        opt = (
            ", ".join(
                f"{g['name']} step {g['step']}, {len(next(iter(g['states'].values()), {}))} momentum(s)"
                for g in m["optimizer_groups"]
            )
            or "-"
        )
        lines.append(
            f"| {name} | {m['size']} | {len(m['parameters'])} | {opt} | {len(m['properties'])} | {desc} |"
        )
    lines += [
        "",
        "Facts seen in these files: version 2; `save_checkpoint` of a CheckpointState sorts tensors,",
        "optimizer states and properties by name (bytewise), while `save_checkpoint` of TensorProtos",
        "(which `generate_artifacts` uses) keeps the order it is given; `external_data_offset` is -1;",
        "nominal tensors carry an empty dims vector and an empty but present raw_data vector (ORT's",
        'loader rejects a tensor whose raw_data is absent: "Expected: raw data or external data',
        'offset"); an empty CheckpointState is saved without a module_state table, which ORT loads',
        "as no parameters; a -0.0 float property is stored as the default and reads back as 0.0;",
        "ORT 1.19.2 refuses float16/bfloat16/float8/int4/string/complex tensors (load and save).",
        "",
    ]
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def generate(out: str) -> list[str]:
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ortckpt_fixtures_") as work:
        made = make_all(out, work)
    manifests = {}
    for name, desc in made.items():
        m = manifest(os.path.join(out, name), desc)
        manifests[name] = m
        with open(os.path.join(out, name[: -len(".ckpt")] + ".json"), "w", encoding="utf-8") as f:
            f.write(format_manifest(m))
    write_readme(out, made, manifests)
    return sorted(os.listdir(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: tests/data)")
    ap.add_argument("--check", action="store_true", help="regenerate in a temp dir and compare with --out")
    args = ap.parse_args(argv)
    return write_or_check(args.out, args.check, generate)


def write_or_check(out: str, check: bool, generate_into) -> int:
    """``generate_into(out)``, or with ``check`` generate into a temporary directory and compare
    every file with ``out`` (exit status 1 when one differs or is missing)."""
    if not check:
        files = generate_into(out)
        print(f"wrote {len(files)} files to {out}")
        return 0
    with tempfile.TemporaryDirectory(prefix="ortckpt_fixtures_check_") as tmp:
        files = generate_into(tmp)
        bad = [
            f
            for f in files
            if not os.path.exists(os.path.join(out, f))
            or not filecmp.cmp(os.path.join(tmp, f), os.path.join(out, f), shallow=False)
        ]
        if bad:
            print("differ from a fresh run: " + ", ".join(bad), file=sys.stderr)
            return 1
    print(f"{len(files)} files match a fresh run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
