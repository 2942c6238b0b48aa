#!/usr/bin/env python3
"""Aggregation against its peers, side by side on the same uploads (issue 30).

Not a test: nothing here asserts. Every row runs in a fresh subprocess (its time, and its peak
resident set from the kernel's VmHWM), the rows interleaved round after round so that all see the
same machine load; the page cache is warm (every file is read once before timing), and each row's
clock starts once its process is idle (numpy's BLAS threads spin for a few hundred ms after numpy
starts: a server imported numpy long before its round). Medians over the rounds:

* floor: ``np.fromfile`` of every upload (the bytes any server must read);
* ortckpt fedavg / median: ``ortckpt.average`` over the checkpoint files (every check), imported
  before the clock starts as the peers' functions are (ortckpt imports its aggregation modules
  on first use);
* flower fedavg / median: Flower's ``flwr.server.strategy.aggregate.aggregate`` /
  ``aggregate_median`` on the uploads' arrays, held as a Flower server holds replies (all of them
  in memory, loaded from an uncompressed ``.npz`` of each upload: the same values);
* nvflare fedavg: NVIDIA FLARE's ``WeightedAggregationHelper`` fed the same arrays one upload at
  a time (``add`` then ``get_result``), in the interpreter given by ``--nvflare-python`` (a side
  virtualenv: its pins need not match ours); the row is skipped without it.

Goals (issue 30): FedAvg >= 6x faster than both peers at <= 1/5 of their peak memory; median
>= 10x faster than Flower's.

    .venv/bin/python benches/bench_peers.py                          # 12 uploads x 32 MiB, 3 rounds
    .venv/bin/python benches/bench_peers.py --uploads 12 --mib 64 --repeats 5 --json out.json
    .venv/bin/python benches/bench_peers.py --nvflare-python /path/to/nvflare-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

import ortckpt

MiB = 1 << 20

PEAK = textwrap.dedent(
    """
    def _peak():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmHWM:")).split()[1]) * 1024
    def _rss():
        with open("/proc/self/status") as f:
            return int(next(l for l in f if l.startswith("VmRSS:")).split()[1]) * 1024
    def _settle():
        # numpy's OpenBLAS threads spin for a few hundred ms after numpy starts, a core's worth of
        # work that no server pays in a round (it imported numpy long before): every row waits
        # until the process is idle (its CPU time still for 50 ms, at most 2 s) before its clock
        import resource, time
        def cpu():
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime
        last = cpu()
        for _ in range(40):
            time.sleep(0.05)
            now = cpu()
            if now - last < 0.002:
                return
            last = now
    """
)

# each row: (imports: not timed, the timed work); the baseline resident set is taken between them
ROWS: dict[str, tuple[str, str]] = {
    "floor": (
        "import numpy as np",
        """
for p in paths:
    np.fromfile(p, np.uint8)
""",
    ),
    # the function's module imported before timing, as each peer's row imports its function
    # (ortckpt imports its aggregation on first use: ~60 ms once per process)
    "ortckpt fedavg": ("from ortckpt import average", "average(paths, weights=weights)"),
    "ortckpt median": ("from ortckpt import average", 'average(paths, method="median")'),
    "flower fedavg": (
        "import numpy as np\nfrom flwr.server.strategy.aggregate import aggregate",
        """
results = []
for p, n in zip(npzs, weights):
    with np.load(p) as z:
        results.append(([z[k] for k in z.files], n))
aggregate(results)
""",
    ),
    "flower median": (
        "import numpy as np\nfrom flwr.server.strategy.aggregate import aggregate_median",
        """
results = []
for p, n in zip(npzs, weights):
    with np.load(p) as z:
        results.append(([z[k] for k in z.files], n))
aggregate_median(results)
""",
    ),
    "nvflare fedavg": (
        "import numpy as np\n"
        "from nvflare.app_common.aggregators.weighted_aggregation_helper import WeightedAggregationHelper",
        """
