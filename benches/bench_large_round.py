#!/usr/bin/env python3
"""A FedAvg round of NVIDIA FLARE's published GPT-2-Large shape, against the I/O floor (issue 30).

Not a test: nothing here asserts. NVIDIA FLARE reports a round of 6 clients x 3.2 GB (GPT-2 Large,
437 tensors each) with a server-side aggregation of 20.9-34.9 s and a server peak of 82-138 GiB on
a 32-vCPU / 256 GB machine. Here the same shape is generated on disk (6 checkpoints of GPT-2
Large's 437 float32 tensors, 774 M values each), and each row runs in a fresh subprocess, rows
interleaved, medians over the rounds:

* floor: ``np.fromfile`` of every upload (the bytes the server must read at least);
* fedavg: ``ortckpt.average(paths)`` (every check; the goal: at most 1.5x the floor, and a peak
  resident set below the model's float64 sums + 1 GiB).

Different machines: the comparison with FLARE's figures is of orders of magnitude only.

    .venv/bin/python benches/bench_large_round.py --tmpdir /big/disk       # about 19 GB of files
    .venv/bin/python benches/bench_large_round.py --scale 0.25             # a quarter of each tensor
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import ortckpt

GiB = 1 << 30
CLIENTS = 6


def gpt2_large_shapes(scale: float) -> dict[str, tuple[int, ...]]:
    """GPT-2 Large's 437 tensors (36 layers of 12, embeddings, final norm, untied head), each
    dimension of size 1280 or more scaled by ``scale`` (1.0: 774 M values, 3.1 GB of float32)."""
    d = max(8, int(1280 * scale))
    vocab, ctx = max(8, int(50257 * scale)), max(8, int(1024 * scale))
    shapes: dict[str, tuple[int, ...]] = {"wte": (vocab, d), "wpe": (ctx, d)}
    for layer in range(36):
        p = f"h.{layer}"
        shapes |= {
            f"{p}.ln_1.weight": (d,),
            f"{p}.ln_1.bias": (d,),
            f"{p}.attn.c_attn.weight": (d, 3 * d),
            f"{p}.attn.c_attn.bias": (3 * d,),
            f"{p}.attn.c_proj.weight": (d, d),
            f"{p}.attn.c_proj.bias": (d,),
            f"{p}.ln_2.weight": (d,),
            f"{p}.ln_2.bias": (d,),
            f"{p}.mlp.c_fc.weight": (d, 4 * d),
            f"{p}.mlp.c_fc.bias": (4 * d,),
            f"{p}.mlp.c_proj.weight": (4 * d, d),
            f"{p}.mlp.c_proj.bias": (d,),
        }
    shapes |= {"ln_f.weight": (d,), "ln_f.bias": (d,), "lm_head.weight": (8, d)}
    return shapes


def make_uploads(folder: Path, scale: float) -> list[str]:
    shapes = gpt2_large_shapes(scale)
    assert len(shapes) == 437
    rng = np.random.default_rng(0)
    base = {k: rng.standard_normal(s, dtype=np.float32) for k, s in shapes.items()}
    paths = []
    for i in range(CLIENTS):
        path = folder / f"client{i}.ckpt"
        values = {k: v + np.float32(0.001 * (i + 1)) for k, v in base.items()}
        ortckpt.save(ortckpt.CheckpointState(values, properties={"samples": 100 + i}), path)
        del values
        paths.append(str(path))
    return paths


ROW = {
    # the checkpoint and its external data (3.1 GB passes ORT's 1800 MiB: the values go to .data)
    "floor": (
        "for p in paths:\n"
        "    for f in (p, p + '.data'):\n"
        "        if os.path.exists(f):\n"
        "            np.fromfile(f, np.uint8)\n"
    ),
    "fedavg": "ortckpt.average(paths, weights='samples')\n",
}

SCRIPT = """
import json, os, sys, time
import numpy as np, ortckpt
def _status(key):
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith(key)).split()[1]) * 1024
paths = json.loads(sys.argv[1])
before = _status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
start = time.perf_counter()
{work}
print(json.dumps({{"seconds": time.perf_counter() - start, "grown": _status("VmHWM:") - before}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="each large dimension times this")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmpdir, prefix="bench-large-round-") as tmp:
        paths = make_uploads(Path(tmp), args.scale)
        payload = json.dumps(paths)
        model = sum(int(np.prod(s)) for s in gpt2_large_shapes(args.scale).values()) * 4
        times: dict[str, list[float]] = {r: [] for r in ROW}
        peaks: dict[str, list[int]] = {r: [] for r in ROW}
        files = [f for p in paths for f in (p, p + ".data") if os.path.exists(f)]
        for f in files:
            np.fromfile(f, np.uint8)  # warm what of the page cache can hold
        for _ in range(args.repeats):
            for row, work in ROW.items():
                proc = subprocess.run(
                    [sys.executable, "-c", SCRIPT.format(work=work), payload],
                    capture_output=True,
                    text=True,
                    timeout=7200,
                )
                if proc.returncode != 0:
                    raise SystemExit(f"{row} failed:\n{proc.stderr[-2000:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                times[row].append(got["seconds"])
                peaks[row].append(got["grown"])
        size = sum(os.path.getsize(f) for f in files)
    med = {r: statistics.median(t) for r, t in times.items()}
    peak = {r: statistics.median(p) for r, p in peaks.items()}
    sums = 2 * model  # float64 sums of a float32 model
    print(f"{CLIENTS} clients x {model / 1e9:.2f} GB (437 float32 tensors), {size / 1e9:.1f} GB of files")
    print(f"  floor   {med['floor']:8.2f} s  peak +{peak['floor'] / GiB:6.2f} GiB")
    print(
        f"  fedavg  {med['fedavg']:8.2f} s  peak +{peak['fedavg'] / GiB:6.2f} GiB  "
        f"({med['fedavg'] / med['floor']:.2f}x the floor; goal <= 1.5x)"
    )
    print(f"  the float64 sums: {sums / GiB:.2f} GiB; goal: peak below {(sums + GiB) / GiB:.2f} GiB")
    print("  NVIDIA FLARE, published (another machine: 32 vCPU, 256 GB): 20.9-34.9 s, peak 82-138 GiB")
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": times, "peak_bytes": peaks, "model_bytes": model}))


if __name__ == "__main__":
    main()
