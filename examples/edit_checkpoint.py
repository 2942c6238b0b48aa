"""Edit a checkpoint: scale one parameter, bump a property, save, and compare with the original.

Usage: python examples/edit_checkpoint.py [CKPT]   (the input is not modified)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import ortckpt

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "mlp_adamw_with_optimizer.ckpt"


def main(path: str) -> None:
    state = ortckpt.load(path)
    name = next(iter(state.trainable_parameters))
    param = state.parameters[name]
    param.data = param.data * 0.5  # .data is a read-only view; assigning replaces the values
    state.properties["epoch"] = int(state.properties.get("epoch", 0)) + 1
    state.properties["note"] = "halved " + name

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "edited.ckpt"
        ortckpt.save(state, out)  # atomic: temporary file, fsync, rename
        again = ortckpt.load(out)
        assert (again.parameters[name].data == param.data).all()
        print(f"saved {out.name}: {name} halved, epoch {again.properties['epoch']}")
        # the command line compares the two files (exit status 1: they differ)
        diff = subprocess.run(
            [sys.executable, "-m", "ortckpt", "diff", path, str(out)], text=True, capture_output=True
        )
        print(diff.stdout, end="")
        assert diff.returncode == 1, diff.stderr


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT))
