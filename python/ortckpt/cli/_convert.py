"""``ortckpt convert`` and ``ortckpt strip-values``: other formats, other ORT releases, and nominal
checkpoints."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, TextIO

from ._errors import UsageError
from ._format import JsonValue
from ._output import emit, verb, written

if TYPE_CHECKING:
    from ..state import CheckpointState

# (the conversion modules are imported by the commands, so the other commands start faster)

#: Output names that promise another kind of file than the ORT checkpoint convert would write
#: there (any name but .safetensors/.npz is a checkpoint): refused, with what makes that file.
_MISLEADING = {
    ".pt": "a PyTorch file: use ortckpt.to_torch(...) in Python, or write .safetensors",
    ".pth": "a PyTorch file: use ortckpt.to_torch(...) in Python, or write .safetensors",
    ".onnx": "an ONNX model: use 'ortckpt to-onnx CKPT MODEL OUT'",
}


def _check_output_name(dest: str) -> None:
    ext = os.path.splitext(dest)[1].lower()
    if ext in _MISLEADING:
        raise UsageError(
            f"{dest}: convert writes an ORT checkpoint for any name but .safetensors or .npz, and a "
            f"{ext} name promises {_MISLEADING[ext]}; to write an ORT checkpoint, name it .ckpt"
        )


def _check_version_1(src: str, state: CheckpointState) -> None:
    """Format version 1 cannot hold external data, and the command line keeps a source's external
    data external: say so, and what to do, before anything is written."""
    if state.has_external_data:
        raise UsageError(
            f"{src} keeps its tensor data in an external file, which format version 1 (ORT 1.16-1.17) "
            "cannot hold; convert with --format-version 2 (ORT 1.18 and later) to keep the data "
            "external, or, if the data fit in 2 GiB, write them inline from Python: "
            "ortckpt.save(ortckpt.load(IN), OUT, format_version=1, "
            "external_data_threshold=ortckpt.DEFAULT_EXTERNAL_DATA_THRESHOLD)"
        )


def run_convert(args: argparse.Namespace, out: TextIO) -> int:
    from ..formats.conversions import convert, format_of, load_source

    src, dest = os.fsdecode(args.input), os.fsdecode(args.output)
    _check_output_name(dest)
    if format_of(dest) == "ckpt" and args.format_version == 1:
        _check_version_1(src, load_source(src, trainable=args.trainable))
    if args.dry_run:
        # read and check the input (and the requested flags) exactly as a conversion would
        state = load_source(src, trainable=args.trainable)
    else:
        state = convert(
            src,
            dest,
            include_optimizer_state=args.include_optimizer_state,
            trainable=args.trainable,
            format_version=args.format_version,
            progress=True,  # a bar on a terminal only
        )
    params = len(state.parameters)
    target = format_of(dest)
    report: dict[str, JsonValue] = {
        "input": src,
        "input_format": format_of(src),
        "output": dest,
        "output_format": target,
        "parameters": params,
        # what was (or would be) written: the source's optimizer state unless --drop-optimizer
        "include_optimizer_state": state.optimizer is not None and args.include_optimizer_state is not False,
        "format_version": args.format_version if target == "ckpt" else None,
    }
    report.update(written(args, [dest]))
    version = f", format version {args.format_version}" if target == "ckpt" else ""
    line = (
        f"{verb(args)} {dest} ({target}{version}): {params} parameter{'' if params == 1 else 's'} "
        f"from {src} ({format_of(src)})"
    )
    emit(args, out, report, [line])
    return 0


def run_strip_values(args: argparse.Namespace, out: TextIO) -> int:
    from .._sources import local_output
    from ..formats.conversions import to_nominal
    from ..io import save

    src, dest = os.fsdecode(args.path), os.fsdecode(args.out)
    nominal = to_nominal(src, keep_properties=not args.drop_properties)
    if not args.dry_run:
        with local_output(dest) as path:
            save(nominal, path)
    params = len(nominal.parameters)
    report: dict[str, JsonValue] = {"input": src, "output": dest, "parameters": params}
    report.update(written(args, [dest]))
    emit(args, out, report, [f"{verb(args)} {dest}: nominal checkpoint of {params} parameters (no values)"])
    return 0
