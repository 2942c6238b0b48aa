"""A small model and its device uploads for the server-state tests (optimizers, clipping, resume)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ortckpt

SHAPES = {"fc.weight": (6, 4), "fc.bias": (4,)}


def initial_model() -> ortckpt.CheckpointState:
    rng = np.random.default_rng(0)
    return ortckpt.CheckpointState(
        {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()},
        frozen={"scale": np.ones(3, np.float32)},
        properties={"epoch": 1},
    )


def updates(round_: int, count: int = 4, scale: float = 0.05) -> list[dict[str, np.ndarray[Any, Any]]]:
    """Each device's update of round ``round_`` (a drift shared by all, plus its own noise)."""
    rng = np.random.default_rng(1000 + round_)
    drift = {k: rng.normal(0.02, scale, s) for k, s in SHAPES.items()}
    return [{k: drift[k] + rng.normal(0, scale, s) for k, s in SHAPES.items()} for _ in range(count)]


def trained(
    start: ortckpt.CheckpointState, update: dict[str, np.ndarray[Any, Any]], samples: int
) -> ortckpt.CheckpointState:
    """A device's upload: ``start`` moved by ``update`` (float32, as a device computes it)."""
    return ortckpt.CheckpointState(
        {k: (start.parameters[k].data + update[k]).astype(np.float32) for k in SHAPES},
        frozen={"scale": start.parameters["scale"].data},
        properties={"samples": samples},
    )


def with_update_norms(
    start: ortckpt.CheckpointState, norms: list[float], seed: int
) -> list[ortckpt.CheckpointState]:
    """Uploads whose updates (from ``start``) have the given L2 norms over all trainable tensors."""
    rng = np.random.default_rng(seed)
    out = []
    for norm in norms:
        raw = {k: rng.standard_normal(s) for k, s in SHAPES.items()}
        total = float(np.sqrt(sum(float(np.sum(v * v)) for v in raw.values())))
        out.append(trained(start, {k: v * (norm / total) for k, v in raw.items()}, 10))
    return out
