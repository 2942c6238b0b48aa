"""What the Python fuzz targets share: the time budget, the saved reproducer and the oracle.

A target runs in its own process (``python fuzz/python/<target>.py SECONDS SEED [ARTIFACTS]``),
so a crash of native code (a signal) ends it and is seen by its caller (scripts/fuzz.sh,
tests/test_fuzz.py) as a negative exit status. Before each case its input is written to
``ARTIFACTS/<target>-current``: after a crash that file reproduces it. An exception the oracle
does not allow is printed with the case and ends the run with status 1.
"""

from __future__ import annotations

import os
import random
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def ours(exc: BaseException) -> bool:
    """Allowed outcomes of hostile input: ortckpt's own exceptions (``CheckpointError`` and its
    subclasses, ``MemoryError``), or a ``ValueError``/``TypeError`` that ortckpt's own code raised
    on purpose (a caller's mistake the fuzzer made, such as an output name the model lacks): the
    innermost frame is in the ortckpt package, never in numpy, onnx or protobuf."""
    import ortckpt

    if isinstance(exc, (ortckpt.CheckpointError, MemoryError)):
        return True
    if type(exc) in (ValueError, TypeError):
        frames = traceback.extract_tb(exc.__traceback__)
        return bool(frames) and f"{os.sep}ortckpt{os.sep}" in frames[-1].filename
    return False


def run(target: str, case: Callable[[random.Random], tuple[bytes, Callable[[], Any]]]) -> None:
    """Runs cases for argv's SECONDS with argv's SEED; ``case(rng)`` gives (the input's bytes, to
    save, and the call to make)."""
    seconds, seed = float(sys.argv[1]), int(sys.argv[2])
    artifacts = Path(sys.argv[3] if len(sys.argv) > 3 else "fuzz/artifacts/python")
    artifacts.mkdir(parents=True, exist_ok=True)
    current = artifacts / f"{target}-current"
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    count = 0
    while time.monotonic() < end:
        data, call = case(rng)
        current.write_bytes(data)
        try:
            call()
        except BaseException as exc:  # the oracle decides (a KeyboardInterrupt stops the run)
            if isinstance(exc, KeyboardInterrupt) or not ours(exc):
                kept = artifacts / f"{target}-failure-{seed}-{count}"
                kept.write_bytes(data)
                traceback.print_exception(exc)
                print(f"{target}: {type(exc).__name__} escaped on case {count} (seed {seed}); input: {kept}")
                sys.exit(1)
        count += 1
    current.unlink(missing_ok=True)
    print(f"{target}: {count} cases in {seconds:g}s (seed {seed}), no crash, only our exceptions")
