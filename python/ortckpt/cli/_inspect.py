"""``ortckpt inspect``: the content of a checkpoint, as text or JSON."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, TextIO

import numpy as np

from .. import _dtypes
from ..io import load
from ..state import CheckpointState, Parameter
from ._format import JsonValue, f32, file_size, json_float, yes_no


def _head(param: Parameter, n: int) -> np.ndarray[Any, Any] | None:
    if n <= 0 or param.is_nominal:
        return None
    return param.data.reshape(-1)[:n]


def _json_values(values: np.ndarray[Any, Any]) -> list[JsonValue]:
    kind = values.dtype.kind
    if kind == "O":
        return [str(v) for v in values]
    if kind == "b":
        return [bool(v) for v in values]
    if kind in "iu":
        return [int(v) for v in values]
    if kind == "c":
        return [[json_float(float(v.real)), json_float(float(v.imag))] for v in values]
    return [json_float(float(v)) for v in values.astype(np.float64)]


def _text_values(values: np.ndarray[Any, Any], total: int) -> str:
    items = [repr(v) if isinstance(v, str) else str(v) for v in values]
    more = ", ..." if total > len(items) else ""
    return "[" + ", ".join(items) + more + "]"


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
                    "initial_learning_rate": json_float(group.initial_learning_rate),
                    "states": states,
                }
            )

    properties: dict[str, JsonValue] = {
        k: json_float(v) if isinstance(v, float) else v for k, v in state.properties.items()
    }
    return {
        "path": path,
        "file_size": file_size(path),
        "version": state.version,
        "is_nominal": state.is_nominal,
        "has_external_data": state.has_external_data,
        "parameters": params,
        "optimizer": optimizer,
        "properties": properties,
    }


def print_text(state: CheckpointState, path: str, values: int, out: TextIO) -> None:
    size = file_size(path)
    size_text = f", {size} bytes" if size is not None else ""
    if os.path.isdir(path):
        kind = "ORT 1.15 checkpoint folder"
    else:
        kind = f"ORT training checkpoint, version {state.version}"
    print(f"{path}: {kind}{size_text}", file=out)
    print(f"nominal: {yes_no(state.is_nominal)}, external data: {yes_no(state.has_external_data)}", file=out)

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
                f"  {name}: step {group.step}, initial_learning_rate {f32(group.initial_learning_rate)}",
                file=out,
            )
            for param_name, momentums in group.states.items():
                desc = ", ".join(
                    f"{m} {_dtypes.type_name(t.data_type)} {list(t.shape)}" for m, t in momentums._items()
                )
                print(f"    {param_name}: {desc or '(no momentums)'}", file=out)

    print(f"\nproperties: {len(state.properties)}", file=out)
    for key, value in state.properties.items():
        shown = f32(value) if isinstance(value, float) else repr(value)
        print(f"  {key} = {shown}  ({type(value).__name__})", file=out)


def run_inspect(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    state = load(path)
    if args.json:
        json.dump(to_json(state, path, args.values), out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        print_text(state, path, args.values, out)
    return 0
