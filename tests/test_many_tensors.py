"""Hundreds of thousands of tensors: indexing costs O(1) memory per tensor with a small constant,
and no Python object per tensor is made until one is asked for.

The memory bound is asserted (in a fresh subprocess, so the measurement sees only the load); the
time is printed as a figure, never asserted (benches/ owns timings).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from ortckpt import _native

TENSORS = 400_000


def _nominal_spec(count: int) -> dict[str, object]:
    trainable = [(f"t{i:06d}", 1, [], None) for i in range(count)]
    return {
        "is_nominal": True,
        "trainable": trainable,
        "frozen": [],
        "optimizer_groups": [],
        "properties": [],
    }


CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy, psutil
    import ortckpt

    proc = psutil.Process()
    before = proc.memory_info().rss
    start = time.perf_counter()
    state = ortckpt.load(sys.argv[1])
    count = len(state.parameters)
    one = state.parameters["t123456"]
    elapsed = time.perf_counter() - start
    after = proc.memory_info().rss
    print(json.dumps({"count": count, "seconds": elapsed, "rss_growth": after - before,
                      "dtype": str(one.dtype), "nominal": one.is_nominal}))
    """
)


def test_400k_nominal_tensors_index_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "many.ckpt"
    path.write_bytes(_native.serialize_checkpoint(_nominal_spec(TENSORS)))
    size = path.stat().st_size
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300, check=True
    )
    result = json.loads(out.stdout)
    assert result["count"] == TENSORS
    assert result["nominal"] and result["dtype"] == "float32"
    print(
        f"\n{TENSORS} nominal tensors, {size / 2**20:.1f} MiB: indexed in {result['seconds']:.2f} s, "
        f"RSS +{result['rss_growth'] / 2**20:.1f} MiB ({result['rss_growth'] / size:.2f}x the file)"
    )
    assert result["rss_growth"] < 3 * size, result
