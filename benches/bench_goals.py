#!/usr/bin/env python3
"""Issue 8's goals in one run: one row per goal with its measured ratio, its bound and MET / NOT MET.

Not a test: nothing here asserts on time, and the exit status is 0 whether the goals are met or not
(``--strict``: 2 when a row failed to run). Every ratio is ortckpt / baseline of medians (and of
minimums) over ``--repeats`` rounds (>= 5 for a goal figure) measured in this run, each compared pair
interleaved (baseline, ortckpt, baseline, ortckpt, ...), with ``os.sync()`` and a ``gc.collect()``
(untimed) before every timed operation. Shapes:

* A: 512 MiB in 64 float32 tensors (128 MiB with ``--quick``; the output says which);
* B: 2,000 float32 tensors of 4-64 KiB, sizes drawn with seed 0;
* C: 100,000 float32 tensors of 64 B.

It reuses the other benches (``bench_save`` for goals 1-3, ``bench_startup`` for 8-9,
``bench_checkpoint``'s fresh-subprocess children for the ORT 1.19.2 rows) and adds the read goals.

    .venv/bin/python benches/bench_goals.py --quick           # under 3 minutes on 2 cores
    .venv/bin/python benches/bench_goals.py                   # full shapes, 7 rounds
    .venv/bin/python benches/bench_goals.py --json goals.json --strict
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

import bench_checkpoint  # noqa: E402  (benches/ is not a package: put on sys.path just above)
import bench_save  # noqa: E402
import bench_startup  # noqa: E402
import numpy as np  # noqa: E402

MiB = bench_save.MiB
GOAL_REPEATS = 5  # the minimum for a goal figure


@dataclass
class Row:
    """One printed row: a goal (``bound`` set) or an informational figure (``bound`` None)."""

    key: str
    text: str
    unit: str  # "x": a ratio; "MiB": memory; "ms": a difference of times
    bound: float | None = None
    median: float | None = None  # the figure the goal is stated in
    minimum: float | None = None  # the same figure from the fastest runs (steadier on a busy machine)
    error: str | None = None  # "failed: ..." or "skipped (...)"
    details: list[str] = field(default_factory=list)
    times: dict[str, list[float]] = field(default_factory=dict)  # every measurement, seconds
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        if self.error:
            return ""
        if self.bound is None or self.median is None:
            return "info"
        return "MET" if self.median <= self.bound else "NOT MET"


@dataclass
class Config:
    size_mib: int
    tensors_b: int
    tensors_c: int
    repeats: int
    startup_repeats: int
    ort_repeats: int
    quick: bool
    tmpdir: str | None
    ort_python: str | None
    verbose: bool


# -- helpers -----------------------------------------------------------------------------------------


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:,.1f} ms (min {min(seconds) * 1e3:,.1f})"


def _pair(row: Row, num: str, den: str) -> None:
    """Sets the row's figures to num / den of its times (median / median, min / min)."""
    row.median = bench_save.ratio(row.times, num, den)
    row.minimum = bench_save.ratio_of_minimums(row.times, num, den)


def _measure(
    ops: dict[str, Callable[[], Any]], repeats: int, outputs: list[str] | None = None
) -> dict[str, list[float]]:
    """One untimed call of each op (first-use costs, and a failing op fails here, before any timing),
    then ``repeats`` interleaved rounds (bench_save.interleaved: os.sync + gc before each call)."""
    for op in ops.values():
        op()
    gc.collect()
    return bench_save.interleaved(ops, outputs or [], repeats)


