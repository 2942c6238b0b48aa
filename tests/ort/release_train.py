"""Run by an old ORT release's python (tests/ort/test_ort_releases.py, through
``tests.helpers.ort.run_module``, which puts scripts/ on the path): train the fixture MLP for a few
AdamW steps, set properties, and save with optimizer state to argv[1].

    python -m tests.ort.release_train OUT.ckpt
"""

from __future__ import annotations

import os
import sys
import tempfile

import make_fixtures as F
import numpy as np


def main(out: str) -> None:
    work = tempfile.mkdtemp()
    _, CheckpointState, Module, Optimizer, _ = F.make_artifacts(work, seed=3)
    state = CheckpointState.load_checkpoint(os.path.join(work, "checkpoint"))
    # module and optimizer stay alive until the save
    module = Module(os.path.join(work, "training_model.onnx"), state, os.path.join(work, "eval_model.onnx"))
    opt = Optimizer(os.path.join(work, "optimizer_model.onnx"), module)
    module.train()
    rng = np.random.default_rng(5)
    for _ in range(3):
        module(rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32))
        opt.step()
        module.lazy_reset_grad()
    state.properties["epoch"] = 3
    state.properties["best"] = 0.25
    state.properties["note"] = "héllo"
    CheckpointState.save_checkpoint(state, out, include_optimizer_state=True)
    del opt, module


if __name__ == "__main__":
    main(sys.argv[1])
