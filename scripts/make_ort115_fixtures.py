#!/usr/bin/env python3
"""Make the ORT 1.15 checkpoint-folder fixtures in tests/data/ort115/ with the real ONNX Runtime 1.15.1.

ORT 1.15 (``onnxruntime-training==1.15.1``, a 224 MB wheel that also needs its own Python 3.10
venv) is too heavy to install on every CI run, so its output is committed: each fixture is the
folder ORT wrote, next to ``<name>.json``, a manifest of what ORT itself sees in it.

    python3.10 -m venv /tmp/ort115
    /tmp/ort115/bin/pip install onnxruntime-training==1.15.1 "numpy<2" onnx==1.14.0
    /tmp/ort115/bin/python scripts/make_ort115_fixtures.py tests/data/ort115

The manifests ("ortckpt-ort115-manifest/1"):

* ``parameters``: name -> trainable, dtype, shape and the sha256 of the values, as ORT sees them:
  ``get_model_after_loading_checkpoint`` (ORT's ``LoadCheckpointToModel``) fills a model's
  initializers from the folder. For folders with optimizer state, that function would also read
  the momentum files (they end in ``tensors.pbseq`` too), so the values of those come from the same
  state saved without optimizer state (``params_from``); the trainable flags follow the file
  ORT wrote them to.
* ``properties``: name -> value, from ORT's ``CheckpointState.get_property`` after
  ``load_checkpoint(folder)``.
* ``optimizer``: group -> step, initial_learning_rate and momentum sha256s. ORT 1.15's Python API
  does not expose optimizer state, so these come from the training run: the number of steps taken,
  ``Optimizer.get_learning_rate()``, and the momentum values read from the files with onnx
  (a second reader, independent of ortckpt).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from typing import Any

import make_fixtures as F  # a sibling: scripts/ is on the path when this runs as a script
import numpy as np

FORMAT = "ortckpt-ort115-manifest/1"
STEPS = 3


def sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def read_pbseq(path: str) -> list[Any]:
    """The TensorProtos of a .pbseq file (varint count, then varint size + message each)."""
    import onnx

    data = open(path, "rb").read()
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    out = []
    for _ in range(varint()):
        size = varint()
        proto = onnx.TensorProto()
        proto.ParseFromString(data[pos : pos + size])
        pos += size
        out.append(proto)
    assert pos == len(data), path
    return out


def ort_parameters(folder: str, flags_folder: str | None = None) -> dict[str, Any]:
    """Parameter values as ORT's LoadCheckpointToModel puts them into a model's initializers."""
    import onnx
    from onnx import helper, numpy_helper
    from onnxruntime.capi import _pybind_state as C

    flags: dict[str, bool] = {}
    for entry, trainable in (("paramtrain_tensors.pbseq", True), ("paramfrozen_tensors.pbseq", False)):
        path = os.path.join(flags_folder or folder, entry)
        if os.path.exists(path):
            flags.update({p.name: trainable for p in read_pbseq(path)})
    # a model whose initializers are placeholders with the checkpoint's names
    inits = [helper.make_tensor(name, onnx.TensorProto.FLOAT, [1], [0.0]) for name in flags]
    graph = helper.make_graph([], "g", [], [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = onnx.ModelProto()
    loaded.ParseFromString(C.get_model_after_loading_checkpoint(folder, model.SerializeToString()))
    out = {}
    for init in loaded.graph.initializer:
        arr = numpy_helper.to_array(init)
        out[init.name] = {
            "trainable": flags[init.name],
            "dtype": arr.dtype.name,
            "shape": list(arr.shape),
            "sha256": sha(arr),
        }
    return dict(sorted(out.items()))


def ort_properties(folder: str, names: list[str]) -> dict[str, Any]:
    from onnxruntime.capi import _pybind_state as C

    state = C.load_checkpoint(folder)  # ORT must load the folder
    return {name: state.get_property(name) for name in sorted(names)}


def momentums(folder: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for entry in sorted(os.listdir(folder)):
        if entry.startswith("optim_") and entry.endswith("_tensors.pbseq"):
            momentum = entry.split("_")[2]
            from onnx import numpy_helper

            for proto in read_pbseq(os.path.join(folder, entry)):
                out.setdefault(proto.name, {})[momentum] = sha(numpy_helper.to_array(proto))
    return dict(sorted(out.items()))


def train_and_save(out: str, optim: str, seed: int, props: dict[str, Any]) -> tuple[str, str, float]:
    """Artifacts + STEPS steps; saves <optim>_trained (with optimizer) and <optim>_params_only."""
    artifacts, CheckpointState, Module, Optimizer, _ = F._import_training()
    from onnxruntime.capi import _pybind_state as C

    work = os.path.join(out, f".work_{optim}")
    os.makedirs(work, exist_ok=True)
    with F._quiet_fds():
        artifacts.generate_artifacts(
            F.mlp_model(seed),
            requires_grad=F.TRAINABLE,
            frozen_params=F.FROZEN,
            loss=artifacts.LossType.MSELoss,
            optimizer=artifacts.OptimType.AdamW if optim == "adamw" else artifacts.OptimType.SGD,
            artifact_directory=work,
        )
    fresh = os.path.join(out, f"{optim}_fresh_artifact")
    shutil.copytree(os.path.join(work, "checkpoint"), fresh)
    state = CheckpointState.load_checkpoint(fresh)
    # the module and optimizer must stay alive until the state is saved (ORT 1.15 crashes otherwise)
    module = Module(os.path.join(work, "training_model.onnx"), state, os.path.join(work, "eval_model.onnx"))
    opt = Optimizer(os.path.join(work, "optimizer_model.onnx"), module)
    module.train()
    lr = float(opt.get_learning_rate())  # ORT's view; no scheduler, so it stays the initial rate
    rng = np.random.default_rng(seed + 1000)
    for _ in range(STEPS):
        module(rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32))
        opt.step()
        module.lazy_reset_grad()
    for name, value in props.items():
        state[name] = value
    trained = os.path.join(out, f"{optim}_trained")
    params_only = os.path.join(out, f"{optim}_params_only")
    C.save_checkpoint(state._state, trained, True)
    C.save_checkpoint(state._state, params_only, False)
    del opt, module
    shutil.rmtree(work)
    return trained, params_only, lr


def save_dtypes(out: str) -> str:
    """ORT's TensorProto save path with one tensor per dtype ORT 1.15 handles."""
    from onnx import numpy_helper
    from onnxruntime.capi import _pybind_state as C

    rng = np.random.default_rng(7)
    trainable = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": rng.standard_normal(4),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    frozen = {
        "i64": np.array([-(2**63), 2**63 - 1, 0], np.int64),
        "i32": np.arange(-3, 3, dtype=np.int32).reshape(2, 3),
        "i8": np.array([-128, 127], np.int8),
        "u8": np.array([0, 255], np.uint8),
        "b": np.array([True, False, True]),
    }
    path = os.path.join(out, "dtypes")
    C.save_checkpoint(
        [numpy_helper.from_array(v, k).SerializeToString() for k, v in trainable.items()],
        [numpy_helper.from_array(v, k).SerializeToString() for k, v in frozen.items()],
        path,
    )
    return path


