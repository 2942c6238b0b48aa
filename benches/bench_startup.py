"""Start-up cost, measured side by side in one run (medians of N fresh processes):

* ``python -c pass``, ``python -c "import numpy"``, ``python -c "import ortckpt"``;
* ``ortckpt --help`` (the console script next to this interpreter, else ``python -m ortckpt``).

Prints the medians of wall time and of the child's CPU time (user + system; steadier on a busy
machine), ``import ortckpt`` minus ``import numpy`` (goal: <= 10 ms) and ``ortckpt --help`` over
``import numpy`` (the interpreter start plus numpy's import; goal: <= 1.5x).

Usage: python benches/bench_startup.py [N]   (default 30)
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The children's environment: with bytecode caching on, as for an installed wheel (pip compiles
#: the .pyc files at install time). A PYTHONDONTWRITEBYTECODE=1 inherited from the shell would
#: make every run compile the package from source (~20 ms here) and measure that instead.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run_ms(argv: list[str]) -> tuple[float, float]:
    """(wall time, CPU time of the child: user + system) of one run, in ms. CPU time is far less
    disturbed than wall time when the machine is busy."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=CHILD_ENV)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return wall, cpu


def cases(py: str = sys.executable) -> dict[str, list[str]]:
    """The command lines compared: the interpreter alone, numpy's import, ortckpt's import and
    ``ortckpt --help`` (the console script next to ``py``, else ``py -m ortckpt``)."""
    script = Path(py).with_name("ortckpt")
    cli = [str(script)] if script.exists() else [py, "-m", "ortckpt"]
    if shutil.which(cli[0]) is None and not Path(cli[0]).exists():
        cli = [py, "-m", "ortckpt"]
    return {
        "python -c pass": [py, "-c", "pass"],
        "import numpy": [py, "-c", "import numpy"],
        "import ortckpt": [py, "-c", "import ortckpt"],
        "ortckpt --help": [*cli, "--help"],
    }


def measure(n: int, py: str = sys.executable) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Runs every case ``n`` times, interleaved round by round so that machine load affects them
    alike, after one untimed run each (warms the page cache and writes the .pyc files). Returns
    (wall, cpu) times in ms."""
    argvs = cases(py)
    for argv in argvs.values():
        subprocess.run(argv, check=True, capture_output=True, env=CHILD_ENV)
    wall: dict[str, list[float]] = {k: [] for k in argvs}
    cpu: dict[str, list[float]] = {k: [] for k in argvs}
    for _ in range(n):
        for name, argv in argvs.items():
            w, c = _run_ms(argv)
            wall[name].append(w)
            cpu[name].append(c)
    return wall, cpu


_IMPORT_AFTER_NUMPY = (
    "import time, numpy; t0 = time.perf_counter(); import ortckpt; print(time.perf_counter() - t0)"
)


def import_after_numpy(n: int, py: str = sys.executable) -> list[float]:
    """``import ortckpt`` timed inside ``n`` fresh processes that imported numpy first, in ms: what
    ortckpt adds to a program that uses numpy, without the noise of two whole process start-ups
    (numpy's own import varies by tens of ms from run to run on a busy machine)."""
    argv = [py, "-c", _IMPORT_AFTER_NUMPY]
    subprocess.run(argv, check=True, capture_output=True, env=CHILD_ENV)  # writes the .pyc files
    return [
        float(subprocess.run(argv, check=True, capture_output=True, text=True, env=CHILD_ENV).stdout) * 1000
        for _ in range(n)
    ]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    wall, cpu = measure(n)
    for label, samples in (("wall", wall), ("cpu", cpu)):
        med = {k: statistics.median(v) for k, v in samples.items()}
        print(f"-- {label} time, median of {n}")
        for name, ms in med.items():
            print(f"{name:16} {ms:7.1f} ms")
        extra = med["import ortckpt"] - med["import numpy"]
        ratio = med["ortckpt --help"] / med["import numpy"]
        print(f"import ortckpt - import numpy: {extra:+.1f} ms (goal <= 10 ms)")
        print(f"ortckpt --help / import numpy: {ratio:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
