"""``ortckpt inspect``: the content of a checkpoint, as text or JSON."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from .. import _dtypes, _native
from .._optimizer import momentum_tensors
from ..io import load
from ..state import CheckpointState
from ._format import (
    JsonValue,
    f32,
    file_size,
    human_size,
    json_float,
    natural_sorted,
    shorten,
    typed_value,
    yes_no,
)
from ._listing import head_values, json_values, parameters_in_order, text_values
from ._output import emit


def _sizes(state: CheckpointState, path: str) -> dict[str, JsonValue]:
    """Exact sizes in bytes: the checkpoint file, its external data file (or None) and the total."""
    size = file_size(path)
    # where the load found it (beside a symlink's target when there is no `<path>.data`)
    ext_path = os.fsdecode(_native.external_data_location(path)) if state.has_external_data else None
    ext_size = None if ext_path is None else file_size(ext_path)
    total = None if size is None or (ext_path is not None and ext_size is None) else size + (ext_size or 0)
    return {
        "file_size": size,
        "external_data_path": ext_path,
        "external_data_size": ext_size,
        "total_size": total,
    }


def to_json(state: CheckpointState, path: str, values: int = 0) -> dict[str, JsonValue]:
    params: list[dict[str, JsonValue]] = []
    for param in parameters_in_order(state):
        entry: dict[str, JsonValue] = {
            "name": param.name,
            "trainable": param.trainable,
            "data_type": param.data_type,
            "dtype": _dtypes.type_name(param.data_type),
            "shape": list(param.shape),
            "nbytes": param.nbytes,
        }
        head = head_values(param, values)
        if head is not None:
            entry["values"] = json_values(head)
        params.append(entry)

    optimizer: list[dict[str, JsonValue]] | None = None
    if state.optimizer is not None:
        optimizer = []
        for name, group in state.optimizer.items():
            states: dict[str, JsonValue] = {}
            for param_name in natural_sorted(group.states):
                momentums = group.states[param_name]
                states[param_name] = {
                    m: {
                        "data_type": t.data_type,
                        "dtype": _dtypes.type_name(t.data_type),
                        "shape": list(t.shape),
                        "nbytes": t.nbytes,
                    }
                    for m, t in momentum_tensors(momentums)
                }
            optimizer.append(
                {
                    "name": name,
                    "step": group.step,
                    "initial_learning_rate": json_float(group.initial_learning_rate),
                    "states": states,
                }
            )

    props = state.properties
    properties: dict[str, JsonValue] = {k: typed_value(props[k]) for k in natural_sorted(props)}
    return {
        "path": path,
        **_sizes(state, path),
        "version": state.version,
        "is_nominal": state.is_nominal,
        "has_external_data": state.has_external_data,
        "parameters": params,
        "optimizer": optimizer,
        "properties": properties,
    }


def print_text(state: CheckpointState, path: str, values: int, out: TextIO) -> None:
    sizes = _sizes(state, path)
    size_text = "" if sizes["file_size"] is None else f", {human_size(sizes['file_size'])}"
    if sizes["external_data_path"] is not None:
        size_text += (
            f" + {human_size(sizes['external_data_size'])} external data"
            f" = {human_size(sizes['total_size'])} total"
        )
    if os.path.isdir(path):
        kind = "ORT 1.15 checkpoint folder"
    else:
        kind = f"ORT training checkpoint, version {state.version}"
    print(f"{path}: {kind}{size_text}", file=out)
    external = yes_no(state.has_external_data)
    if sizes["external_data_path"] is not None:
        external += f" ({sizes['external_data_path']})"
    print(f"nominal: {yes_no(state.is_nominal)}, external data: {external}", file=out)

    params = parameters_in_order(state)
    n_train = sum(1 for p in params if p.trainable)
    total = sum(p.nbytes for p in params)
    print(
        f"\nparameters: {len(params)} ({n_train} trainable, {len(params) - n_train} frozen), "
        f"{human_size(total)}",
        file=out,
    )
    if params:
        rows = [
            (
                shorten(p.name),
                "trainable" if p.trainable else "frozen",
                _dtypes.type_name(p.data_type),
                "nominal" if p.is_nominal else str(list(p.shape)),
                human_size(p.nbytes),
            )
            for p in params
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        for row, param in zip(rows, params):
            cells = [cell.ljust(width) for cell, width in zip(row, widths)]
            print(f"  {'  '.join(cells)}  {row[4]}", file=out)
            head = head_values(param, values)
            if head is not None:
                print(f"    values: {text_values(head, param.size)}", file=out)
        if any(shorten(p.name) != p.name for p in params):
            print("  (long names shortened with …; --json prints them whole)", file=out)

    if state.optimizer is None:
        print("\noptimizer: none", file=out)
    else:
        print(f"\noptimizer: {len(state.optimizer)} group(s)", file=out)
        for name, group in state.optimizer.items():
            print(
                f"  {name}: step {group.step}, initial_learning_rate {f32(group.initial_learning_rate)}",
                file=out,
            )
            for param_name in natural_sorted(group.states):
                momentums = group.states[param_name]
                desc = ", ".join(
                    f"{m} {_dtypes.type_name(t.data_type)} {list(t.shape)}"
                    for m, t in momentum_tensors(momentums)
                )
                print(f"    {param_name}: {desc or '(no momentums)'}", file=out)

    print(f"\nproperties: {len(state.properties)}", file=out)
    for key in natural_sorted(state.properties):
        value = state.properties[key]
        shown = f32(value) if isinstance(value, float) else repr(value)
        print(f"  {key} = {shown}  ({type(value).__name__})", file=out)


def _is_adapter(path: str) -> bool:
    """An ORT adapter file: by its name, or by its content (the core's file-kind rules) when it
    is a regular file."""
    if path.endswith(".onnx_adapter"):
        return True
    return os.path.isfile(path) and _native.file_kind(path) == "adapter"


def run_inspect(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    if _is_adapter(path):  # ORT adapter files: cli/_deploy.py
        from ._deploy import run_inspect_adapter

        return run_inspect_adapter(args, out)
    state = load(path)
    if args.json:
        emit(args, out, to_json(state, path, args.values), [])
    else:
        print_text(state, path, args.values, out)
    return 0
