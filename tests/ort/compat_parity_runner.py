"""Run the parity cases (compat_parity_cases.py) against ORT 1.19.2's own
``onnxruntime.training.api``; run by the ORT side venv's python through
``tests.helpers.ort.run_module`` (from the repository, with scripts/ on the path):

    python -m tests.ort.compat_parity_runner WORKDIR OUT.json

Makes training artifacts for the fixture MLP in WORKDIR (their checkpoint is the "params"
checkpoint of the cases; ORT needs the training model for its sessions) and writes
``{"checkpoints": {which: path}, "results": {case: observations}}`` to OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

import make_fixtures as F

from tests.ort import compat_parity_cases as cases

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class OrtEnv:
    def __init__(self, api: Any, Module: Any, art: str, checkpoints: dict[str, str], scratch: str) -> None:
        self.api = api
        self._module = Module
        self._art = art
        self._checkpoints = checkpoints
        self._scratch = scratch
        self._alive: list[Any] = []  # sessions must outlive the states that use them

    def load(self, which: str, session: bool = False) -> Any:
        state = self.api.CheckpointState.load_checkpoint(self._checkpoints[which])
        if session:
            training = os.path.join(self._art, "training_model.onnx")
            evaluation = os.path.join(self._art, "eval_model.onnx")
            self._alive.append(self._module(training, state, evaluation))
        return state

    def path(self, name: str) -> str:
        os.makedirs(self._scratch, exist_ok=True)
        return os.path.join(self._scratch, name)


def main(workdir: str, out: str) -> int:
    art = os.path.join(workdir, "artifacts")
    _, _, Module, _, _ = F.make_artifacts(art, seed=1)
    import onnxruntime.training.api as api

    data = os.path.join(REPO, "tests", "data")
    checkpoints = {
        "params": os.path.join(art, "checkpoint"),
        "optimizer": os.path.join(data, "mlp_adamw_with_optimizer.ckpt"),
        "nominal": os.path.join(data, "mlp_nominal.ckpt"),
    }
    results: dict[str, Any] = {}
    for name, case in cases.CASES.items():
        env = OrtEnv(api, Module, art, checkpoints, os.path.join(workdir, "ort", name))
        try:
            results[name] = json.loads(json.dumps(case(env)))
        except Exception:
            results[name] = {"crash": traceback.format_exc()}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"checkpoints": checkpoints, "results": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
