"""A memory-mapped ``load`` reads the flatbuffer structure only: opening a checkpoint whose pages
are not in the page cache faults in its metadata pages, not one page per tensor (each tensor's
stored length, beside its values, is compared on first use). Counted as major page faults of a
fresh process after the file was evicted from the page cache; not a timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ortckpt
from ortckpt import CheckpointState

TENSORS = 2000

_PROBE = textwrap.dedent(
    """
    import json, mmap, os, resource, sys
    import ortckpt

    path, mode = sys.argv[1], sys.argv[2]

    def evict():
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

    def majflt():
        return resource.getrusage(resource.RUSAGE_SELF).ru_majflt

    evict()
    before = majflt()
    if mode == "control":  # touch one byte per tensor, as indexing did before
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            m.madvise(mmap.MADV_RANDOM)
            total = sum(m[i] for i in range(0, len(m), 16 * 1024))
    else:
        state = ortckpt.load(path)
        value = float(state.parameters["t01000"].data.sum())
    print(json.dumps({"majflt": majflt() - before}))
    """
)


def _faults(path: Path, mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["majflt"])


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise to evict the file")
def test_a_cold_open_faults_in_metadata_not_one_page_per_tensor(tmp_path: Path) -> None:
    target = tmp_path / "b.ckpt"
    # 16 KiB per tensor: every tensor's values are on pages of their own
    ortckpt.save(CheckpointState({f"t{i:05d}": np.ones(4096, np.float32) for i in range(TENSORS)}), target)
    os.sync()
    control = _faults(target, "control")
    if control < TENSORS // 2:
        pytest.skip(f"the page cache did not drop the file here (control: {control} major faults)")
    opened = _faults(target, "load")
    # metadata (~150 bytes per tensor), the one tensor read, and the interpreter's own faults
    assert opened < TENSORS // 10, (
        f"load + one tensor: {opened} major faults (one page per tensor: {control})"
    )