def _evict(path: str) -> None:
    """Drops the file's pages from the page cache (written back first, or they would stay)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _majflt() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def arrays_b(count: int) -> dict[str, np.ndarray]:
    """Shape B: ``count`` float32 tensors of 4-64 KiB (seeded sizes, multiples of 4 bytes)."""
    rng = np.random.default_rng(0)
    elems = rng.integers(1024, 16 * 1024 + 1, size=count)
    return {f"b{i:05d}.weight": rng.random(int(n), dtype=np.float32) for i, n in enumerate(elems)}


def _save_both(arrays: dict[str, np.ndarray], ckpt: str, st: str) -> None:
    from safetensors.numpy import save_file

    import ortckpt

    ortckpt.save(ortckpt.CheckpointState(arrays), ckpt)
    save_file(arrays, st)


# -- child: cold open + one tensor, in a fresh interpreter -----------------------------------------


def _cold_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Imports and a warm-up on another file first (untimed); then evicts the file and times
    opening it and summing one tensor, counting the major page faults of that alone."""
    side, path, name, warm = spec["side"], spec["path"], spec["name"], spec["warm"]
    if side == "check":  # does eviction work here? read every page cold, then again warm
        import mmap

        counts = []
        for evict in (True, False):
            if evict:
                _evict(path)
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                m.madvise(mmap.MADV_RANDOM)  # no readahead: each cold page is its own major fault
                before = _majflt()
                sum(m[i] for i in range(0, len(m), 4096))
                counts.append(_majflt() - before)
        return {
            "cold_majflt": counts[0],
            "warm_majflt": counts[1],
            "pages": -(-os.path.getsize(path) // 4096),
        }
    if side == "ortckpt":
        import ortckpt

        def run(p: str, n: str) -> float:
            return float(ortckpt.load(p).parameters[n].data.sum())

    else:
        from safetensors import safe_open

        def run(p: str, n: str) -> float:
            with safe_open(p, "np") as f:
                return float(f.get_tensor(n).sum())

    run(warm, spec["warm_name"])
    gc.collect()
    _evict(path)
    before = _majflt()
    t0 = time.perf_counter()
    run(path, name)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "majflt": _majflt() - before}


def _run_cold(spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE), "--cold-child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise RuntimeError(f"cold child ({spec['side']}): {tail}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- the goals ---------------------------------------------------------------------------------------


def goal_save_a(cfg: Config, tmp: str, rows: dict[str, Row]) -> None:
    row = rows["1"]
    a = bench_save.shape_a(tmp, cfg.size_mib, cfg.repeats)
    row.times = a["times"]
    _pair(row, "ortckpt_save", "tofile_fsync")
    t = row.times
    row.details = [
        f"ortckpt.save (fsync + rename) {_ms(t['ortckpt_save'])}; "
        f"ndarray.tofile + fsync {_ms(t['tofile_fsync'])}",
        f"also os.write of each array + fsync {_ms(t['write_fsync'])}: save / that = "
        f"{bench_save.ratio(t, 'ortckpt_save', 'write_fsync'):.3f}x "
        f"(min {bench_save.ratio_of_minimums(t, 'ortckpt_save', 'write_fsync'):.3f}x)",
    ]


def goal_save_memory(cfg: Config, tmp: str, rows: dict[str, Row]) -> None:
    row = rows["2"]
    runs = min(3, cfg.repeats)  # memory is steady from run to run: the max of a few fresh processes
    peaks = [bench_save.peak_extra_memory(tmp, cfg.size_mib) for _ in range(runs)]
    known = [p / MiB for p in peaks if p is not None]
    if not known:
        row.error = "skipped (needs Linux /proc/self/clear_refs)"
        return
    row.median, row.minimum = max(known), min(known)
    row.extra["peak_extra_mib"] = known
    row.details = [f"peak RSS growth during one save of A, {runs} fresh processes: max {max(known):.1f} MiB"]


def goal_save_c(cfg: Config, tmp: str, rows: dict[str, Row]) -> None:
    row = rows["3"]
    c = bench_save.shape_c(tmp, cfg.tensors_c, cfg.repeats, breakdown=False)
    row.times = c["times"]
    if "safetensors_fsync" not in row.times:
        row.error = "skipped (safetensors not installed)"
        return
    _pair(row, "ortckpt_save", "safetensors_fsync")
    t = row.times
    row.details = [
        f"ortckpt.save {_ms(t['ortckpt_save'])}; safetensors save_file + fsync {_ms(t['safetensors_fsync'])}"
    ]


def goal_load_c(cfg: Config, files: dict[str, str], rows: dict[str, Row]) -> None:
    from safetensors import safe_open

    import ortckpt

    row = rows["4"]
    ckpt, st = files["c_ckpt"], files["c_st"]

    def ortckpt_side() -> Any:
        s = ortckpt.load(ckpt)
        return s, [p.data for p in s.parameters.values()]

    def safetensors_side() -> Any:
        with safe_open(st, "np") as f:
            return [f.get_tensor(k) for k in f.keys()]

    row.times = _measure({"safetensors": safetensors_side, "ortckpt": ortckpt_side}, cfg.repeats)
    _pair(row, "ortckpt", "safetensors")
    t = row.times
    n = cfg.tensors_c
    row.details = [
        f"ortckpt load + .data of each {_ms(t['ortckpt'])} = "
        f"{statistics.median(t['ortckpt']) / n * 1e6:.2f} µs/tensor; "
        f"safetensors safe_open + get_tensor of each {_ms(t['safetensors'])} = "
        f"{statistics.median(t['safetensors']) / n * 1e6:.2f} µs/tensor"
    ]


