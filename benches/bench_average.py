#!/usr/bin/env python3
"""Benchmark ``ortckpt.average`` against the I/O floor and a hand-written loop, side by side.

Not a test: nothing here asserts on time. Issue 17's goals, each row run interleaved with its
baselines (floor, loop, fedavg, median, ... then again) so all see the same machine load; the
page cache is warm (every file is read once before timing):

* floor: ``np.fromfile`` of every upload (the bytes the server must read at least);
* loop: ``ortckpt.load(p).to_numpy()`` and ``acc += a`` in float64 per tensor, validating nothing;
* fedavg: ``average(paths)`` (goals: <= 1.3x the floor and <= 0.7x the loop);
* median / trimmed_mean: the streamed robust methods (goal <= 3x the floor);
* krum: reported (pairwise distances: O(N^2 x model) work; shape A only);
* floor (fresh) / fedavg (fresh), with ``--fresh``: each timed call in a new interpreter (imports
  and the page cache warm, nothing else): what a user running one round per process gets. The
  first call of a process pays what later calls reuse (the worker threads start, the kernel finds
  fresh huge pages for the sums), for the floor's ``np.fromfile`` as well as for ``average``.

Shapes: A = 16 uploads x 64 MiB (64 float32 tensors each), B = 1,000 uploads x 1 MiB (64 tensors).

    .venv/bin/python benches/bench_average.py                 # both shapes, 3 repeats
    .venv/bin/python benches/bench_average.py --quick         # A at 16 x 8 MiB, B at 100 x 1 MiB
    .venv/bin/python benches/bench_average.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import ortckpt

MiB = 1 << 20


def make_uploads(folder: Path, count: int, size_mib: int, tensors: int = 64) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    per = size_mib * MiB // 4 // tensors
    rng = np.random.default_rng(0)
    base = {f"layer{j}.weight": rng.standard_normal(per).astype(np.float32) for j in range(tensors)}
    paths = []
    for i in range(count):
        path = folder / f"dev{i:04d}.ckpt"
        if not path.exists():
            noise = np.float32(0.01 * (i + 1))
            ortckpt.save(ortckpt.CheckpointState({k: v + noise for k, v in base.items()}), path)
        paths.append(str(path))
    return paths


def floor(paths: list[str]) -> None:
    for p in paths:
        np.fromfile(p, np.uint8)


def loop(paths: list[str]) -> None:
    acc: dict[str, np.ndarray] = {}
    for p in paths:
        for name, a in ortckpt.load(p).to_numpy().items():
            if name not in acc:
                acc[name] = np.zeros(a.shape, np.float64)
            acc[name] += a


_FRESH = """
import json, sys, time
import numpy as np
import ortckpt
paths, what = json.loads(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
if what == "floor":
    for p in paths:
        np.fromfile(p, np.uint8)
else:
    ortckpt.average(paths)
print(time.perf_counter() - start)
"""


def fresh(what: str) -> Callable[[list[str]], float]:
    """A row timed inside a new interpreter (the time it reports, not the interpreter's start)."""

    def run(paths: list[str]) -> float:
        command = [sys.executable, "-c", _FRESH, json.dumps(paths), what]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        return float(done.stdout)

    return run


def rows_for(shape: str, with_fresh: bool = False) -> dict[str, Callable[[list[str]], object]]:
    rows: dict[str, Callable[[list[str]], object]] = {
        "floor": floor,
        "loop": loop,
        "fedavg": lambda ps: ortckpt.average(ps),
        "median": lambda ps: ortckpt.average(ps, method="median"),
        "trimmed_mean": lambda ps: ortckpt.average(ps, method="trimmed_mean", trim=0.1),
    }
    if shape == "A":
        rows["krum"] = lambda ps: ortckpt.average(ps, method="krum", byzantine=2)
    if with_fresh:
        rows["floor (fresh)"] = fresh("floor")
        rows["fedavg (fresh)"] = fresh("fedavg")
    return rows


def _floor_of(row: str) -> str:
    return "floor (fresh)" if row.endswith("(fresh)") else "floor"


def run_shape(shape: str, paths: list[str], repeats: int, with_fresh: bool = False) -> dict[str, object]:
    rows = rows_for(shape, with_fresh)
    floor(paths)  # warm the page cache
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            start = time.perf_counter()
            reported = fn(paths)
            elapsed = time.perf_counter() - start
            # a fresh row reports its own time (without the interpreter's start and imports)
            times[name].append(reported if isinstance(reported, float) else elapsed)
    medians = {name: statistics.median(t) for name, t in times.items()}
    minima = {name: min(t) for name, t in times.items()}
    total = sum(os.path.getsize(p) for p in paths)
    return {
        "uploads": len(paths),
        "bytes": total,
        "median_s": medians,
        # a fresh row against the fresh floor: both pay a new process's first call
        "vs_floor": {n: medians[n] / medians[_floor_of(n)] for n in medians},
        "vs_loop": {n: medians[n] / medians["loop"] for n in medians},
        # min / min: on a shared machine another tenant's load lands on some rounds only
        "min_vs_floor": {n: minima[n] / minima[_floor_of(n)] for n in minima},
        "floor_gb_s": total / medians["floor"] / 1e9,
        "times_s": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller shapes (about a minute)")
    parser.add_argument("--shapes", default="AB", help="A, B or AB")
    parser.add_argument("--tmpdir", default=None)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--fresh", action="store_true", help="also time floor and fedavg in new interpreters")
    args = parser.parse_args()
    shapes = {"A": (16, 8 if args.quick else 64), "B": (100 if args.quick else 1000, 1)}
    results = {}
    with tempfile.TemporaryDirectory(dir=args.tmpdir, prefix="bench-average-") as tmp:
        for shape in args.shapes:
            count, size = shapes[shape]
            paths = make_uploads(Path(tmp) / shape, count, size)
            result = run_shape(shape, paths, args.repeats, args.fresh)
            results[shape] = result
            print(f"shape {shape}: {count} uploads x {size} MiB, floor {result['floor_gb_s']:.2f} GB/s")
            print(f"  {'row':<14}{'median s':>10}{'x floor':>10}{'x loop':>10}{'min/min':>10}")
            for name, seconds in result["median_s"].items():  # type: ignore[attr-defined]
                vf = result["vs_floor"][name]  # type: ignore[index]
                vl = result["vs_loop"][name]  # type: ignore[index]
                mm = result["min_vs_floor"][name]  # type: ignore[index]
                print(f"  {name:<14}{seconds:>10.3f}{vf:>10.2f}{vl:>10.2f}{mm:>10.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
