"""Start-up cost, measured side by side in one run (medians of N fresh processes):

* ``python -c pass``, ``python -c "import numpy"``, ``python -c "import ortckpt"``;
* ``ortckpt --help`` (the console script next to this interpreter, else ``python -m ortckpt``).

Prints the medians, ``import ortckpt`` minus ``import numpy`` (goal: <= 10 ms) and ``ortckpt --help``
over ``import numpy`` (the interpreter start plus numpy's import; goal: <= 1.5x).

Usage: python benches/bench_startup.py [N]   (default 30)
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _median_ms(argv: list[str], n: int) -> float:
    subprocess.run(argv, check=True, capture_output=True)  # warm the page cache
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    py = sys.executable
    script = Path(py).with_name("ortckpt")
    cli = [str(script)] if script.exists() else [py, "-m", "ortckpt"]
    if shutil.which(cli[0]) is None and not Path(cli[0]).exists():
        cli = [py, "-m", "ortckpt"]
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "import numpy": [py, "-c", "import numpy"],
        "import ortckpt": [py, "-c", "import ortckpt"],
        "ortckpt --help": [*cli, "--help"],
    }
    # interleave the cases round by round so that machine load affects them alike
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(n):
        for name, argv in cases.items():
            samples[name].append(_median_ms(argv, 1))
    med = {k: statistics.median(v) for k, v in samples.items()}
    for name, ms in med.items():
        print(f"{name:16} {ms:7.1f} ms (median of {n})")
    extra = med["import ortckpt"] - med["import numpy"]
    ratio = med["ortckpt --help"] / med["import numpy"]
    print(f"import ortckpt - import numpy: {extra:+.1f} ms (goal <= 10 ms)")
    print(f"ortckpt --help / import numpy: {ratio:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    main()
