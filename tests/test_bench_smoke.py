"""The benchmark script keeps working: a tiny run of every row, ORT rows included when its side
environment exists. This checks that it runs and reports ratios, not how fast anything is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import http_servers

BENCH = Path(__file__).resolve().parents[1] / "benches" / "bench_checkpoint.py"


def run_bench(script: str, tmp_path: Path, *args: str, timeout: float = 600) -> tuple[str, dict[str, Any]]:
    """Runs ``benches/<script>`` with ``args``, ``--json`` and ``--tmpdir`` in ``tmp_path``;
    asserts it succeeded and returns what it printed and the JSON it wrote."""
    out = tmp_path / (Path(script).stem + ".json")
    proc = subprocess.run(
        [sys.executable, str(BENCH.parent / script), *args, "--json", str(out), "--tmpdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    return proc.stdout, report


def test_benchmark_smoke_run(tmp_path: Path) -> None:
    args = ["--size-mib", "4", "--tensors", "4", "--repeats", "1", "--strict"]
    stdout, report = run_bench("bench_checkpoint.py", tmp_path, *args)
    assert "np.fromfile" in stdout and "ortckpt save" in stdout
    rows = {row["op"]: row for row in report["rows"]}
    for op in ("fromfile", "open_one", "copy_all", "tofile", "ortckpt_save"):
        assert rows[op]["median_s"] > 0, op
    # The ratios the closing notes quote are computed from rows of this same run.
    assert report["ratios"]["copy_all/fromfile"]["median"] > 0
    assert report["ratios"]["ortckpt_save/tofile_fsync"]["median"] > 0


def test_save_benchmark_smoke_run(tmp_path: Path) -> None:
    """benches/bench_save.py runs end to end on tiny shapes and reports its ratios."""
    args = ["--size-mib", "4", "--tensors-c", "500", "--repeats", "1"]
    stdout, report = run_bench("bench_save.py", tmp_path, *args)
    assert report["a"]["ratio"] > 0 and report["a"]["ratio_write"] > 0
    assert set(report["c"]["times"]) >= {"ortckpt_save", "build_spec", "native_save"}
    assert "ratio save / (tofile + fsync)" in stdout


def test_goals_benchmark_smoke_run(tmp_path: Path) -> None:
    """benches/bench_goals.py runs every goal of issue 8 on tiny shapes: one table row per goal,
    each with finite figures and a verdict against its bound (whatever the timings are)."""
    import math

    tiny = ["--size-mib", "4", "--tensors-b", "40", "--tensors-c", "400"]
    rounds = ["--repeats", "1", "--startup-repeats", "1", "--ort-repeats", "1"]
    stdout, report = run_bench("bench_goals.py", tmp_path, *tiny, *rounds, timeout=300)
    rows = {row["key"]: row for row in report["rows"]}
    goals = [key for key in rows if not key.startswith("i-")]
    assert goals == [str(i) for i in range(1, 10)]
    bounds = {"1": 1.15, "2": 64, "3": 1.2, "4": 1.2, "5": 1.1, "6": 2.0, "7": 1.5, "8": 10, "9": 1.5}
    table = stdout.split("\n\n")[1].splitlines()
    for key in goals:
        row = rows[key]
        lines = [line for line in table if line.split(maxsplit=1)[0] == key]
        assert len(lines) == 1, (key, table)
        assert row["bound"] == bounds[key]
        assert row["error"] is None, row
        assert math.isfinite(row["median"]) and math.isfinite(row["minimum"]), row
        if key != "8":  # ratios and memory; goal 8 is a difference of times, either sign
            assert row["median"] >= 0 and row["minimum"] >= 0, row
        assert row["verdict"] == ("MET" if row["median"] <= row["bound"] else "NOT MET")
        assert lines[0].endswith(row["verdict"])
    # the cold-open goal really ran cold: its eviction check saw major faults, then none warm
    evict = rows["i-evict"]["extra"]
    assert evict["cold_majflt"] > 0 and evict["warm_majflt"] == 0, evict
    assert rows["i-floor"]["median"] > 0
    assert "load average before" in stdout and "load average after" in stdout


def test_average_benchmark_smoke_run(tmp_path: Path) -> None:
    """benches/bench_average.py (issue 17) runs every row on its quick shapes and reports each
    row's ratio to the floor and to the loop from the same run."""
    stdout, report = run_bench("bench_average.py", tmp_path, "--quick", "--repeats", "1")
    assert set(report) == {"A", "B"}
    rows = {"floor", "loop", "fedavg", "median", "trimmed_mean"}
    assert set(report["A"]["median_s"]) == rows | {"krum"}
    assert set(report["B"]["median_s"]) == rows
    for shape in report.values():
        assert shape["vs_floor"]["floor"] == 1.0
        assert all(seconds > 0 for seconds in shape["median_s"].values())
        assert all(ratio > 0 for ratio in shape["vs_loop"].values())
    assert "x floor" in stdout


def test_remote_benchmark_smoke_run(tmp_path: Path) -> None:
    """benches/bench_remote.py (issue 34) counts every row's bytes and requests at nginx: the lazy
    rows fetch a small part of the checkpoint, the whole download all of it, and the round each
    upload's bytes once."""
    pytest.importorskip("aiohttp")
    if http_servers.nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install -y nginx-light; scripts/setup_nginx.sh)")
    args = ["--mib", "16", "--tensors", "40", "--uploads", "4", "--upload-mib", "1", "--repeats", "1"]
    args += ["--large-mib", "12", "--latency-ms", "10", "--rate-mib", "0"]
    _, report = run_bench("bench_remote.py", tmp_path, *args)
    rows, size, tensor = report["rows"], report["size"], report["tensor_bytes"]
    assert rows["fsspec whole download"]["body_bytes"] >= size
    assert rows["ortckpt lazy: open + inspect"]["body_bytes"] < size // 8
    one = rows["ortckpt lazy: + one tensor"]
    assert tensor <= one["body_bytes"] <= tensor + (1 << 20) and 1 <= one["gets"] <= 4
    average = next(r for name, r in rows.items() if name.startswith("average"))
    assert average["gets"] >= 4 and average["body_bytes"] > 0
    # the large tensor: one range request, then 4 MiB parts (one at a time, four in flight)
    large = [way["gets"] for way in report["large_tensor"].values()]
    assert large[0] == 1 and large[1] == large[2] >= 3, report["large_tensor"]
