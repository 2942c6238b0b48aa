#!/usr/bin/env python3
"""Benchmark ortckpt's save against the physical limit and against safetensors, side by side.

Not a test: nothing here asserts on time. Issue 8's save goals, each measured in one run with the
baseline interleaved (baseline, ortckpt, baseline, ortckpt, ...) so both see the same machine load:

* shape A: 512 MiB in 64 float32 tensors, ``ortckpt.save`` vs ``ndarray.tofile`` + fsync of the
  same bytes (goal <= 1.15x), and vs plain ``os.write`` of each array + fsync (the stricter
  limit: numpy's ``tofile`` goes through stdio and is often slower), and the peak extra memory of
  the save (goal <= 64 MiB);
* shape C: 100,000 float32 tensors of 64 B, ``ortckpt.save`` vs safetensors' ``save_file`` +
  fsync (goal <= 1.2x), with the save split into its Python part (``build_spec``) and its native
  part, and a cProfile of ``build_spec``.

Every timed operation writes a fresh file (outputs are deleted and ``os.sync()`` is called, untimed,
before each), and every save includes its fsync (ortckpt's also its rename and directory sync).

    .venv/bin/python benches/bench_save.py            # shapes A and C, 7 repeats
    .venv/bin/python benches/bench_save.py --quick    # 128 MiB shape A, 5 repeats: about a minute
    .venv/bin/python benches/bench_save.py --json out.json

safetensors is a benchmark dependency (requirements-dev.txt); without it shape C's baseline is
skipped.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20
HERE = Path(__file__).resolve()


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean(*paths: str) -> None:
    for p in paths:
        for q in (p, p + ".data"):
            if os.path.exists(q):
                os.unlink(q)
    os.sync()


def interleaved(
    ops: dict[str, Callable[[], Any]], outputs: list[str], repeats: int
) -> dict[str, list[float]]:
    """Runs every op once per round, ``repeats`` rounds; returns the wall times per op."""
    times: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(repeats):
        for key, op in ops.items():
            _clean(*outputs)
            gc.collect()
            t0 = time.perf_counter()
            op()
            times[key].append(time.perf_counter() - t0)
    _clean(*outputs)
    return times


def arrays_a(size_bytes: int, tensors: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    per = size_bytes // 4 // tensors
    return {
        f"layer{i:04d}.weight": rng.random(per, dtype=np.float32).reshape(-1, 1024) for i in range(tensors)
    }


def arrays_c(count: int) -> dict[str, np.ndarray]:
    values = np.random.default_rng(0).random((count, 16), dtype=np.float32)
    return {f"t{i:06d}": values[i].copy() for i in range(count)}


def shape_a(tmp: str, size_mib: int, repeats: int) -> dict[str, Any]:
    import ortckpt

    arrays = arrays_a(size_mib * MiB, 64)
    state = ortckpt.CheckpointState(arrays)
    raw, ckpt = os.path.join(tmp, "a.raw"), os.path.join(tmp, "a.ckpt")

    def tofile_fsync() -> None:
        with open(raw, "wb") as f:
            for a in arrays.values():
                a.tofile(f)
            f.flush()
            os.fsync(f.fileno())

    def write_fsync() -> None:
        fd = os.open(raw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for a in arrays.values():
                view = memoryview(a).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)

    ops = {
        "tofile_fsync": tofile_fsync,
        "write_fsync": write_fsync,
        "ortckpt_save": lambda: ortckpt.save(state, ckpt),
    }
    times = interleaved(ops, [raw, ckpt], repeats)
    return {
        "times": times,
        "ratio": ratio(times, "ortckpt_save", "tofile_fsync"),
        "ratio_write": ratio(times, "ortckpt_save", "write_fsync"),
    }


def shape_c(tmp: str, count: int, repeats: int, breakdown: bool = True) -> dict[str, Any]:
    """Shape C's save against safetensors'; with ``breakdown`` also the two halves of the save
    (``build_spec``, the native save) and a profile of ``build_spec``."""
    import ortckpt

    arrays = arrays_c(count)
    state = ortckpt.CheckpointState(arrays)
    st, ckpt = os.path.join(tmp, "c.safetensors"), os.path.join(tmp, "c.ckpt")
    ops: dict[str, Callable[[], Any]] = {}
    try:
        from safetensors.numpy import save_file

        def safetensors_fsync() -> None:
            save_file(arrays, st)
            _fsync_path(st)

        ops["safetensors_fsync"] = safetensors_fsync
    except ImportError:
        pass
    ops["ortckpt_save"] = lambda: ortckpt.save(state, ckpt)
    if breakdown:
        from ortckpt import _native
        from ortckpt._spec import build_spec

        ops["build_spec"] = lambda: build_spec(state, True, 2)
        spec = build_spec(state, True, 2)
        ops["native_save"] = lambda: _native.save_checkpoint(ckpt, spec, None)
    times = interleaved(ops, [st, ckpt], repeats)
    result: dict[str, Any] = {"times": times}
    if breakdown:
        profile = cProfile.Profile()
        profile.runcall(build_spec, state, True, 2)
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(6)
        result["build_spec_profile"] = out.getvalue()
    if "safetensors_fsync" in times:
        result["ratio"] = ratio(times, "ortckpt_save", "safetensors_fsync")
    return result


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Ratio of medians (the figure the goals are stated in)."""
    return statistics.median(times[num]) / statistics.median(times[den])


