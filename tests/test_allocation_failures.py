"""Allocation failures in the native readers raise ``MemoryError`` (or a ``CheckpointError``),
never an abort (issue 32, item 9), and ``from_adapter`` is lazy like ``load``.

Each reader runs in a subprocess under a range of address-space limits (``RLIMIT_AS``: the space
in use plus 0.5 to 8 times the file's size), from too little for the file itself to enough for
every value: each attempt must load or raise ``MemoryError`` / a ``CheckpointError``. Before, an
adapter of many small tensors aborted the process (SIGABRT, Rust's allocation failure) over most
of that range, and the other readers aborted at some limit too (a failed small allocation after
memory ran out, rayon's thread pool, the zip crate's directory). The inputs hold 50,000 tensors:
per-tensor allocations are what used to abort.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ortckpt

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc/self/status")

#: the subprocesses' reading of /proc/self/status (bytes of VmSize:, VmHWM:, ...)
STATUS = textwrap.dedent(
    """
    def status(key):
        with open("/proc/self/status") as f:
            return int(next(line for line in f if line.startswith(key)).split()[1]) * 1024
    """
)

SCAN = STATUS + textwrap.dedent(
    """
    import os, resource, sys
    import ortckpt

    kind, path = sys.argv[1], sys.argv[2]
    size = os.path.getsize(path)
    read = {
        "adapter": lambda: ortckpt.from_adapter(path),
        "load": lambda: ortckpt.load(path, mmap=False),
        "npz": lambda: ortckpt.from_npz(path),
        "safetensors": lambda: ortckpt.from_safetensors(path),
    }[kind]

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    for factor in [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 8]:
        outcome = "?"
        resource.setrlimit(resource.RLIMIT_AS, (status("VmSize:") + int(factor * size), hard))
        try:
            state = read()
            for p in state.parameters.values():
                p.data  # every value made, as a caller would use them
            outcome = "ok"
        except MemoryError:
            outcome = "MemoryError"
        except ortckpt.CheckpointError:
            outcome = "CheckpointError"
        finally:
            state = None
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        print(factor, outcome, flush=True)
    """
)


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One state of 50,000 tiny tensors in each format."""
    d = tmp_path_factory.mktemp("many")
    state = ortckpt.CheckpointState({f"p{i}": np.full(1, i, np.float32) for i in range(50_000)})
    files = {
        "adapter": d / "many.onnx_adapter",
        "load": d / "many.ckpt",
        "npz": d / "many.npz",
        "safetensors": d / "many.safetensors",
    }
    ortckpt.to_adapter(state, files["adapter"])
    ortckpt.save(state, files["load"])
    ortckpt.to_npz(state, files["npz"])
    ortckpt.to_safetensors(state, files["safetensors"])
    return files


@pytest.mark.parametrize("kind", ["adapter", "load", "npz", "safetensors"])
def test_out_of_memory_is_an_exception_never_an_abort(many: dict[str, Path], kind: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCAN, kind, str(many[kind])], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    outcomes = dict(line.split() for line in done.stdout.splitlines())
    assert len(outcomes) == 11 and set(outcomes.values()) <= {"ok", "MemoryError", "CheckpointError"}
    assert outcomes["0.5"] == "MemoryError"  # less than the file itself


def test_from_adapter_is_lazy(tmp_path: Path) -> None:
    """An adapter of 12.5 MiB: opening it and using every value costs about the file once (it
    cost about ten times before: every tensor copied into bytes, then into an array)."""
    rng = np.random.default_rng(0)
    state = ortckpt.CheckpointState(
        {f"layer{i}.lora_A": rng.standard_normal((64, 256)).astype(np.float32) for i in range(200)}
    )
    path = tmp_path / "a.onnx_adapter"
    ortckpt.to_adapter(state, path)
    script = STATUS + textwrap.dedent(
        """
        import os, sys
        import ortckpt

        before = status("VmHWM:")
        state = ortckpt.from_adapter(sys.argv[1])
        opened = status("VmHWM:")
        for p in state.parameters.values():
            p.data
        size = os.path.getsize(sys.argv[1])
        print((opened - before) / size, (status("VmHWM:") - before) / size)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    opened, used = map(float, done.stdout.split())
    assert opened < 1.5 and used < 1.5, (opened, used)
    back = ortckpt.from_adapter(path)
    assert back.source == str(path) and back.properties["adapter_version"] == 0
    for name, p in state.parameters.items():
        assert back.parameters[name].data.tobytes() == p.data.tobytes()
        assert not back.parameters[name].data.flags.writeable
    assert os.path.getsize(path) > 12 << 20