def _bulk(ckpt: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    import ortckpt

    return (
        lambda: np.fromfile(ckpt, dtype=np.uint8),
        lambda: ortckpt.load(ckpt, mmap=False).to_numpy(),
    )


def goal_bulk_a(cfg: Config, files: dict[str, str], rows: dict[str, Row]) -> None:
    row = rows["5"]
    fromfile, to_numpy = _bulk(files["a_ckpt"])
    row.times = _measure({"fromfile": fromfile, "to_numpy": to_numpy}, cfg.repeats)
    _pair(row, "to_numpy", "fromfile")
    t = row.times
    size = os.path.getsize(files["a_ckpt"])
    row.details = [
        f"load(mmap=False).to_numpy() {_ms(t['to_numpy'])}; np.fromfile of the checkpoint "
        f"({size / MiB:,.1f} MiB) {_ms(t['fromfile'])}"
    ]


def goal_bulk_c(cfg: Config, files: dict[str, str], rows: dict[str, Row]) -> None:
    """Goal 6, and the floor beside it: making one ndarray per tensor at all, from bytes in memory."""
    row, floor_row = rows["6"], rows["i-floor"]
    ckpt = files["c_ckpt"]
    fromfile, to_numpy = _bulk(ckpt)
    n = cfg.tensors_c
    names = [f"t{i:06d}" for i in range(n)]
    buf = bytes(n * 64)

    def floor() -> Any:
        return {name: np.frombuffer(buf, np.float32, 16, i * 64) for i, name in enumerate(names)}

    ops: dict[str, Callable[[], Any]] = {"fromfile": fromfile, "floor": floor, "to_numpy": to_numpy}
    try:
        to_numpy()
    except Exception as e:  # goal 6 cannot run; the floor still tells what it could reach
        row.error = f"failed: {_one_line(e)}"
        del ops["to_numpy"]
    times = _measure(ops, cfg.repeats)
    floor_row.times = {k: times[k] for k in ("fromfile", "floor")}
    floor_row.median = bench_save.ratio(times, "floor", "fromfile")
    floor_row.minimum = bench_save.ratio_of_minimums(times, "floor", "fromfile")
    floor_row.details = [
        f"{n:,} np.frombuffer views of one in-memory bytes object, into a dict by name: "
        f"{_ms(times['floor'])} "
        f"= {statistics.median(times['floor']) / n * 1e6:.2f} µs/array; np.fromfile of the checkpoint "
        f"({os.path.getsize(ckpt) / MiB:,.1f} MiB) {_ms(times['fromfile'])}"
    ]
    assert floor_row.median is not None
    floor_row.details.append(
        f"floor / np.fromfile = {floor_row.median:.1f}x: "
        + (
            "goal 6's 2x is below what making one ndarray per tensor costs at all"
            if floor_row.median > 2
            else "goal 6's 2x is above the floor"
        )
    )
    if row.error:
        floor_row.details.append("ortckpt to_numpy / floor: n/a (goal 6 failed)")
        return
    row.times = {k: times[k] for k in ("fromfile", "to_numpy")}
    _pair(row, "to_numpy", "fromfile")
    row.details = [
        f"load(mmap=False).to_numpy() {_ms(times['to_numpy'])}; np.fromfile {_ms(times['fromfile'])}"
    ]
    floor_row.times["to_numpy"] = times["to_numpy"]
    floor_row.details.append(
        f"ortckpt to_numpy / floor = {bench_save.ratio(times, 'to_numpy', 'floor'):.2f}x "
        f"(min {bench_save.ratio_of_minimums(times, 'to_numpy', 'floor'):.2f}x)"
    )


def goal_cold_b(cfg: Config, files: dict[str, str], rows: dict[str, Row]) -> None:
    row, check_row = rows["7"], rows["i-evict"]
    check = _run_cold({"side": "check", "path": files["b_ckpt"], "name": "", "warm": "", "warm_name": ""})
    check_row.extra = check
    works = check["cold_majflt"] > 0 and check["warm_majflt"] == 0
    check_row.details = [
        f"every page of B's checkpoint read through mmap after fsync + POSIX_FADV_DONTNEED: "
        f"{check['cold_majflt']} major faults for {check['pages']} pages (random-access advice); "
        f"read again (warm): {check['warm_majflt']}"
        + ("" if works else "  -> EVICTION DOES NOT WORK HERE: goal 7 is measured warm")
    ]
    check_row.median = float(check["cold_majflt"])
    name = files["b_name"]
    specs = {
        "safetensors": {"side": "safetensors", "path": files["b_st"], "warm": files["w_st"]},
        "ortckpt": {"side": "ortckpt", "path": files["b_ckpt"], "warm": files["w_ckpt"]},
    }
    faults: dict[str, list[int]] = {k: [] for k in specs}
    row.times = {k: [] for k in specs}
    for _ in range(cfg.repeats):
        for key, spec in specs.items():
            res = _run_cold({**spec, "name": name, "warm_name": "w"})
            row.times[key].append(res["seconds"])
            faults[key].append(res["majflt"])
    row.extra["majflt"] = faults
    _pair(row, "ortckpt", "safetensors")
    t = row.times
    row.details = [
        f"ortckpt load + .data.sum() of {name} {_ms(t['ortckpt'])}, major faults {faults['ortckpt']}; "
        f"safetensors safe_open + get_tensor.sum() {_ms(t['safetensors'])}, "
        f"major faults {faults['safetensors']}",
        "each run a fresh interpreter: imports and a warm-up on another file untimed, then the file evicted",
    ]


def goal_startup(cfg: Config, rows: dict[str, Row]) -> None:
    wall, cpu = bench_startup.measure(cfg.startup_repeats)
    imp, hlp = rows["8"], rows["9"]
    secs = {k: [v / 1e3 for v in vs] for k, vs in wall.items()}
    imp.times = secs
    hlp.times = secs
    inside = bench_startup.import_after_numpy(cfg.startup_repeats)
    imp.extra["import_after_numpy_ms"] = inside
    imp.median = statistics.median(inside)
    imp.minimum = min(inside)
    hlp.median = statistics.median(wall["ortckpt --help"]) / statistics.median(wall["import numpy"])
    hlp.minimum = min(wall["ortckpt --help"]) / min(wall["import numpy"])
    med = {k: statistics.median(v) for k, v in wall.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    imp.extra["cpu_ms"] = cpu
    hlp.extra["cpu_ms"] = cpu
    imp.details = [
        f"import ortckpt timed in {cfg.startup_repeats} fresh processes that imported numpy first: "
        f"median {imp.median:.1f} ms, min {imp.minimum:.1f} ms",
        "whole processes, wall: import ortckpt - import numpy = "
        f"{med['import ortckpt'] - med['import numpy']:+.1f} ms (noisier: two start-ups)",
        f"{cfg.startup_repeats} fresh processes each, wall medians: "
        + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items()),
        "CPU time (user + system) medians: " + ", ".join(f"{k} {v:.1f} ms" for k, v in cmed.items()),
        "by CPU time: import ortckpt - import numpy = "
        f"{cmed['import ortckpt'] - cmed['import numpy']:+.1f} ms",
    ]
    hlp.details = [
        f"by CPU time: ortckpt --help / import numpy = {cmed['ortckpt --help'] / cmed['import numpy']:.2f}x",
    ]


def ort_rows(
    cfg: Config, files: dict[str, str], tmp: str, rows: dict[str, Row], ort_py: str | None, ort_status: str
) -> None:
    """ORT 1.19.2 in its side venv (numpy 1), each run a fresh subprocess as bench_checkpoint does."""
    load_row, save_row = rows["i-ort-load"], rows["i-ort-save"]
    if ort_py is None or ort_status.startswith("skipped"):
        load_row.error = save_row.error = ort_status
        return
    bcfg = bench_checkpoint.Config(size_mib=cfg.size_mib, tensors=64, python=sys.executable)
    out = os.path.join(tmp, "ort-out.ckpt")

    def run(row: Row, pairs: dict[str, tuple[str, str]], ckpt: str) -> None:
        row.times = {k: [] for k in pairs}
        for _ in range(cfg.ort_repeats):
            for key, (python, op) in pairs.items():
                os.sync()
                try:
                    res = bench_checkpoint._run_child(python, op, ckpt, out, bcfg)
                finally:
                    for p in bench_checkpoint._checkpoint_files(out):
                        os.unlink(p)
                row.times[key].append(res["seconds"])

    try:
        run(load_row, {"ort": (ort_py, "ort_load"), "ortckpt": (sys.executable, "view_all")}, files["c_ckpt"])
        _pair(load_row, "ortckpt", "ort")
        t = load_row.times
        load_row.details = [
            f"ortckpt load + .data of each {_ms(t['ortckpt'])}; ORT load_checkpoint {_ms(t['ort'])}"
        ]
    except Exception as e:
        load_row.error = f"failed: {_one_line(e)}"
    try:
        run(
            save_row,
            {"ort": (ort_py, "ort_save"), "ortckpt": (sys.executable, "ortckpt_save")},
            files["a_ckpt"],
        )
        _pair(save_row, "ortckpt", "ort")
        t = save_row.times
        save_row.details = [
            f"ortckpt.save (fsync + rename) {_ms(t['ortckpt'])}; "
            f"ORT save_checkpoint (no fsync) {_ms(t['ort'])}"
        ]
    except Exception as e:
        save_row.error = f"failed: {_one_line(e)}"


# -- the run -----------------------------------------------------------------------------------------


def make_rows(cfg: Config) -> dict[str, Row]:
    a = f"A ({cfg.size_mib} MiB)"
    b, c = f"B ({cfg.tensors_b:,} t.)", f"C ({cfg.tensors_c:,} t.)"
    rows = [
        Row("1", f"save {a} vs ndarray.tofile + fsync", "x", 1.15),
        Row("2", f"save {a}: peak extra memory", "MiB", 64),
        Row("3", f"save {c} vs safetensors save_file + fsync", "x", 1.2),
        Row("4", f"load {c} + every tensor vs safetensors", "x", 1.2),
        Row("5", f"bulk read {a}: to_numpy vs np.fromfile", "x", 1.1),
        Row("6", f"bulk read {c}: to_numpy vs np.fromfile", "x", 2.0),
        Row("7", f"cold open {b} + one tensor vs safetensors", "x", 1.5),
        Row("8", "import ortckpt over import numpy", "ms", 10),
        Row("9", "ortckpt --help vs python -c 'import numpy'", "x", 1.5),
        Row("i-floor", f"floor {c}: 1 ndarray per tensor / fromfile", "x"),
        Row("i-evict", "eviction check: cold major faults (B)", ""),
        Row("i-ort-load", f"load {c} + every tensor vs ORT load", "x"),
        Row("i-ort-save", f"save {a} vs ORT save_checkpoint", "x"),
    ]
    return {r.key: r for r in rows}


def _fmt_value(row: Row, v: float | None) -> str:
    if v is None:
        return "-"
    if row.unit == "MiB":
        return f"{v:.1f} MiB"
    if row.unit == "ms":
        return f"{v:+.1f} ms"
    if row.unit == "x":
        return f"{v:.3g}x"
    return f"{v:.0f}"


def _fmt_bound(row: Row) -> str:
    if row.bound is None:
        return ""
    return f"<= {row.bound:g} {row.unit}" if row.unit != "x" else f"<= {row.bound:g}x"


COLS = (4, 56, 10, 10, 12, 8)


def format_row(row: Row) -> str:
    num = row.key if not row.key.startswith("i-") else "i"
    head = f"{num:<{COLS[0]}}{row.text:<{COLS[1]}}"
    if row.error:
        return f"{head}{row.error}"
    return (
        f"{head}{_fmt_value(row, row.median):>{COLS[2]}}{_fmt_value(row, row.minimum):>{COLS[3]}}"
        f"{_fmt_bound(row):>{COLS[4]}}  {row.verdict}"
    )


def header() -> str:
    h = (
        f"{'#':<{COLS[0]}}{'goal (ortckpt vs baseline)':<{COLS[1]}}"
        f"{'median':>{COLS[2]}}{'min':>{COLS[3]}}{'bound':>{COLS[4]}}  verdict"
    )
    return h + "\n" + "-" * len(h)


def _machine(cfg: Config) -> tuple[dict[str, Any], str | None, str]:
    import ortckpt

    try:
        import safetensors

        st_version = safetensors.__version__
    except ImportError:
        st_version = "not installed"
    ort_py = bench_checkpoint.resolve_ort_python(cfg.ort_python)
    if ort_py is None:
        ort_status = "skipped (no ORT env)"
    else:
        try:
            info = bench_checkpoint._run_child(ort_py, "env_info", "", "", bench_checkpoint.Config())["extra"]
            ort_status = (
                f"skipped (ORT env broken: {info.get('error', 'no checkpoint API')})"
                if "error" in info or not info.get("has_checkpoint_api")
                else f"onnxruntime {info['onnxruntime']} (numpy {info['numpy']}) via {ort_py}"
            )
        except Exception as e:
            ort_status = f"skipped (ORT env broken: {_one_line(e)})"
    mem = bench_checkpoint._mem_total()
    machine = {
        "cpu": bench_checkpoint._cpu_model(),
        "cores": os.cpu_count(),
        "mem_total_mib": mem // MiB if mem else None,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "ortckpt": ortckpt.__version__,
        "safetensors": st_version,
        "ort": ort_status,
    }
    return machine, ort_py, ort_status


def run(cfg: Config, out: Callable[[str], None] = print) -> dict[str, Any]:
    """Measures every row, printing the table as it goes; returns everything for ``--json``."""
    t_start = time.perf_counter()
    machine, ort_py, ort_status = _machine(cfg)
    rows = make_rows(cfg)
    load_before = bench_checkpoint._loadavg()
    with tempfile.TemporaryDirectory(prefix="ortckpt-goals-", dir=cfg.tmpdir) as tmp:
        machine["tmpdir_fs"] = bench_checkpoint._fs_type(tmp)
        out(
            f"machine: {machine['cpu']}, {machine['cores']} cores, {machine['mem_total_mib']:,} MiB RAM, "
            f"{machine['os']}, temp files on {machine['tmpdir_fs']}"
        )
        out(
            f"python {machine['python']}, numpy {machine['numpy']}, ortckpt {machine['ortckpt']}, "
            f"safetensors {machine['safetensors']}; ORT: {ort_status}"
        )
        out(
            f"shapes: A = {cfg.size_mib} MiB in 64 float32 tensors"
            + (" (--quick: the goal's A is 512 MiB)" if cfg.quick and cfg.size_mib != 512 else "")
            + f"; B = {cfg.tensors_b:,} float32 tensors of 4-64 KiB (seed 0); C = {cfg.tensors_c:,} float32 "
            "tensors of 64 B"
        )
        out(
            "each ratio: ortckpt / baseline, median / median and min / min of "
            f"{cfg.repeats} interleaved rounds "
            f"(startup: {cfg.startup_repeats} processes per command; ORT rows: {cfg.ort_repeats} rounds); "
            "warm cache except goal 7"
            + ("" if cfg.repeats >= GOAL_REPEATS else f"; FEWER THAN {GOAL_REPEATS} ROUNDS: not goal figures")
        )
        out(f"load average before: {load_before}")
        out("")
        out(header())

        files = {k: os.path.join(tmp, v) for k, v in {
            "a_ckpt": "a.ckpt", "b_ckpt": "b.ckpt", "b_st": "b.safetensors", "c_ckpt": "c.ckpt",
            "c_st": "c.safetensors", "w_ckpt": "w.ckpt", "w_st": "w.safetensors",
        }.items()}  # fmt: skip
        prepared: dict[str, str] = {}

        def prepare() -> None:
            """The read goals' files, written once (untimed): A, B and C as checkpoints, B and C also
            as safetensors, and a one-tensor pair to warm the libraries up on in the cold children."""
            if prepared:
                if "error" in prepared:
                    raise RuntimeError(prepared["error"])
                return
            try:
                import ortckpt

                ortckpt.save(
                    ortckpt.CheckpointState(bench_save.arrays_a(cfg.size_mib * MiB, 64)), files["a_ckpt"]
                )
                b = arrays_b(cfg.tensors_b)
                files["b_name"] = sorted(b)[len(b) // 2]
                _save_both(b, files["b_ckpt"], files["b_st"])
                _save_both(bench_save.arrays_c(cfg.tensors_c), files["c_ckpt"], files["c_st"])
                _save_both({"w": np.ones(16, np.float32)}, files["w_ckpt"], files["w_st"])
                os.sync()
                prepared["done"] = "1"
            except Exception as e:
                prepared["error"] = f"preparing the files: {_one_line(e)}"
                raise

        # (rows it fills, needs the prepared files, the step)
        steps: list[tuple[list[str], bool, Callable[[], None]]] = [
            (["1"], False, lambda: goal_save_a(cfg, tmp, rows)),
            (["2"], False, lambda: goal_save_memory(cfg, tmp, rows)),
            (["3"], False, lambda: goal_save_c(cfg, tmp, rows)),
            (["4"], True, lambda: goal_load_c(cfg, files, rows)),
            (["5"], True, lambda: goal_bulk_a(cfg, files, rows)),
            (["6", "i-floor"], True, lambda: goal_bulk_c(cfg, files, rows)),
            (["7", "i-evict"], True, lambda: goal_cold_b(cfg, files, rows)),
            (["8", "9"], False, lambda: goal_startup(cfg, rows)),
            (["i-ort-load", "i-ort-save"], True, lambda: ort_rows(cfg, files, tmp, rows, ort_py, ort_status)),
        ]
        order, done, shown = list(rows), set[str](), 0
        for keys, needs_files, step in steps:
            t0 = time.perf_counter()
            try:
                if needs_files:
                    prepare()
                step()
            except Exception as e:
                for k in keys:
                    if rows[k].error is None and rows[k].median is None:
                        rows[k].error = f"failed: {_one_line(e)}"
            seconds = time.perf_counter() - t0
            if cfg.verbose:
                print(f"[rows {', '.join(keys)}: {seconds:.1f} s]", file=sys.stderr, flush=True)
            for k in keys:
                rows[k].extra["step_seconds"] = seconds
            done.update(keys)
            # rows print in table order as soon as they and every row above them are measured
            while shown < len(order) and order[shown] in done:
                out(format_row(rows[order[shown]]))
                shown += 1
    load_after = bench_checkpoint._loadavg()
    total = time.perf_counter() - t_start
    out("")
    out(f"load average after: {load_after}   (total {total:.1f} s)")
    out("")
    out("details (times: median (min) of the rounds):")
    for k, row in rows.items():
        for i, line in enumerate(row.details):
            out(f"{(k if i == 0 else ''):<11}{line}")
    return {
        "machine": machine,
        "config": asdict(cfg),
        "load_before": load_before,
        "load_after": load_after,
        "total_seconds": total,
        "rows": [{**asdict(r), "verdict": r.verdict} for r in rows.values()],
    }


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--cold-child"]:
        print(json.dumps(_cold_child(json.loads(argv[1]))))
        return 0
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="128 MiB shape A and 5 rounds: under 3 minutes")
    ap.add_argument("--size-mib", type=int, help="shape A's size (default 512; 128 with --quick)")
    ap.add_argument("--tensors-b", type=int, default=2000, help="shape B's tensor count (default 2000)")
    ap.add_argument("--tensors-c", type=int, default=100_000, help="shape C's tensor count (default 100000)")
    ap.add_argument("--repeats", type=int, help="interleaved rounds per row (default 7; 5 with --quick)")
    ap.add_argument(
        "--startup-repeats", type=int, help="processes per start-up command (default 30; 10 with --quick)"
    )
    ap.add_argument(
        "--ort-repeats",
        type=int,
        help="rounds of the informational ORT rows (default: --repeats; 3 with --quick: ORT's load of "
        "shape C alone takes ~10 s here)",
    )
    ap.add_argument(
        "--ort-python", help="python of the ORT 1.19.2 side venv (default: $ORTCKPT_ORT_VENV, .ort-venv)"
    )
    ap.add_argument("--tmpdir", help="where the temporary files go (default: the system's)")
    ap.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    ap.add_argument(
        "--strict", action="store_true", help="exit 2 when a row failed to run (skipped rows are fine)"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="log each step's duration to stderr")
    args = ap.parse_args(argv)
    cfg = Config(
        size_mib=args.size_mib or (128 if args.quick else 512),
        tensors_b=args.tensors_b,
        tensors_c=args.tensors_c,
        repeats=args.repeats or (5 if args.quick else 7),
        startup_repeats=args.startup_repeats or (10 if args.quick else 30),
        ort_repeats=args.ort_repeats or (3 if args.quick else args.repeats or 7),
        quick=args.quick,
        tmpdir=args.tmpdir,
        ort_python=args.ort_python,
        verbose=args.verbose,
    )
    if min(cfg.size_mib, cfg.tensors_b, cfg.tensors_c, cfg.repeats, cfg.startup_repeats, cfg.ort_repeats) < 1:
        ap.error("sizes, counts and repeats must be >= 1")
    result = run(cfg)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.strict and any(r["error"] and r["error"].startswith("failed") for r in result["rows"]):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
