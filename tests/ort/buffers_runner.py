"""Run by ORT 1.19.2's python (tests/ort/test_ort_buffers.py, through
``tests.helpers.ort.run_module``, which puts scripts/ on the path): what the parameter-buffer tests
ask of the real ``onnxruntime.training.api.Module``.

    python -m tests.ort.buffers_runner make WORKDIR
    python -m tests.ort.buffers_runner copy WORKDIR

``make``: ``generate_artifacts`` for the fixture MLP with ``fc1.bias`` frozen (a frozen parameter
between trainable ones in graph order) and a nominal checkpoint too, into ``WORKDIR/art``; writes
``get_contiguous_parameters(trainable_only=...)`` of the full checkpoint to ``ort_trainable.bin``
and ``ort_all.bin`` (raw float32) and ``get_parameters_size`` both ways to ``make.json``.

``copy``: for each job of ``WORKDIR/jobs.json`` (``checkpoint``, ``buffer``, ``trainable_only``,
``out``): a fresh state and Module, ``copy_buffer_to_parameters`` of the buffer file, then
``get_contiguous_parameters(trainable_only=False)`` to ``out + ".all.bin"`` and the state saved to
``out``. Buffers and sizes of ``WORKDIR/extra.ckpt`` (a checkpoint with a parameter that is not
an input of the training graph) to ``extra_*.bin`` and ``extra.json``. Also records ORT's
refusals (wrong buffer length; a nominal state with ``trainable_only=True``) in ``copy.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import make_fixtures as F
import numpy as np

TRAINABLE = ["fc1.weight", "fc2.weight", "fc2.bias"]
FROZEN = ["fc1.bias"]


def _training():
    training = F._import_training()
    from onnxruntime import OrtValue

    return training, OrtValue


def make(work: Path) -> None:
    (artifacts, CheckpointState, Module, _, _), _ = _training()
    art = work / "art"
    art.mkdir(parents=True, exist_ok=True)
    with F._quiet_fds():
        artifacts.generate_artifacts(
            F.mlp_model(7),
            requires_grad=TRAINABLE,
            frozen_params=FROZEN,
            loss=artifacts.LossType.MSELoss,
            optimizer=artifacts.OptimType.AdamW,
            artifact_directory=str(art),
            nominal_checkpoint=True,
        )
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(str(art / "training_model.onnx"), state)
    sizes = {}
    for label, only in (("trainable", True), ("all", False)):
        module.get_contiguous_parameters(trainable_only=only).numpy().astype("<f4").tofile(
            work / f"ort_{label}.bin"
        )
        sizes[label] = module.get_parameters_size(trainable_only=only)
    (work / "make.json").write_text(json.dumps(sizes))


def copy(work: Path) -> None:
    (_, CheckpointState, Module, _, _), OrtValue = _training()
    art = work / "art"
    model = str(art / "training_model.onnx")
    jobs = json.loads((work / "jobs.json").read_text())
    for job in jobs:
        state = CheckpointState.load_checkpoint(str(work / job["checkpoint"]))
        module = Module(model, state)
        values = np.fromfile(work / job["buffer"], dtype="<f4")
        module.copy_buffer_to_parameters(
            OrtValue.ortvalue_from_numpy(values)._ortvalue, job["trainable_only"]
        )
        after = module.get_contiguous_parameters(trainable_only=False).numpy()
        after.astype("<f4").tofile(work / (job["out"] + ".all.bin"))
        CheckpointState.save_checkpoint(state, str(work / job["out"]))
        del module
    # a checkpoint with a parameter the training graph does not have (written by ortckpt)
    extra = CheckpointState.load_checkpoint(str(work / "extra.ckpt"))
    extra_module = Module(model, extra)
    extra_sizes = {}
    for label, only in (("trainable", True), ("all", False)):
        values = extra_module.get_contiguous_parameters(trainable_only=only).numpy()
        values.astype("<f4").tofile(work / f"extra_{label}.bin")
        extra_sizes[label] = extra_module.get_parameters_size(trainable_only=only)
    (work / "extra.json").write_text(json.dumps(extra_sizes))
    del extra_module
    refusals = {}
    state = CheckpointState.load_checkpoint(str(art / "checkpoint"))
    module = Module(model, state)
    size = module.get_parameters_size(trainable_only=True)
    try:
        module.copy_buffer_to_parameters(
            OrtValue.ortvalue_from_numpy(np.zeros(size + 1, np.float32))._ortvalue, True
        )
    except Exception as exc:  # what ORT raises is the point: recorded, not handled
        refusals["wrong_length"] = str(exc)
    nominal = CheckpointState.load_checkpoint(str(art / "nominal_checkpoint"))
    nominal_module = Module(model, nominal)
    try:
        nominal_module.copy_buffer_to_parameters(
            OrtValue.ortvalue_from_numpy(np.zeros(size, np.float32))._ortvalue, True
        )
    except Exception as exc:
        refusals["nominal_trainable_only"] = str(exc)
    (work / "copy.json").write_text(json.dumps(refusals))


if __name__ == "__main__":
    {"make": make, "copy": copy}[sys.argv[1]](Path(os.path.abspath(sys.argv[2])))
