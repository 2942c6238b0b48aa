"""The benchmark script keeps working: a tiny run of every row, ORT rows included when its side
environment exists. This checks that it runs and reports ratios, not how fast anything is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benches" / "bench_checkpoint.py"


def test_benchmark_smoke_run(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--size-mib", "4", "--tensors", "4", "--repeats", "1", "--strict", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args, "--tmpdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "np.fromfile" in proc.stdout and "ortckpt save" in proc.stdout
    report = json.loads(out.read_text())
    rows = {row["op"]: row for row in report["rows"]}
    for op in ("fromfile", "open_one", "copy_all", "tofile", "ortckpt_save"):
        assert rows[op]["median_s"] > 0, op
    # The ratios the closing notes quote are computed from rows of this same run.
    assert report["ratios"]["copy_all/fromfile"]["median"] > 0
    assert report["ratios"]["ortckpt_save/tofile_fsync"]["median"] > 0


def test_save_benchmark_smoke_run(tmp_path: Path) -> None:
    """benches/bench_save.py runs end to end on tiny shapes and reports its ratios."""
    bench = BENCH.parent / "bench_save.py"
    out = tmp_path / "save.json"
    args = ["--size-mib", "4", "--tensors-c", "500", "--repeats", "1", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(bench), *args, "--tmpdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["a"]["ratio"] > 0 and report["a"]["ratio_write"] > 0
    assert set(report["c"]["times"]) >= {"ortckpt_save", "build_spec", "native_save"}
    assert "ratio save / (tofile + fsync)" in proc.stdout
