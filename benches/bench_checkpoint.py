#!/usr/bin/env python3
"""Benchmark ortckpt against ONNX Runtime 1.19.2 and plain numpy I/O on one generated checkpoint.

Not a test: nothing here asserts on time. Every measurement runs in a fresh subprocess so that the
peak RSS reported is that of one operation, and each row is repeated ``--repeats`` times (wall time:
median; memory: the largest of the repeats). Ratios are computed against baselines measured in the
same run, on the same file, on the same machine.

    .venv/bin/python benches/bench_checkpoint.py                # 512 MiB float32 in 64 tensors
    .venv/bin/python benches/bench_checkpoint.py --quick        # 32 MiB smoke run (30-50 s on 2 cores)
    .venv/bin/python benches/bench_checkpoint.py --size-mib 1024 --tensors 128 --repeats 5 --json out.json

The ORT rows run in the side venv that ``scripts/setup_ort_env.sh`` creates (ORT 1.19.2 needs
numpy<2): ``--ort-python``, else ``$ORTCKPT_ORT_VENV/bin/python``, else ``<repo>/.ort-venv/bin/python``.
Without one they print "skipped (no ORT env)".

All runs are warm-cache: the checkpoint is read once before the read rows and nothing drops the page
cache. ``os.sync()`` is called (untimed) before every measurement so a write row does not pay for
the previous row's dirty pages.

Importable: ``import bench_checkpoint; bench_checkpoint.main(["--quick"])`` returns 0, and
``run_benchmark(Config(...))`` returns the results without printing the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MiB = 1 << 20
HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
RESULT_MARK = "@@BENCH_RESULT@@ "
CHILD_TIMEOUT_S = 900

# --------------------------------------------------------------------------------------------------
# The operations
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    key: str
    label: str
    env: str  # "ortckpt": the ortckpt python (this one); "ort": the ORT side venv
    kind: str  # "read", "write" or "other" (imports)
    touches_all: bool  # moves every tensor byte (so a throughput figure makes sense)


OPS: list[Op] = [
    Op("fromfile", "np.fromfile (baseline: read N bytes)", "ortckpt", "read", True),
    Op("ort_load", "ORT load_checkpoint", "ort", "read", True),
    Op("open_one", "ortckpt load + read one tensor", "ortckpt", "read", False),
    Op("copy_all", "ortckpt load + np.array copy of every tensor", "ortckpt", "read", True),
    Op("sum_all", "ortckpt load + sum of every tensor (zero-copy)", "ortckpt", "read", True),
    Op("load_bytes", "ortckpt load_bytes + view every tensor", "ortckpt", "read", False),
    Op("tofile", "ndarray.tofile (baseline: write N bytes)", "ortckpt", "write", True),
    Op("tofile_fsync", "ndarray.tofile + fsync (baseline)", "ortckpt", "write", True),
    Op("ortckpt_save", "ortckpt save (from numpy arrays; fsync+rename)", "ortckpt", "write", True),
    Op("serialize", "ortckpt serialize (to bytes, no file)", "ortckpt", "write", True),
    Op("ort_save", "ORT save_checkpoint (of loaded state; no fsync)", "ort", "write", True),
    Op("import_ortckpt", "import ortckpt (numpy already imported)", "ortckpt", "other", False),
    Op("import_ort", "import ORT _pybind_state (numpy already imp.)", "ort", "other", False),
]
OP_BY_KEY = {op.key: op for op in OPS}

# (numerator, denominator, what it compares)
TIME_RATIOS: list[tuple[str, str]] = [
    ("copy_all", "fromfile"),
    ("sum_all", "fromfile"),
    ("ort_load", "fromfile"),
    ("copy_all", "ort_load"),
    ("sum_all", "ort_load"),
    ("open_one", "ort_load"),
    ("load_bytes", "ort_load"),
    ("ortckpt_save", "tofile"),
    ("ortckpt_save", "tofile_fsync"),
    ("ort_save", "tofile"),
    ("ort_save", "tofile_fsync"),
    ("ortckpt_save", "ort_save"),
    ("import_ortckpt", "import_ort"),
]
SHORT = {
    "fromfile": "np.fromfile",
    "ort_load": "ORT load",
    "open_one": "ortckpt open+one",
    "copy_all": "ortckpt load+copy all",
    "sum_all": "ortckpt load+sum all",
    "load_bytes": "ortckpt load_bytes",
    "tofile": "ndarray.tofile",
    "tofile_fsync": "tofile+fsync",
    "ortckpt_save": "ortckpt save",
    "serialize": "ortckpt serialize",
    "ort_save": "ORT save",
    "import_ortckpt": "import ortckpt",
    "import_ort": "import ORT",
}


def tensor_layout(size_bytes: int, tensors: int) -> list[tuple[str, tuple[int, ...]]]:
    """Names and shapes of the float32 tensors: ``tensors`` of them, ``size_bytes`` in all."""
    elems = size_bytes // 4
    if tensors < 1 or elems < tensors:
        raise ValueError(f"cannot split {size_bytes} bytes into {tensors} float32 tensors")
    per, rem = divmod(elems, tensors)
    layout: list[tuple[str, tuple[int, ...]]] = []
    for i in range(tensors):
        n = per + (rem if i == tensors - 1 else 0)
        shape = (n // 1024, 1024) if n % 1024 == 0 else (n,)
        layout.append((f"layer{i:04d}.weight", shape))
    return layout


# --------------------------------------------------------------------------------------------------
# Child side: runs in a fresh interpreter, either this venv's or ORT's (numpy only, no ortckpt there)
# --------------------------------------------------------------------------------------------------


def _proc_status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process in bytes (Linux); {} elsewhere."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS: Linux >= 4.0 clear_refs "5"."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _ru_maxrss_bytes() -> int:
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def _checkpoint_files(ckpt: str) -> list[str]:
    """The checkpoint and, when there is one, its external data file."""
    return [p for p in (ckpt, ckpt + ".data") if os.path.exists(p)]


def _make_arrays(size_bytes: int, tensors: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {}
    for name, shape in tensor_layout(size_bytes, tensors):
        a = np.empty(shape, dtype=np.float32)
        rng.random(out=a.reshape(-1), dtype=np.float32)
        arrays[name] = a
    return arrays


def _quiet_ort() -> Any:
    from onnxruntime.capi import _pybind_state as C

    try:
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)
    except Exception:
        pass
    return C


def _setup(op: str, ckpt: str, out: str, size: int, tensors: int, extra: dict[str, Any]) -> Callable[[], Any]:
    """Untimed preparation; returns the timed operation. What it returns is kept alive until the
    memory figures are taken, so views and copies count."""
    if op == "generate":
        import ortckpt

        state = ortckpt.CheckpointState(parameters=_make_arrays(size, tensors))
        return lambda: ortckpt.save(state, out)

    if op == "fromfile":
        import numpy as np

        # N bytes of the checkpoint's own (cached) pages; a checkpoint big enough to have an
        # external data file ("<ckpt>.data", ORT's layout past 1800 MiB) is read from both files
        parts = [(p, os.path.getsize(p)) for p in _checkpoint_files(ckpt)][::-1]

        def run() -> Any:
            left, out = size, []
            for path, n in parts:
                if left > 0:
                    out.append(np.fromfile(path, dtype=np.uint8, count=min(n, left)))
                    left -= out[-1].size
            return out

        return run

    if op in ("open_one", "copy_all", "view_all", "sum_all", "load_bytes"):
        import numpy as np

        import ortckpt

        if op == "open_one":

            def run() -> Any:
                state = ortckpt.load(ckpt)
                param = state.parameters[next(iter(state.parameters))]
                return state, float(param.data.sum())

        elif op == "copy_all":

            def run() -> Any:
                state = ortckpt.load(ckpt)
                return [np.array(p.data, copy=True) for p in state.parameters.values()]

        elif op == "view_all":  # not a row of this script: bench_goals.py's ortckpt side of ORT's load

            def run() -> Any:
                state = ortckpt.load(ckpt)
                return state, [p.data for p in state.parameters.values()]

        elif op == "sum_all":

            def run() -> Any:
                state = ortckpt.load(ckpt)
                return state, sum(float(p.data.sum()) for p in state.parameters.values())

        else:
            with open(ckpt, "rb") as f:
                data = f.read()

            def run() -> Any:
                state = ortckpt.load_bytes(data)
                return state, [p.data for p in state.parameters.values()]

        return run

    if op in ("tofile", "tofile_fsync"):
        chunks = list(_make_arrays(size, tensors).values())
        sync = op == "tofile_fsync"

        def run() -> Any:
            with open(out, "wb") as f:
                for a in chunks:
                    a.tofile(f)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())

        return run

    if op in ("ortckpt_save", "serialize"):
        import ortckpt

        arrays = _make_arrays(size, tensors)
        t0 = time.perf_counter()
        state = ortckpt.CheckpointState(parameters=arrays)  # copies the arrays into the state
        extra["construct_s"] = time.perf_counter() - t0
        del arrays
        if op == "serialize":
            return lambda: ortckpt.serialize(state)
        return lambda: ortckpt.save(state, out)

    if op in ("import_ortckpt", "import_ort"):
        import importlib

        import numpy  # noqa: F401  (both libraries need it; its import is not theirs)

        mod = "ortckpt" if op == "import_ortckpt" else "onnxruntime.capi._pybind_state"
        return lambda: importlib.import_module(mod)

    if op == "ort_load":
        C = _quiet_ort()
        return lambda: C.load_checkpoint(ckpt)

    if op == "ort_save":
        C = _quiet_ort()
        state = C.load_checkpoint(ckpt)
        return lambda: C.save_checkpoint(state, out, True)

    if op == "env_info":
        import numpy as np

        info: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__}
        try:
            import onnxruntime

            C = _quiet_ort()
            info["onnxruntime"] = onnxruntime.__version__
            info["has_checkpoint_api"] = hasattr(C, "load_checkpoint") and hasattr(C, "save_checkpoint")
        except Exception as e:  # reported, not raised: the caller decides to skip
            info["error"] = f"{type(e).__name__}: {e}"
        try:
            import ortckpt

            info["ortckpt"] = ortckpt.__version__
        except Exception:
            pass
        extra.update(info)
        return lambda: None

    raise ValueError(f"unknown op {op!r}")


def child_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    extra: dict[str, Any] = {}
    run = _setup(spec["op"], spec["ckpt"], spec["out"], spec["size"], spec["tensors"], extra)

    import gc

    gc.collect()
    reset = _reset_peak_rss()
    before = _proc_status()
    rss_before = before.get("VmRSS", _ru_maxrss_bytes())
    t0 = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - t0
    after = _proc_status()
    # VmHWM after a reset is the peak during the operation; without one, ru_maxrss includes setup.
    peak = after["VmHWM"] if reset and "VmHWM" in after else _ru_maxrss_bytes()
    report = {
        "seconds": seconds,
        "rss_before": rss_before,
        "peak_rss": peak,
        "peak_reset": reset,
        "anon_before": before.get("RssAnon"),
        "anon_after": after.get("RssAnon"),
        "file_after": after.get("RssFile"),
        "extra": extra,
    }
    del result
    sys.stdout.write(RESULT_MARK + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------------


@dataclass
class Config:
    size_mib: int = 512
    tensors: int = 64
    repeats: int = 3
    ort_python: str | None = None  # None: $ORTCKPT_ORT_VENV, then <repo>/.ort-venv
    python: str = sys.executable  # the interpreter with ortckpt installed
    tmpdir: str | None = None
    ops: list[str] | None = None  # None: all
    verbose: bool = False

    @property
    def size_bytes(self) -> int:
        return self.size_mib * MiB


@dataclass
class Row:
    op: Op
    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None

    def _vals(self, key: str) -> list[float]:
        return [r[key] for r in self.runs if r.get(key) is not None]

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.runs)

    @property
    def median_s(self) -> float:
        return statistics.median(self._vals("seconds"))

    @property
    def min_s(self) -> float:
        return min(self._vals("seconds"))

    @property
    def peak_rss(self) -> int:
        return int(max(self._vals("peak_rss")))

    @property
    def peak_delta(self) -> int:
        return int(max(r["peak_rss"] - r["rss_before"] for r in self.runs))

    @property
    def anon_delta(self) -> int | None:
        vals = [r["anon_after"] - r["anon_before"] for r in self.runs if r.get("anon_after") is not None]
        return int(max(vals)) if vals else None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op.key, "label": self.op.label, "runs": self.runs}
        if self.skipped:
            d["skipped"] = self.skipped
        if self.error:
            d["error"] = self.error
        if self.ok:
            d.update(
                median_s=self.median_s,
                min_s=self.min_s,
                peak_rss=self.peak_rss,
                peak_delta=self.peak_delta,
                anon_delta=self.anon_delta,
            )
        return d


class ChildError(RuntimeError):
    pass


def _run_child(python: str, op: str, ckpt: str, out: str, cfg: Config) -> dict[str, Any]:
    spec = {"op": op, "ckpt": ckpt, "out": out, "size": cfg.size_bytes, "tensors": cfg.tensors}
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    proc = subprocess.run(
        [python, str(HERE), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        env=env,
        cwd=str(REPO),
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            report: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return report
    tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}, no output"])[-1]
    raise ChildError(f"{op}: {tail}")


def resolve_ort_python(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    # as scripts/setup_ort_env.sh: $ORTCKPT_ORT_VENV when set, else <repo>/.ort-venv
    venv = os.environ.get("ORTCKPT_ORT_VENV") or str(REPO / ".ort-venv")
    python = Path(venv) / "bin" / "python"
    return str(python) if python.exists() else None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _fs_type(path: str) -> str:
    """Filesystem type of ``path`` from /proc/mounts (longest matching mount point)."""
    best, fstype = "", "?"
    try:
        real = os.path.realpath(path)
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


@dataclass
class Result:
    config: Config
    info: dict[str, Any]
    rows: list[Row]
    data_bytes: int
    file_bytes: int
    ort_status: str

    def row(self, key: str) -> Row | None:
        for r in self.rows:
            if r.op.key == key:
                return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "size_mib": self.config.size_mib,
            "tensors": self.config.tensors,
            "repeats": self.config.repeats,
            "data_bytes": self.data_bytes,
            "file_bytes": self.file_bytes,
            "ort": self.ort_status,
            "machine": self.info,
            "rows": [r.to_json() for r in self.rows],
            "ratios": {f"{a}/{b}": {"median": v, "min": m} for a, b, v, m in time_ratios(self)},
        }


def run_benchmark(cfg: Config, log: Callable[[str], None] = lambda s: None) -> Result:
    """Generate the checkpoint, run every operation ``cfg.repeats`` times in fresh subprocesses
    (round-robin, so drift over the run spreads across rows) and return the measurements."""
    ops = [OP_BY_KEY[k] for k in cfg.ops] if cfg.ops else list(OPS)
    mine = _run_child(cfg.python, "env_info", "", "", cfg)["extra"]
    if "ortckpt" not in mine:
        raise ChildError(f"{cfg.python}: cannot import ortckpt")

    ort_py = resolve_ort_python(cfg.ort_python)
    ort_info: dict[str, Any] = {}
    if ort_py is None or not Path(ort_py).exists():
        ort_status = "skipped (no ORT env)"
    else:
        try:
            ort_info = _run_child(ort_py, "env_info", "", "", cfg)["extra"]
            if "error" in ort_info or not ort_info.get("has_checkpoint_api"):
                ort_status = f"skipped (ORT env broken: {ort_info.get('error', 'no checkpoint API')})"
            else:
                ort_status = f"onnxruntime {ort_info['onnxruntime']} (numpy {ort_info['numpy']}) via {ort_py}"
        except (ChildError, OSError, subprocess.SubprocessError) as e:
            ort_status = f"skipped (ORT env broken: {e})"
    ort_ok = not ort_status.startswith("skipped")

    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_total": _mem_total(),
        "os": f"{platform.system()} {platform.release()}",
        "python": mine.get("python"),
        "numpy": mine.get("numpy"),
        "ortckpt": mine.get("ortckpt"),
        "ort": ort_status,
        "ort_numpy": ort_info.get("numpy"),
        "loadavg_start": _loadavg(),
    }

    rows = [Row(op) for op in ops]
    for row in rows:
        if row.op.env == "ort" and not ort_ok:
            row.skipped = "skipped (no ORT env)" if "no ORT env" in ort_status else "skipped (ORT env broken)"

    with tempfile.TemporaryDirectory(prefix="ortckpt-bench-", dir=cfg.tmpdir) as tmp:
        info["tmpdir_fs"] = _fs_type(tmp)
        ckpt = os.path.join(tmp, "bench.ckpt")
        out = os.path.join(tmp, "out.ckpt")
        log(f"generating {cfg.size_mib} MiB in {cfg.tensors} float32 tensors -> {ckpt}")
        gen = _run_child(cfg.python, "generate", "", ckpt, cfg)
        info["generate_s"] = gen["seconds"]
        file_bytes = sum(os.path.getsize(p) for p in _checkpoint_files(ckpt))

        # warm the page cache (the whole run is warm-cache)
        for path in _checkpoint_files(ckpt):
            with open(path, "rb", buffering=0) as f:
                while f.read(8 * MiB):
                    pass

        for rep in range(cfg.repeats):
            for row in rows:
                if row.skipped or row.error:
                    continue
                python = ort_py if row.op.env == "ort" else cfg.python
                assert python is not None
                if hasattr(os, "sync"):
                    os.sync()
                try:
                    res = _run_child(python, row.op.key, ckpt, out, cfg)
                except (ChildError, subprocess.SubprocessError, OSError) as e:
                    row.error = f"failed: {e}"
                    log(f"  {row.op.key}: {row.error}")
                    continue
                finally:
                    for path in _checkpoint_files(out):
                        os.unlink(path)
                row.runs.append(res)
                log(f"  [{rep + 1}/{cfg.repeats}] {row.op.key:<13} {res['seconds']:.4f} s")

    info["loadavg_end"] = _loadavg()
    return Result(cfg, info, rows, cfg.size_bytes, file_bytes, ort_status)


def time_ratios(res: Result) -> list[tuple[str, str, float, float]]:
    """(numerator, denominator, median/median, min/min) for the pairs in TIME_RATIOS."""
    out = []
    for a, b in TIME_RATIOS:
        ra, rb = res.row(a), res.row(b)
        if ra is not None and rb is not None and ra.ok and rb.ok and rb.median_s > 0 and rb.min_s > 0:
            out.append((a, b, ra.median_s / rb.median_s, ra.min_s / rb.min_s))
    return out


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:,.1f}"


def format_report(res: Result) -> str:
    cfg, info = res.config, res.info
    lines = []
    mem = info.get("mem_total")
    lines.append(
        f"machine: {info['cpu']}, {info['cores']} cores ({info['cores_usable']} usable), "
        f"{_mib(mem) + ' MiB RAM' if mem else 'RAM ?'}, {info['os']}"
    )
    lines.append(
        f"python {info['python']}, numpy {info['numpy']}, ortckpt {info['ortckpt']}; ORT: {info['ort']}"
    )
    lines.append(
        f"checkpoint: {cfg.tensors} float32 tensors, {res.data_bytes / MiB:,.0f} MiB of data "
        f"(N = {res.data_bytes:,} bytes), file(s) {res.file_bytes:,} bytes, on {info['tmpdir_fs']}"
    )
    lines.append(
        f"WARM CACHE: the file is in the page cache for every read row; os.sync() before each row. "
        f"load avg {info['loadavg_start']} -> {info['loadavg_end']}"
    )
    lines.append(
        f"each row: {cfg.repeats} fresh subprocesses; time = median (min), memory = max over repeats; "
        "imports and setup untimed"
    )
    lines.append("")
    header = ("operation", "median s", "min s", "MiB/s", "peak RSS", "Δ peak", "Δ anon")
    body = []
    for row in res.rows:
        if not row.ok:
            body.append((row.op.label, row.skipped or row.error or "no runs", "", "", "", "", ""))
            continue
        tput = f"{res.data_bytes / MiB / row.median_s:,.0f}" if row.op.touches_all else "-"
        body.append(
            (
                row.op.label,
                f"{row.median_s:.4f}",
                f"{row.min_s:.4f}",
                tput,
                _mib(row.peak_rss),
                _mib(row.peak_delta),
                _mib(row.anon_delta),
            )
        )
    measured = [b for b in body if b[2]] or [header]
    w0 = max(len(b[0]) for b in [header, *body])
    widths = [w0] + [max(len(header[i]), *(len(b[i]) for b in measured)) for i in range(1, len(header))]

    def fmt(cols: tuple[str, ...]) -> str:
        if not cols[2] and cols[1]:  # skipped / failed: one free-text cell
            return f"{cols[0]:<{w0}}  {cols[1]}"
        return "  ".join([f"{cols[0]:<{w0}}"] + [f"{c:>{w}}" for c, w in zip(cols[1:], widths[1:])])

    lines.append(fmt(header))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(fmt(b) for b in body)
    lines.append("(memory in MiB: peak RSS of the process during the operation; Δ peak = that peak minus RSS")
    lines.append(" just before it; Δ anon = anonymous RSS after it minus before, result still alive. Mapped")
    lines.append(" file pages count in RSS but not in anon: they are page cache, not private memory.)")
    save = res.row("ortckpt_save")
    if save is not None and save.ok:
        cs = [r["extra"].get("construct_s") for r in save.runs if r["extra"].get("construct_s") is not None]
        if cs:
            lines.append(
                f"(not in the ortckpt save row: CheckpointState(parameters=arrays), which copies the "
                f"arrays, median {statistics.median(cs):.4f} s)"
            )

    lines.append("")
    lines.append("time ratios (median / median, same run; < 1 means faster than the reference):")
    ratios = time_ratios(res)
    if not ratios:
        lines.append("  (none: reference rows missing)")
    labels = [f"{SHORT[a]} / {SHORT[b]}" for a, b, _, _ in ratios]
    lw = max((len(s) for s in labels), default=0)
    for label, (_, _, v, m) in zip(labels, ratios):
        lines.append(f"  {label:<{lw}} = {f'{v:.3g}x':<9} (min / min {m:.3g}x)")

    lines.append("")
    lines.append("memory: Δ peak as a multiple of the data size N:")
    mem_rows = [r for r in res.rows if r.ok and r.op.kind != "other"]
    mw = max((len(SHORT[r.op.key]) for r in mem_rows), default=0)
    for r in mem_rows:
        lines.append(f"  {SHORT[r.op.key]:<{mw}} = {r.peak_delta / res.data_bytes:.2f}x N")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--size-mib", type=int, default=None, help="data size in MiB (default 512; 32 with --quick)"
    )
    ap.add_argument("--tensors", type=int, default=64, help="number of float32 tensors (default 64)")
    ap.add_argument("--repeats", type=int, default=3, help="fresh subprocesses per row (default 3)")
    ap.add_argument("--quick", action="store_true", help="32 MiB smoke run (under a minute)")
    ap.add_argument(
        "--ort-python", help="python of the ORT 1.19.2 side venv (default: $ORTCKPT_ORT_VENV, .ort-venv)"
    )
    ap.add_argument(
        "--python", default=sys.executable, help="python with ortckpt installed (default: this one)"
    )
    ap.add_argument("--tmpdir", help="where to put the temporary directory (default: the system's)")
    ap.add_argument("--ops", help="comma-separated subset of: " + ",".join(OP_BY_KEY))
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--strict", action="store_true", help="exit 2 when a row failed (skipped rows are fine)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log each measurement to stderr")
    args = ap.parse_args(argv)
    if args.size_mib is None:
        args.size_mib = 32 if args.quick else 512
    if args.size_mib < 1 or args.tensors < 1 or args.repeats < 1:
        ap.error("--size-mib, --tensors and --repeats must be >= 1")
    if args.size_mib * MiB // 4 < args.tensors:
        ap.error("more tensors than float32 elements")
    if args.ops:
        args.ops = list(dict.fromkeys(s.strip() for s in args.ops.split(",") if s.strip()))
        unknown = [k for k in args.ops if k not in OP_BY_KEY]
        if unknown:
            ap.error(f"unknown --ops {unknown}; choose from {','.join(OP_BY_KEY)}")
    return args


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        return child_main(argv[1])
    args = parse_args(argv)
    cfg = Config(
        size_mib=args.size_mib,
        tensors=args.tensors,
        repeats=args.repeats,
        ort_python=args.ort_python,
        python=args.python,
        tmpdir=args.tmpdir,
        ops=args.ops,
        verbose=args.verbose,
    )
    free = shutil.disk_usage(cfg.tmpdir or tempfile.gettempdir()).free
    if free < 3 * cfg.size_bytes:
        print(
            f"bench_checkpoint: need ~{3 * cfg.size_mib} MiB free in the temp dir, have {free // MiB}",
            file=sys.stderr,
        )
        return 1

    def log(msg: str) -> None:
        if args.verbose:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    try:
        res = run_benchmark(cfg, log)
    except ChildError as e:
        print(f"bench_checkpoint: {e}", file=sys.stderr)
        return 1
    print(format_report(res))
    print(f"\n(total {time.perf_counter() - t0:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res.to_json(), f, indent=1)
    if args.strict and any(r.error for r in res.rows):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
