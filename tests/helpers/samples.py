"""Arrays of every supported dtype and a sample state built from them."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ortckpt import CheckpointState, OptimizerGroup


def every_dtype_arrays() -> dict[str, np.ndarray[Any, Any]]:
    """One array per supported dtype, plus 0-d, empty and odd-shaped ones; includes NaN payloads,
    -0.0, infinities, integer extremes, every float8 bit pattern and unicode strings."""
    rng = np.random.default_rng(1234)
    f32 = rng.standard_normal((4, 8)).astype(np.float32)
    f32[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    f64 = np.array([1.5, -0.0, np.nan, np.finfo(np.float64).tiny / 4, 1e308], dtype=np.float64)
    f64_bits = f64.view(np.uint64).copy()
    f64_bits[2] = 0x7FF8_0000_DEAD_BEEF  # NaN with a payload
    f16 = np.array([[1.0, -2.5, np.nan], [np.inf, 6.1e-5, 65504.0]], dtype=np.float16)
    return {
        "a.float32": f32,
        "b.uint8": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "c.int8": np.arange(-128, 128, dtype=np.int8),
        "d.uint16": np.array([0, 1, 65535], dtype=np.uint16),
        "e.int16": np.array([-32768, 0, 32767], dtype=np.int16),
        "f.int32": np.array([[-(2**31), 2**31 - 1]], dtype=np.int32),
        "g.int64": np.array([-(2**63), -1, 0, 2**63 - 1], dtype=np.int64),
        "h.string": np.array([["héllo ✓", ""], ["a\x00b", "日本語"]], dtype=object),
        "i.bool": np.array([True, False, True]),
        "j.float16": f16,
        "k.float64": f64_bits.view(np.float64),
        "l.uint32": np.array([0, 2**32 - 1], dtype=np.uint32),
        "m.uint64": np.array([0, 2**64 - 1], dtype=np.uint64),
        "n.complex64": np.array([1 + 2j, -0.0 - 1j, complex(np.nan, 1)], dtype=np.complex64),
        "o.complex128": np.array([[1e300 + 1e-300j]], dtype=np.complex128),
        "p.bfloat16": np.arange(0, 2**16, 257, dtype=np.uint16).view(ml_dtypes.bfloat16),
        "q.float8_e4m3fn": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "r.float8_e4m3fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fnuz),
        "s.float8_e5m2": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2),
        "t.float8_e5m2fnuz": np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2fnuz),
        "u.scalar_f32": np.array(3.25, dtype=np.float32),
        "v.scalar_i64": np.array(-7, dtype=np.int64),
        "w.scalar_str": np.array("only", dtype=object),
        "x.empty_0x3": np.zeros((0, 3), dtype=np.float32),
        "y.empty_2x0x4": np.zeros((2, 0, 4), dtype=ml_dtypes.bfloat16),
        "z.empty_str": np.zeros((0,), dtype=object),
        "z.5d": np.arange(32, dtype=np.int16).reshape(1, 2, 2, 4, 2),
    }


def build_sample_state() -> CheckpointState:
    arrays = every_dtype_arrays()
    frozen_names = {"c.int8", "h.string", "u.scalar_f32", "x.empty_0x3"}
    rng = np.random.default_rng(7)
    w = arrays["a.float32"]
    return CheckpointState(
        {k: v for k, v in arrays.items() if k not in frozen_names},
        frozen={k: arrays[k] for k in frozen_names},
        properties={"epoch": 3, "best_loss": 0.125, "note": "héllo ✓", "neg": -(2**63), "lr": 1e-3},
        optimizer={
            "group0": OptimizerGroup(
                step=3,
                initial_learning_rate=0.001,
                states={
                    "a.float32": {
                        "momentum0": rng.standard_normal(w.shape).astype(np.float32),
                        "momentum1": np.abs(rng.standard_normal(w.shape)).astype(np.float32),
                    },
                    "p.bfloat16": {"momentum0": np.zeros(arrays["p.bfloat16"].shape, ml_dtypes.bfloat16)},
                },
            ),
            "group1": OptimizerGroup(step=2**40, initial_learning_rate=0.5),
        },
    )
