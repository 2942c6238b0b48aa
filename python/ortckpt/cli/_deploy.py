"""``ortckpt export-adapter`` and ``ortckpt inspect`` of ORT adapter files (``.onnx_adapter``), and
``ortckpt export-inference`` (an inference model from an eval model and a trained checkpoint)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..deploy.adapters import ADAPTER_VERSION_PROPERTY, MODEL_VERSION_PROPERTY, from_adapter, to_adapter
from ..formats._onnx_import import require_onnx
from ._format import JsonValue, file_size, human_size
from ._listing import head_values, json_values, parameters_in_order, text_values
from ._onnx import _model_error, _onnx_errors
from ._output import emit, verb, written

#: The file name ending ``inspect`` reads as an ORT adapter rather than a checkpoint.
ADAPTER_SUFFIX = ".onnx_adapter"


def run_export_adapter(args: argparse.Namespace, out: TextIO) -> int:
    from ..deploy.adapters import _serialize

    src, dest = os.fsdecode(args.path), os.fsdecode(args.out)
    if args.dry_run:
        names = _serialize(src, args.parameters, args.adapter_version, args.model_version)[1]
    else:
        names = to_adapter(
            src,
            dest,
            parameters=args.parameters,
            adapter_version=args.adapter_version,
            model_version=args.model_version,
        )
    report: dict[str, JsonValue] = {"input": src, "output": dest, "parameters": list(names)}
    report.update(written(args, [dest]))
    emit(args, out, report, [f"{verb(args)} {dest}: ORT adapter of {len(names)} parameters"])
    return 0


def run_inspect_adapter(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    state = from_adapter(path)
    params = parameters_in_order(state)
    versions = {k: state.properties[k] for k in (ADAPTER_VERSION_PROPERTY, MODEL_VERSION_PROPERTY)}
    entries: list[JsonValue] = []
    lines = [
        f"{path}: ORT adapter, adapter_version {versions[ADAPTER_VERSION_PROPERTY]}, "
        f"model_version {versions[MODEL_VERSION_PROPERTY]}, {human_size(file_size(path))}",
        f"\nparameters: {len(params)}, {human_size(sum(p.nbytes for p in params))}",
    ]
    for p in params:
        entry: dict[str, JsonValue] = {
            "name": p.name,
            "dtype": str(p.dtype),
            "data_type": p.data_type,
            "shape": list(p.shape),
            "nbytes": p.nbytes,
        }
        lines.append(f"  {p.name}  {p.dtype}  {list(p.shape)}  {human_size(p.nbytes)}")
        head = head_values(p, args.values)
        if head is not None:
            entry["values"] = json_values(head)
            lines.append(f"    values: {text_values(head, p.size)}")
        entries.append(entry)
    report: dict[str, JsonValue] = {"path": path, "file_size": file_size(path), "format": "onnx_adapter"}
    report.update(versions)
    report["parameters"] = entries
    emit(args, out, report, lines)
    return 0


def run_export_inference(args: argparse.Namespace, out: TextIO) -> int:
    require_onnx("'ortckpt export-inference'")
    from ..deploy._export import plan_export
    from ..formats._onnx_write import data_path, plan_external, write_model

    model, ckpt, dest = (os.fsdecode(p) for p in (args.eval_model, args.ckpt, args.out))
    try:
        plan = plan_export(model, ckpt, args.outputs, args.user_inputs)
        if args.dry_run:
            external = plan_external(plan.model, plan.initializers)
        else:
            external = write_model(plan.model, plan.initializers, dest)
    except _onnx_errors() as exc:
        raise _model_error(model, exc) from None
    graph = plan.model.graph
    paths = [dest, data_path(dest)] if external else [dest]
    report: dict[str, JsonValue] = {
        "eval_model": model,
        "checkpoint": ckpt,
        "out": dest,
        **written(args, paths),
        "inputs": [v.name for v in graph.input],
        "outputs": [v.name for v in graph.output],
        "nodes": len(graph.node),
        "initializers": len(plan.initializers),
        "parameters": list(plan.parameters),
        "external_data": external,
    }
    where = f", tensor data in {paths[1]}" if external else ""
    lines = [
        f"{verb(args)} {dest}: {len(graph.node)} nodes, {len(plan.parameters)} parameters of {ckpt} "
        f"as initializers{where}",
        f"  inputs:  {', '.join(v.name for v in graph.input) or '(none)'}",
        f"  outputs: {', '.join(v.name for v in graph.output)}",
    ]
    emit(args, out, report, lines)
    return 0