helper = WeightedAggregationHelper()
for i, (p, n) in enumerate(zip(npzs, weights)):
    with np.load(p) as z:
        data = {k: z[k] for k in z.files}
        helper.add(data=data, weight=n, contributor_name=f"site-{i}", contribution_round=0)
helper.get_result()
""",
    ),
}

PROLOGUE = """
import json, sys, time
paths, npzs, weights = json.loads(sys.argv[1])
_settle()
before = _rss()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak from here on
start = time.perf_counter()
"""

EPILOGUE = """
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "grown": _peak() - before}))
"""


def script(row: str) -> str:
    imports, work = ROWS[row]
    return PEAK + imports + "\n" + PROLOGUE + work + EPILOGUE


def make_uploads(folder: Path, count: int, mib: int, tensors: int) -> tuple[list[str], list[str], list[int]]:
    """``count`` checkpoints of ``mib`` MiB (``tensors`` float32 tensors) and an ``.npz`` of each."""
    per = mib * MiB // 4 // tensors
    rng = np.random.default_rng(0)
    base = {f"layer{j}.weight": rng.standard_normal(per).astype(np.float32) for j in range(tensors)}
    paths, npzs, weights = [], [], []
    for i in range(count):
        values = {k: v + np.float32(0.01 * (i + 1)) for k, v in base.items()}
        path = folder / f"dev{i:03d}.ckpt"
        ortckpt.save(ortckpt.CheckpointState(values), path)
        npz = folder / f"dev{i:03d}.npz"
        np.savez(npz, **values)
        paths.append(str(path))
        npzs.append(str(npz))
        weights.append(int(rng.integers(10, 1000)))
    return paths, npzs, weights


def run(python: str, row: str, args: str) -> dict[str, float]:
    proc = subprocess.run([python, "-c", script(row), args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{row} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--uploads", type=int, default=12)
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nvflare-python", default=None, help="an interpreter with nvflare installed")
    parser.add_argument("--tmpdir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = [r for r in ROWS if r != "nvflare fedavg" or args.nvflare_python]
    with tempfile.TemporaryDirectory(dir=args.tmpdir, prefix="bench-peers-") as tmp:
        paths, npzs, weights = make_uploads(Path(tmp), args.uploads, args.mib, args.tensors)
        payload = json.dumps([paths, npzs, weights])
        for p in paths + npzs:
            np.fromfile(p, np.uint8)  # warm the page cache
        times: dict[str, list[float]] = {r: [] for r in rows}
        peaks: dict[str, list[float]] = {r: [] for r in rows}
        for _ in range(args.repeats):
            for row in rows:
                python = args.nvflare_python if row.startswith("nvflare") else sys.executable
                got = run(python, row, payload)
                times[row].append(got["seconds"])
                peaks[row].append(got["grown"])
    med = {r: statistics.median(t) for r, t in times.items()}
    peak = {r: statistics.median(p) for r, p in peaks.items()}
    print(f"{args.uploads} uploads x {args.mib} MiB ({args.tensors} float32 tensors), {args.repeats} rounds")
    print(f"  {'row':<16}{'median s':>10}{'x floor':>9}{'peak MiB':>10}")
    for r in rows:
        print(f"  {r:<16}{med[r]:>10.3f}{med[r] / med['floor']:>9.2f}{peak[r] / MiB:>10.0f}")
    print("ortckpt against its peers (speed-up; peak ratio):")
    for peer in ("flower fedavg", "nvflare fedavg"):
        if peer in med:
            print(
                f"  fedavg vs {peer.split()[0]}: {med[peer] / med['ortckpt fedavg']:.1f}x faster, "
                f"{peak['ortckpt fedavg'] / max(peak[peer], 1):.2f} of its peak"
            )
    print(f"  median vs flower: {med['flower median'] / med['ortckpt median']:.1f}x faster")
    if args.json:
        Path(args.json).write_text(json.dumps({"seconds": times, "peak_bytes": peaks}, indent=2))


if __name__ == "__main__":
    main()
