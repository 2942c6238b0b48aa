"""``ortckpt to-buffer`` and ``ortckpt from-buffer``: a checkpoint's parameters as the flat float32
buffer of ORT's ``Module.get_contiguous_parameters()``, and back (docs/federated.md)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..deploy._buffers import BUFFER_DTYPE, parameters_from_buffer, parameters_to_buffer, write_buffer_file
from ..io import load, save
from ._format import JsonValue
from ._output import emit, verb, written


def run_to_buffer(args: argparse.Namespace, out: TextIO) -> int:
    src, model, dest = os.fsdecode(args.ckpt), os.fsdecode(args.training_model), os.fsdecode(args.out)
    trainable_only = not args.all_parameters
    values = parameters_to_buffer(load(src), model, trainable_only=trainable_only)
    if not args.dry_run:
        write_buffer_file(values, dest)
    report: dict[str, JsonValue] = {
        "input": src,
        "training_model": model,
        "output": dest,
        "trainable_only": trainable_only,
        "values": int(values.size),
        "dtype": "float32",
    }
    report.update(written(args, [dest]))
    which = "trainable parameters" if trainable_only else "parameters"
    size = values.size * BUFFER_DTYPE.itemsize
    emit(args, out, report, [f"{verb(args)} {dest}: {values.size} float32 values ({which}), {size} bytes"])
    return 0


def run_from_buffer(args: argparse.Namespace, out: TextIO) -> int:
    buffer, ref = os.fsdecode(args.buffer), os.fsdecode(args.reference)
    model, dest = os.fsdecode(args.training_model), os.fsdecode(args.out)
    trainable_only = not args.all_parameters
    state = parameters_from_buffer(buffer, load(ref), model, trainable_only=trainable_only)
    if not args.dry_run:
        save(state, dest)
    report: dict[str, JsonValue] = {
        "input": buffer,
        "reference": ref,
        "training_model": model,
        "output": dest,
        "trainable_only": trainable_only,
    }
    report.update(written(args, [dest]))
    which = "trainable parameters" if trainable_only else "parameters"
    emit(args, out, report, [f"{verb(args)} {dest}: {ref} with the {which} of {buffer}"])
    return 0
