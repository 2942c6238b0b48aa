"""Command-line tool: ``ortckpt inspect PATH [--json] [--values N]`` and ``ortckpt --version``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import numpy as np

from . import _dtypes
from .errors import CheckpointError
from .io import load
from .state import CheckpointState, Parameter

JsonValue = Any


def _version() -> str:
    from . import __version__

    return __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ortckpt", description="Inspect ONNX Runtime on-device training checkpoints."
    )
    parser.add_argument("--version", action="version", version=f"ortckpt {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    inspect = commands.add_parser("inspect", help="print the content of a checkpoint")
    inspect.add_argument("path", metavar="PATH", help="checkpoint file")
    inspect.add_argument("--json", action="store_true", help="print machine-readable JSON")
    inspect.add_argument(
        "--values", type=_non_negative, default=0, metavar="N", help="also print the first N values"
    )
    return parser


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


# -- values -----------------------------------------------------------------------------------


def _head(param: Parameter, n: int) -> np.ndarray[Any, Any] | None:
    if n <= 0 or param.is_nominal:
        return None
    return param.data.reshape(-1)[:n]


def _json_float(x: float) -> JsonValue:
    return x if math.isfinite(x) else str(x)


def _json_values(values: np.ndarray[Any, Any]) -> list[JsonValue]:
    kind = values.dtype.kind
    if kind == "O":
        return [str(v) for v in values]
    if kind == "b":
        return [bool(v) for v in values]
    if kind in "iu":
        return [int(v) for v in values]
    if kind == "c":
        return [[_json_float(float(v.real)), _json_float(float(v.imag))] for v in values]
    return [_json_float(float(v)) for v in values.astype(np.float64)]


def _text_values(values: np.ndarray[Any, Any], total: int) -> str:
    items = [repr(v) if isinstance(v, str) else str(v) for v in values]
    more = ", ..." if total > len(items) else ""
    return "[" + ", ".join(items) + more + "]"


# -- report -----------------------------------------------------------------------------------


def _file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def to_json(state: CheckpointState, path: str, values: int = 0) -> dict[str, JsonValue]:
    params: list[dict[str, JsonValue]] = []
    for param in state.parameters.values():
        entry: dict[str, JsonValue] = {
            "name": param.name,
            "trainable": param.trainable,
            "data_type": param.data_type,
            "dtype": _dtypes.type_name(param.data_type),
            "shape": list(param.shape),
            "nbytes": param.nbytes,
        }
        head = _head(param, values)
        if head is not None:
            entry["values"] = _json_values(head)
        params.append(entry)

    optimizer: list[dict[str, JsonValue]] | None = None
    if state.optimizer is not None:
        optimizer = []
        for name, group in state.optimizer.items():
            states: dict[str, JsonValue] = {}
            for param_name, momentums in group.states.items():
                states[param_name] = {
                    m: {
                        "data_type": t.data_type,
                        "dtype": _dtypes.type_name(t.data_type),
                        "shape": list(t.shape),
                        "nbytes": t.nbytes,
                    }
                    for m, t in momentums._items()
                }
            optimizer.append(
                {
                    "name": name,
                    "step": group.step,
                    "initial_learning_rate": _json_float(group.initial_learning_rate),
                    "states": states,
                }
            )

    properties: dict[str, JsonValue] = {
        k: _json_float(v) if isinstance(v, float) else v for k, v in state.properties.items()
    }
    return {
        "path": path,
        "file_size": _file_size(path),
        "version": state.version,
        "is_nominal": state.is_nominal,
        "has_external_data": state.has_external_data,
        "parameters": params,
        "optimizer": optimizer,
        "properties": properties,
    }


def _f32(value: float) -> str:
    """Shortest text that reads back as the same float32 (how ORT stores these floats)."""
    return str(np.float32(value))


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def print_text(state: CheckpointState, path: str, values: int, out: TextIO) -> None:
    size = _file_size(path)
    size_text = f", {size} bytes" if size is not None else ""
    print(f"{path}: ORT training checkpoint, version {state.version}{size_text}", file=out)
    print(f"nominal: {_yes(state.is_nominal)}, external data: {_yes(state.has_external_data)}", file=out)

    params = list(state.parameters.values())
    n_train = sum(1 for p in params if p.trainable)
    total = sum(p.nbytes for p in params)
    print(
        f"\nparameters: {len(params)} ({n_train} trainable, {len(params) - n_train} frozen), {total} bytes",
        file=out,
    )
    if params:
        rows = [
            (
                p.name,
                "trainable" if p.trainable else "frozen",
                _dtypes.type_name(p.data_type),
                "nominal" if p.is_nominal else str(list(p.shape)),
                str(p.nbytes),
            )
            for p in params
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for row, param in zip(rows, params):
            cells = [cell.ljust(width) for cell, width in zip(row, widths)]
            print(f"  {'  '.join(cells)}  {row[4]} B", file=out)
            head = _head(param, values)
            if head is not None:
                print(f"    values: {_text_values(head, param.size)}", file=out)

    if state.optimizer is None:
        print("\noptimizer: none", file=out)
    else:
        print(f"\noptimizer: {len(state.optimizer)} group(s)", file=out)
        for name, group in state.optimizer.items():
            print(
                f"  {name}: step {group.step}, initial_learning_rate {_f32(group.initial_learning_rate)}",
                file=out,
            )
            for param_name, momentums in group.states.items():
                desc = ", ".join(
                    f"{m} {_dtypes.type_name(t.data_type)} {list(t.shape)}" for m, t in momentums._items()
                )
                print(f"    {param_name}: {desc or '(no momentums)'}", file=out)

    print(f"\nproperties: {len(state.properties)}", file=out)
    for key, value in state.properties.items():
        shown = _f32(value) if isinstance(value, float) else repr(value)
        print(f"  {key} = {shown}  ({type(value).__name__})", file=out)


def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    state = load(path)
    if args.json:
        json.dump(to_json(state, path, args.values), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        print_text(state, path, args.values, out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("ortckpt: error: a command is required (try 'ortckpt inspect PATH')", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        return _inspect(args, out)
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): quietly stop
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (CheckpointError, OSError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"ortckpt: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
