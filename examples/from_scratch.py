"""Build a checkpoint from numpy arrays, with AdamW-style optimizer state, and save it twice: for
resuming training (with the optimizer state) and for deployment (without)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

import ortckpt
from ortckpt import CheckpointState, OptimizerGroup

rng = np.random.default_rng(0)
weights = {
    "encoder.layer0.weight": rng.standard_normal((16, 8)).astype(np.float32),
    "encoder.layer0.bias": np.zeros(8, np.float32),
}
state = CheckpointState(
    weights,
    frozen={"embedding.weight": rng.standard_normal((100, 16)).astype(np.float32)},
    properties={"epoch": 1, "best_loss": 0.25, "run": "example"},
    optimizer={
        "group0": OptimizerGroup(
            step=10,
            initial_learning_rate=1e-3,
            states={
                name: {"momentum0": np.zeros_like(w), "momentum1": np.zeros_like(w)}
                for name, w in weights.items()
            },
        )
    },
)

with tempfile.TemporaryDirectory() as tmp:
    train = Path(tmp) / "train.ckpt"
    deploy = Path(tmp) / "deploy.ckpt"
    ortckpt.save(state, train)
    ortckpt.save(state, deploy, include_optimizer_state=False)
    loaded = ortckpt.load(train)
    assert loaded.optimizer is not None and ortckpt.load(deploy).optimizer is None
    assert np.array_equal(
        loaded.parameters["embedding.weight"].data, state.parameters["embedding.weight"].data
    )
    print(loaded)
    print(f"train.ckpt {train.stat().st_size} bytes, deploy.ckpt {deploy.stat().st_size} bytes")
