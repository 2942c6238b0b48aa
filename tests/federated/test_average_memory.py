"""Averaging keeps O(one model) in memory however many uploads there are: measured in a fresh
subprocess (psutil for the resident set before, the kernel's peak resident set after)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ortckpt

psutil = pytest.importorskip("psutil")
if not Path("/proc/self/status").exists():
    pytest.skip("needs Linux's /proc/self/status (VmHWM)", allow_module_level=True)

SOURCES = 500
MODEL = (512, 512)  # float32: 1 MiB per upload, 500 MiB for the fleet
MIB = 1 << 20

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import psutil, numpy, ortckpt
    from ortckpt import aggregate  # imported before the baseline is taken

    def peak():
        # this process's high-water resident set (VmHWM). Not ru_maxrss: on Linux that keeps the
        # peak of the pytest process this one was spawned from.
        with open("/proc/self/status") as f:
            line = next(l for l in f if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    paths = sys.argv[2:]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set (the imports' peak is not ours)
    before = psutil.Process().memory_info().rss
    report = ortckpt.average(paths, sys.argv[1], weights="samples")
    print(json.dumps({"before": before, "peak": peak(), "accepted": len(report.accepted)}))
    """
)


def test_peak_memory_is_one_model_not_the_fleet(tmp_path: Path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal(MODEL).astype(np.float32)
    paths = []
    for i in range(SOURCES):
        state = ortckpt.CheckpointState(
            {"w": base + np.float32(i), "b": np.full(16, i, np.float32)},
            frozen={"ids": np.arange(8, dtype=np.int64)},
            properties={"samples": i + 1},
        )
        paths.append(str(tmp_path / f"dev{i:03d}.ckpt"))
        ortckpt.save(state, paths[-1])
    out = tmp_path / "global.ckpt"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), *paths], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["accepted"] == SOURCES
    grown = result["peak"] - result["before"]
    model = base.nbytes
    # the float64 sums (2 models), the result (1), one mapped upload (1) and temporaries: far from
    # the 500 models that holding every upload would take
    print(f"peak grew by {grown / MIB:.1f} MiB")
    assert grown < 16 * model, f"peak grew by {grown / MIB:.1f} MiB for a {model / MIB:.0f} MiB model"
    weights = np.arange(1, SOURCES + 1, dtype=np.float64)
    want = (base.astype(np.float64) + (weights @ np.arange(SOURCES)) / weights.sum()).astype(np.float32)
    got = ortckpt.load(out).parameters["w"].data
    assert np.max(np.abs(got.astype(np.float64) - want)) <= np.max(np.spacing(np.abs(want)))


MEDIAN_SOURCES = 200
MEDIAN_MODEL = 64 * MIB  # float64, four tensors
CHUNK = 16 * MIB  # the chunk_bytes knob: float64 values of all uploads per chunk

