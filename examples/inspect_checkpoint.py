"""List what a checkpoint holds: parameters, optimizer state and properties.

Usage: python examples/inspect_checkpoint.py [CKPT]   (default: a checkpoint ORT 1.19.2 wrote)
"""

from __future__ import annotations

import sys
from pathlib import Path

import ortckpt

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "mlp_adamw_with_optimizer.ckpt"


def main(path: str) -> None:
    state = ortckpt.load(path)  # memory-mapped: no tensor bytes are read yet
    print(state)
    for name, param in state.parameters.items():
        kind = "trainable" if param.trainable else "frozen"
        print(f"{name:12} {kind:9} {param.dtype} {param.shape}")
    if state.optimizer is not None:
        for group_name, group in state.optimizer.items():
            print(f"optimizer {group_name}: step {group.step}, lr {group.initial_learning_rate:g}")
            for param_name, momentums in group.states.items():
                print(f"  {param_name}: {', '.join(momentums)}")
    for key, value in state.properties.items():
        print(f"property {key} = {value!r}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT))
