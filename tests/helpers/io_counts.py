"""Counting what a round reads: the kernel's byte count of this process, and small float32
uploads to count it over."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ortckpt
from ortckpt import CheckpointState


def bytes_read() -> int:
    """Bytes this process has read with read/pread so far (the kernel's count, ``rchar``)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def float32_uploads(folder: Path, seed: int, count: int = 5) -> tuple[list[Path], int]:
    """``count`` upload files of four 2 MiB float32 tensors, and their bytes in all."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        state = CheckpointState({f"w{j}": rng.standard_normal(1 << 19).astype(np.float32) for j in range(4)})
        paths.append(folder / f"dev{i}.ckpt")
        ortckpt.save(state, paths[-1])
    return paths, sum(p.stat().st_size for p in paths)