MEDIAN_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import psutil, numpy, ortckpt
    from ortckpt import aggregate

    def peak():
        with open("/proc/self/status") as f:
            line = next(l for l in f if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    chunk, paths = int(sys.argv[1]), sys.argv[2:]
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = psutil.Process().memory_info().rss
    report = ortckpt.average(paths, method="median", chunk_bytes=chunk)
    w = report.state.parameters["w0"].data
    print(json.dumps({"before": before, "peak": peak(), "accepted": len(report.accepted),
                      "zero": bool((w == 0).all()), "size": int(w.nbytes)}))
    """
)


def sparse_fleet(
    folder: Path, count: int = MEDIAN_SOURCES, dtype: type[np.floating[Any]] = np.float64
) -> tuple[int, list[str]]:
    """``count`` uploads of a ``MEDIAN_MODEL`` model of zeros (four ``dtype`` tensors of ``per``
    values) that cost no disk: one checkpoint with its tensors in the external data file, copied,
    each ``.data`` a hole of the right size."""
    per = MEDIAN_MODEL // 4 // np.dtype(dtype).itemsize
    state = ortckpt.CheckpointState({f"w{i}": np.zeros(per, dtype) for i in range(4)})
    first = folder / "dev000.ckpt"
    ortckpt.save(state, first, external_data_threshold=1024)
    data_size = os.path.getsize(f"{first}.data")
    header = first.read_bytes()
    paths = [str(first)]
    for i in range(1, count):
        path = folder / f"dev{i:03d}.ckpt"
        path.write_bytes(header)
        with open(f"{path}.data", "wb") as f:
            f.truncate(data_size)  # zeros, like the first upload's data
        paths.append(str(path))
    return per, paths


def peak_growth(script: str, arg: str, per: int, paths: list[str], itemsize: int = 8) -> int:
    """How far ``script`` (``MEDIAN_SCRIPT`` or the like) run over a ``sparse_fleet`` raised its
    peak resident set, after checking that every upload was accepted and the result is zeros."""
    proc = subprocess.run(
        [sys.executable, "-c", script, arg, *paths], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["accepted"] == len(paths) and result["zero"] and result["size"] == per * itemsize
    return int(result["peak"] - result["before"])


def test_median_memory_is_bounded_by_the_chunk_knob_not_the_fleet(tmp_path: Path):
    """200 uploads of a 64 MiB model (12.5 GiB in all) through the streamed median: the peak grows
    by a few models plus a few chunks. The uploads are sparse files (one checkpoint with its
    tensors in the external data file, copied; each ``.data`` a hole of the right size), so the
    test costs no disk and little I/O (``sparse_fleet``)."""
    per, paths = sparse_fleet(tmp_path)
    grown = peak_growth(MEDIAN_SCRIPT, str(CHUNK), per, paths)
    print(f"median over {MEDIAN_SOURCES} x {MEDIAN_MODEL // MIB} MiB: peak grew by {grown / MIB:.0f} MiB")
    # the kernel's float64 check sums (1 model), the reference state (1: its .data is copied), the
    # result's float64 lanes and its state (2), the chunk matrix and its column copy (2 chunks) and
    # temporaries; a model this large is checked streamed, never an upload whole (measured:
    # ~197 MiB; ~276 MiB when uploads were read whole for their check, 350-410 MiB on another
    # machine): far below the 200 models (12.5 GiB) the fleet holds
    assert grown < 7 * MEDIAN_MODEL + 4 * CHUNK, f"peak grew by {grown / MIB:.0f} MiB"


ROUNDED_SCRIPT = MEDIAN_SCRIPT.replace(
    '"size": int(w.nbytes)}', '"size": int(w.nbytes), "kept": ortckpt._native.is_unchanging(w)}'
)


def float32_round_growth(folder: Path, method: str) -> int:
    """How far a fresh process's peak grows when ``method`` averages 9 uploads of a
    ``MEDIAN_MODEL`` float32 model, after checking the result and that the state kept the
    round's float32 memory without copying it."""
    per, paths = sparse_fleet(folder, count=9, dtype=np.float32)
    script = ROUNDED_SCRIPT.replace('method="median"', f"method={method!r}")
    proc = subprocess.run(
        [sys.executable, "-c", script, str(CHUNK), *paths], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["accepted"] == 9 and result["zero"] and result["size"] == per * 4
    assert result["kept"], "the result's float32 values were copied into the state"
    grown = int(result["peak"] - result["before"])
    print(f"float32 {method} over 9 x {MEDIAN_MODEL // MIB} MiB: peak grew by {grown / MIB:.0f} MiB")
    return grown


def test_a_float32_median_holds_no_float64_copy_of_the_model(tmp_path: Path):
    """A plain median of float32 uploads rounds each tensor's values to float32 as it computes
    them (the core's ``Passes::reduce``), and the state keeps that memory without a copy: the
    round's new memory is the float32 result. It was a float64 copy twice its size, then the
    rounded one (measured: 199 MiB for this 64 MiB model; now 75)."""
    grown = float32_round_growth(tmp_path, "median")
    # the result (1 model), the 8 MiB float64 scratch, the threads' bands and read buffers
    assert grown < MEDIAN_MODEL + 40 * MIB, f"peak grew by {grown / MIB:.0f} MiB"


def test_a_float32_fedavg_rounds_its_sums_in_their_own_memory(tmp_path: Path):
    """FedAvg divides each float32 tensor's float64 sums and rounds them to float32 over the
    sums' own memory, which then shrinks (the core's ``Float32s::rounded_in_place``), and the
    state keeps it without a copy: the round's new memory is the sums. A fresh float32 copy of
    the model came on top of them (measured on 9 x 64 MiB: 150 MiB before, 130 now)."""
    grown = float32_round_growth(tmp_path, "fedavg")
    # the float64 sums (2 models) and the reads' buffers; no float32 result beside them (before:
    # ~150 MiB, the sums and the rounded copy of their first tensors, each sum freed once rounded)
    assert grown < 2 * MEDIAN_MODEL + 12 * MIB, f"peak grew by {grown / MIB:.0f} MiB"


FEDAVG_SCRIPT = MEDIAN_SCRIPT.replace('method="median", chunk_bytes=chunk', 'method="fedavg"')


def test_streamed_fedavg_memory_holds_no_upload(tmp_path: Path):
    """FedAvg over 200 uploads of a 64 MiB model (streamed: ``rust/core/src/aggregate/stream.rs``;
    sparse uploads as above): the peak grows by the sums and their copy for undoing a group, the
    reference and the result, never by uploads."""
    per, paths = sparse_fleet(tmp_path)
    grown = peak_growth(FEDAVG_SCRIPT, "0", per, paths)
    print(f"fedavg over {MEDIAN_SOURCES} x {MEDIAN_MODEL // MIB} MiB: peak grew by {grown / MIB:.0f} MiB")
    # float64 model: the sums (1 model), their copy (1), the reference and the result (measured:
    # ~194 MiB). Read whole, two uploads in memory at a time push it to ~257 MiB: over the bound.
    assert grown < 3.5 * MEDIAN_MODEL + 16 * MIB, f"peak grew by {grown / MIB:.0f} MiB"


ROUND_SCRIPT = MEDIAN_SCRIPT.replace(
    'report = ortckpt.average(paths, method="median", chunk_bytes=chunk)',
    "rnd = ortckpt.Round()\n"
    "for path in paths:  # one at a time, as uploads arrive\n"
    "    assert rnd.add(path).accepted\n"
    "report = rnd.result()",
)


def test_a_round_taking_uploads_one_at_a_time_holds_one_model(tmp_path: Path):
    """``Round.add`` one upload at a time (the way a server takes them as they arrive) over 200
    uploads of a 64 MiB model: the same bound as the batched FedAvg above."""
    per, paths = sparse_fleet(tmp_path)
    grown = peak_growth(ROUND_SCRIPT, "0", per, paths)
    print(f"Round.add over {MEDIAN_SOURCES} x {MEDIAN_MODEL // MIB} MiB: peak grew by {grown / MIB:.0f} MiB")
    assert grown < 3.5 * MEDIAN_MODEL + 16 * MIB, f"peak grew by {grown / MIB:.0f} MiB"


DASK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import distributed, numpy, ortckpt
    from ortckpt import aggregate

    def reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        with open("/proc/self/status") as f:
            line = next(l for l in f if l.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    def peak():
        with open("/proc/self/status") as f:
            line = next(l for l in f if l.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    chunk, paths = int(sys.argv[1]), sys.argv[2:]
    cluster = distributed.LocalCluster(
        n_workers=3, threads_per_worker=1, processes=True, protocol="tcp://", host="127.0.0.1",
        dashboard_address="127.0.0.1:0", memory_limit=0,
    )
    with cluster:
        with distributed.Client(cluster) as client:
            before = client.run(reset)
            report = ortckpt.average(paths, method="median", chunk_bytes=chunk, engine=client)
            after = client.run(peak)
    w = report.state.parameters["w0"].data
    grown = max(after[k] - before[k] for k in before)
    print(json.dumps({"before": 0, "peak": grown, "accepted": len(report.accepted),
                      "zero": bool((w == 0).all()), "size": int(w.nbytes), "engine": report.engine}))
    """
)


@pytest.mark.slow
def test_a_median_on_a_cluster_keeps_each_worker_within_the_chunk_knob(tmp_path: Path):
    """The median over 200 uploads of a 64 MiB model on three worker processes: each worker reads
    its lanes of every upload a chunk at a time, so its peak grows by a few chunks and one range
    of the result, never by uploads or the model."""
    pytest.importorskip("distributed")
    from ortckpt.federated._dask import RANGE_LANES

    per, paths = sparse_fleet(tmp_path)
    grown = peak_growth(DASK_SCRIPT, str(CHUNK), per, paths)
    print(
        f"median on 3 workers over {MEDIAN_SOURCES} x {MEDIAN_MODEL // MIB} MiB: "
        f"worker peak grew by {grown / MIB:.0f} MiB"
    )
    # the block of stored values and its float64 tiles (2 chunks), the range's result, squares and
    # gaps (one range: RANGE_LANES float64 values), the uploads' descriptors, and the transport's
    # copies of a result on its way out (one more range): not the model (64 MiB) per upload
    assert grown < 4 * CHUNK + 3 * RANGE_LANES * 8 + 32 * MIB, f"worker peak grew by {grown / MIB:.0f} MiB"
