"""Checkpoint contents shared by the ORT tests: each case is the kwargs of a checkpoint
(trainable / frozen arrays, properties, nominal flag) that ORT can write and ortckpt can build.

Only data types ORT 1.19.2 accepts in checkpoints appear here: float32/64, (u)int8/16/32/64, bool.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SUPPORTED_DTYPES = [
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.bool_,
]


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def params_only() -> dict[str, Any]:
    r = _rng(10)
    return {
        "trainable": {
            "fc.weight": r.standard_normal((3, 4)).astype(np.float32),
            "fc.bias": r.standard_normal(4).astype(np.float32),
        }
    }


def frozen_and_trainable() -> dict[str, Any]:
    r = _rng(11)
    return {
        "trainable": {
            "enc.w": r.standard_normal((5, 2)).astype(np.float32),
            "dec.w": r.standard_normal((2, 5)).astype(np.float32),
        },
        "frozen": {
            "enc.b": r.standard_normal(2).astype(np.float32),
            "emb": r.standard_normal((7, 3)).astype(np.float32),
        },
    }


def frozen_only() -> dict[str, Any]:
    return {"frozen": {"table": np.arange(12, dtype=np.int64).reshape(3, 4)}}


def empty() -> dict[str, Any]:
    return {}


def properties() -> dict[str, Any]:
    big = "αβγ✓🚀" * 2000
    return {
        "trainable": {"w": np.ones((2, 2), np.float32)},
        "properties": {
            "int_zero": 0,
            "int_neg": -1,
            "int_max": 2**63 - 1,
            "int_min": -(2**63),
            "float_tenth": 0.1,
            "float_negzero": -0.0,
            "float_inf": float("inf"),
            "float_ninf": float("-inf"),
            "float_nan": float("nan"),
            "float_tiny": 1e-45,
            "float_big": 3.4e38,
            "float_overflow": 1e300,
            "str_empty": "",
            "str_unicode": "héllo ✓ 日本語 🚀",
            "str_nul": "a\0b",
            "str_long": big,
            "str_newline": "line1\nline2\ttab",
        },
    }


def unicode_names() -> dict[str, Any]:
    return {
        "trainable": {
            "Gewicht.ä": np.arange(3, dtype=np.float32),
            "重み/層1": np.ones(2, np.float32),
            "🚀 rocket": np.zeros(1, np.float32),
        },
        "frozen": {
            "name with spaces": np.array([1.5], np.float32),
            "a/b:c;d": np.array([2], np.int32),
            "ÉCOLE": np.array([True]),
        },
        "properties": {"ключ": "значение", "キー": 7, "Ω": 0.5},
    }


def many_tensors(n: int = 1000) -> dict[str, Any]:
    r = _rng(12)
    trainable, frozen = {}, {}
    for i in range(n):
        shape = tuple(int(d) for d in r.integers(1, 4, size=int(r.integers(0, 3))))
        if i % 4 == 0:
            frozen[f"block{i // 10:03d}.frozen{i:04d}"] = r.integers(-50, 50, size=shape).astype(np.int64)
        else:
            trainable[f"block{i // 10:03d}.param{i:04d}"] = r.standard_normal(shape).astype(np.float32)
    return {"trainable": trainable, "frozen": frozen, "properties": {f"p{i:03d}": i * 1.5 for i in range(50)}}


def dtypes() -> dict[str, Any]:
    r = _rng(13)
    frozen: dict[str, np.ndarray] = {}
    for dt in SUPPORTED_DTYPES:
        d = np.dtype(dt)
        if d.kind == "f":
            a = r.standard_normal(6).astype(d)
            a[:4] = [np.nan, np.inf, -np.inf, -0.0]
        elif d.kind == "b":
            a = r.integers(0, 2, size=6).astype(d)
        else:
            info = np.iinfo(d)
            a = np.array([info.min, info.max, 0, 1, info.max // 3, info.min // 3], dtype=d)
        frozen[f"frozen.{d.name}"] = a.reshape(2, 3)
    return {
        "trainable": {
            "train.float32": r.standard_normal((2, 3)).astype(np.float32),
            "train.float64": r.standard_normal((3, 2)).astype(np.float64),
        },
        "frozen": frozen,
    }


def scalars_and_empty() -> dict[str, Any]:
    return {
        "trainable": {"scalar": np.array(3.25, np.float32), "empty": np.zeros((0,), np.float32)},
        "frozen": {
            "empty2d": np.zeros((4, 0), np.int32),
            "scalar_bool": np.array(True),
            "scalar_f64": np.array(-2.5),
        },
    }


def large_tensor() -> dict[str, Any]:
    r = _rng(14)
    return {
        "trainable": {"big": r.standard_normal((256, 256)).astype(np.float32)},
        "frozen": {"big_i64": r.integers(-(2**62), 2**62, size=(64, 64), dtype=np.int64)},
    }


def nominal() -> dict[str, Any]:
    d = dtypes()
    return {"trainable": d["trainable"], "frozen": d["frozen"], "nominal": True}


CASES = {
    "params_only": params_only,
    "frozen_and_trainable": frozen_and_trainable,
    "frozen_only": frozen_only,
    "empty": empty,
    "properties": properties,
    "unicode_names": unicode_names,
    "many_tensors": many_tensors,
    "dtypes": dtypes,
    "scalars_and_empty": scalars_and_empty,
    "large_tensor": large_tensor,
    "nominal": nominal,
}


def adamw_optimizer(
    trainable: dict[str, np.ndarray], step: int = 7, lr: float = 0.0025, seed: int = 20
) -> dict[str, Any]:
    """An optimizer state shaped like ORT's AdamW: group0, momentum0/momentum1 per trainable."""
    r = _rng(seed)
    return {
        "group0": {
            "step": step,
            "initial_learning_rate": lr,
            "states": {
                name: {
                    "momentum0": r.standard_normal(a.shape).astype(a.dtype),
                    "momentum1": np.abs(r.standard_normal(a.shape)).astype(a.dtype),
                }
                for name, a in trainable.items()
            },
        }
    }


def sgd_optimizer(
    trainable: dict[str, np.ndarray], step: int = 3, lr: float = 0.05, seed: int = 21
) -> dict[str, Any]:
    r = _rng(seed)
    return {
        "group0": {
            "step": step,
            "initial_learning_rate": lr,
            "states": {
                name: {"momentum0": r.standard_normal(a.shape).astype(a.dtype)}
                for name, a in trainable.items()
            },
        }
    }