def ratio_of_minimums(times: dict[str, list[float]], num: str, den: str) -> float:
    """Ratio of the fastest runs: less sensitive to other processes' I/O on a shared machine."""
    return min(times[num]) / min(times[den])


# -- peak memory of one save, in a fresh process ---------------------------------------------------


def _peak_child(size_mib: int, ckpt: str) -> None:
    import ortckpt

    state = ortckpt.CheckpointState(arrays_a(size_mib * MiB, 64))
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    before = _status("VmRSS")
    ortckpt.save(state, ckpt)
    print(json.dumps({"extra_bytes": _status("VmHWM") - before}))


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def peak_extra_memory(tmp: str, size_mib: int) -> int | None:
    """Peak RSS growth during one save of shape A, or None where /proc cannot tell (not Linux)."""
    if not os.path.exists("/proc/self/clear_refs"):
        return None
    ckpt = os.path.join(tmp, "m.ckpt")
    proc = subprocess.run(
        [sys.executable, str(HERE), "--peak-child", str(size_mib), ckpt],
        capture_output=True,
        text=True,
        check=True,
    )
    _clean(ckpt)
    return int(json.loads(proc.stdout.strip().splitlines()[-1])["extra_bytes"])


# -- report ------------------------------------------------------------------------------------------


def _row(label: str, values: list[float]) -> str:
    return f"  {label:<34} median {statistics.median(values) * 1e3:9.1f} ms   min {min(values) * 1e3:9.1f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="128 MiB shape A, 5 repeats")
    ap.add_argument("--size-mib", type=int, help="shape A size (default 512, 128 with --quick)")
    ap.add_argument("--tensors-c", type=int, default=100_000, help="shape C tensor count")
    ap.add_argument("--repeats", type=int, help="rounds per shape (default 7, 5 with --quick)")
    ap.add_argument("--tmpdir", help="where the files go (default: the system's temporary directory)")
    ap.add_argument("--json", help="also write the results as JSON")
    ap.add_argument("--peak-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.peak_child:
        _peak_child(int(args.peak_child[0]), args.peak_child[1])
        return 0
    size_mib = args.size_mib or (128 if args.quick else 512)
    repeats = max(args.repeats or (5 if args.quick else 7), 1)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        a = shape_a(tmp, size_mib, repeats)
        print(f"\nshape A: {size_mib} MiB in 64 float32 tensors, {repeats} interleaved rounds")
        print(_row("ndarray.tofile + fsync", a["times"]["tofile_fsync"]))
        print(_row("os.write + fsync", a["times"]["write_fsync"]))
        print(_row("ortckpt.save (fsync + rename)", a["times"]["ortckpt_save"]))
        t = a["times"]
        print(
            f"  ratio save / (tofile + fsync): {a['ratio']:.3f}  (goal <= 1.15; of minimums "
            f"{ratio_of_minimums(t, 'ortckpt_save', 'tofile_fsync'):.3f})"
        )
        print(
            f"  ratio save / (os.write + fsync): {a['ratio_write']:.3f}  (of minimums "
            f"{ratio_of_minimums(t, 'ortckpt_save', 'write_fsync'):.3f})"
        )
        peak = peak_extra_memory(tmp, size_mib)
        a["peak_extra_bytes"] = peak
        if peak is not None:
            print(f"  peak extra memory of one save: {peak / MiB:.1f} MiB  (goal <= 64 MiB)")
        c = shape_c(tmp, args.tensors_c, repeats)
        print(f"\nshape C: {args.tensors_c} float32 tensors of 64 B, {repeats} interleaved rounds")
        labels = {
            "safetensors_fsync": "safetensors save_file + fsync",
            "ortckpt_save": "ortckpt.save (fsync + rename)",
            "build_spec": "  of which: Python build_spec",
            "native_save": "  of which: native save",
        }
        for key, values in c["times"].items():
            print(_row(labels[key], values))
        if "ratio" in c:
            print(
                f"  ratio save / (safetensors + fsync): {c['ratio']:.3f}  (goal <= 1.2; of minimums "
                f"{ratio_of_minimums(c['times'], 'ortckpt_save', 'safetensors_fsync'):.3f})"
            )
        else:
            print("  safetensors not installed: no baseline (pip install safetensors)")
        print("\nbuild_spec profile (shape C):\n" + c["build_spec_profile"])
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"a": a, "c": c}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