def manifest(
    folder: str,
    description: str,
    props: list[str],
    optimizer: dict[str, Any] | None,
    params_from: str | None = None,
) -> dict[str, Any]:
    import onnx
    import onnxruntime

    return {
        "format": FORMAT,
        "description": description,
        "made_by": {
            "onnxruntime-training": onnxruntime.__version__,
            "onnx": onnx.__version__,
            "numpy": np.__version__,
        },
        "files": sorted(os.listdir(folder)),
        "params_from": None if params_from is None else os.path.basename(params_from),
        "parameters": ort_parameters(params_from or folder, folder),
        "properties": ort_properties(folder, props),
        "optimizer": optimizer,
    }


README = """# Checkpoint folders written by ONNX Runtime 1.15.1

Made by `scripts/make_ort115_fixtures.py` with `onnxruntime-training==1.15.1` (do not edit by hand;
the script's docstring says how to rerun it). ORT 1.15 wrote a checkpoint as a folder of `.pbseq`
files (docs/format.md §11.2). Each `X.json` is a manifest of folder `X` from ORT's own view.

| folder | what it is |
|---|---|
| adamw_fresh_artifact | the `checkpoint` folder generate_artifacts writes (AdamW): paramtrain + paramfrozen |
| adamw_trained | 3 AdamW steps, properties epoch/best/note, saved with the optimizer state |
| adamw_params_only | the same state saved with include_optimizer_state=False |
| dtypes | save_checkpoint(trainable, frozen protos): float32, float64, int64, int32, int8, uint8, bool |

tests/test_compat_legacy.py checks that ortckpt reads every folder as its manifest says.
"""


def write_readme(out: str) -> None:
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write(README)


def main(argv: list[str]) -> int:
    out = os.path.abspath(argv[0] if argv else "tests/data/ort115")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    props = {"epoch": 3, "best": 0.25, "note": "héllo"}
    made: dict[str, dict[str, Any]] = {}
    for optim, seed in (("adamw", 1),):  # ORT 1.15 artifacts offer AdamW only
        trained, params_only, lr = train_and_save(out, optim, seed, props)
        group = {"group0": {"step": STEPS, "initial_learning_rate": lr, "momentums": momentums(trained)}}
        made[f"{optim}_trained"] = manifest(
            trained,
            f"{optim} artifacts after {STEPS} steps, properties, include_optimizer_state=True",
            list(props),
            group,
            params_only,
        )
        made[f"{optim}_params_only"] = manifest(
            params_only, "the same state saved with include_optimizer_state=False", list(props), None
        )
        fresh = os.path.join(out, f"{optim}_fresh_artifact")
        made[f"{optim}_fresh_artifact"] = manifest(fresh, "the checkpoint generate_artifacts wrote", [], None)
    dtypes = save_dtypes(out)
    made["dtypes"] = manifest(
        dtypes, "save_checkpoint(trainable_protos, frozen_protos) of mixed dtypes", [], None
    )
    for name, m in made.items():
        with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(m, f, indent=1, ensure_ascii=False, sort_keys=True)
            f.write("\n")
    write_readme(out)
    print("\n".join(sorted(made)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
