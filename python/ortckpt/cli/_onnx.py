"""``ortckpt from-onnx`` and ``ortckpt to-onnx``: checkpoints to and from ONNX model initializers."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from ..errors import ExternalDataError, TensorDataError
from ..formats._onnx_import import require_onnx
from ..io import external_data_path, load
from ._errors import ArgumentsError, UsageError
from ._format import JsonValue, file_size, human_size
from ._output import emit, verb, written

#: Largest ONNX model ``to-onnx`` writes as one file (protobuf's limit); larger ones get OUT.data.
ONNX_SIZE_LIMIT = 2**31 - 1

if TYPE_CHECKING:
    import onnx


def _need_onnx(command: str) -> None:
    require_onnx(f"'ortckpt {command}'")


def _onnx_errors() -> tuple[type[Exception], type[Exception]]:
    """The exceptions onnx raises for unreadable models: (protobuf's DecodeError, ValidationError)."""
    import onnx.checker
    from google.protobuf.message import DecodeError

    return DecodeError, onnx.checker.ValidationError


def _model_error(path: str, exc: Exception) -> UsageError:
    decode_error, _ = _onnx_errors()
    message = " ".join(str(exc).split())
    if isinstance(exc, decode_error):
        return UsageError(f"{path}: not an ONNX model ({message})")
    return UsageError(f"{path}: {message}")


def positionals(args: argparse.Namespace) -> tuple[str, str]:
    """MODEL and OUT of ``from-onnx``. ``--trainable`` takes every following word, so in
    ``from-onnx --trainable a b MODEL OUT`` (or ``MODEL --trainable a b OUT``) the missing
    positionals are the last words it took; at least one name must remain for it."""
    names: list[str] = list(args.trainable or [])
    missing = [key for key in ("model", "out") if getattr(args, key) is None]
    if missing and len(names) > len(missing):
        for key, value in zip(missing, names[-len(missing) :]):
            setattr(args, key, value)
        args.trainable = names[: -len(missing)]
    elif missing:
        raise ArgumentsError("the following arguments are required: " + " ".join(k.upper() for k in missing))
    return os.fsdecode(args.model), os.fsdecode(args.out)


def _from_onnx_report(path: str, args: argparse.Namespace) -> tuple[dict[str, JsonValue], str]:
    state = load(path)
    trainable = len(state.trainable_parameters)
    frozen = len(state.frozen_parameters)
    parts = [f"{trainable} trainable + {frozen} frozen parameters"]
    if state.is_nominal:
        parts.append("nominal")
    size = file_size(path)
    parts.append(human_size(size))
    paths = [path]
    if state.has_external_data:
        ext = external_data_path(path)
        paths.append(ext)
        parts.append(f"tensor data in {ext} ({human_size(file_size(ext))})")
    report: dict[str, JsonValue] = {
        "model": os.fsdecode(args.model),
        "out": path,
        **written(args, paths),
        "trainable": trainable,
        "frozen": frozen,
        "nominal": state.is_nominal,
        "external_data": state.has_external_data,
    }
    return report, ", ".join(parts)


def _from_onnx_dry_run(model: str, dest: str, args: argparse.Namespace) -> tuple[dict[str, JsonValue], str]:
    from ..formats.onnx_io import _load_model, split_initializers

    proto, _ = _load_model(model, "MODEL")  # opened by the core: a FIFO is refused, never waited on
    trainable, frozen = split_initializers(proto, args.trainable)
    report: dict[str, JsonValue] = {
        "model": model,
        "out": dest,
        **written(args, [dest]),
        "trainable": len(trainable),
        "frozen": len(frozen),
        "nominal": bool(args.nominal),
        "external_data": None,  # decided by the tensor sizes when written
    }
    nominal = ", nominal" if args.nominal else ""
    return report, f"{len(trainable)} trainable + {len(frozen)} frozen parameters{nominal}"


def run_from_onnx(args: argparse.Namespace, out: TextIO) -> int:
    _need_onnx("from-onnx")
    from ..formats.onnx_io import save_from_onnx

    model, dest = positionals(args)
    try:
        if args.dry_run:
            report, summary = _from_onnx_dry_run(model, dest, args)
        else:
            save_from_onnx(
                model,
                dest,
                trainable=args.trainable,
                nominal=args.nominal,
                external_data_threshold=args.external_data_threshold,
            )
            report, summary = _from_onnx_report(dest, args)
    except _onnx_errors() as exc:
        raise _model_error(model, exc) from None
    emit(args, out, report, [f"{verb(args)} {dest}: {summary}"])
    return 0


def _save_model(model: onnx.ModelProto, path: str) -> bool:
    """Write ``model`` to ``path`` atomically; models over 2 GiB keep their tensors of 1 KiB or
    more in ``<path>.data`` (ONNX external data, location relative to the model). Returns True when
    the data went there.

    The model is written by the export's writer (``_onnx_write.write_model``: the core's staged
    output, the data file renamed first and under the rule of a checkpoint's ``.data``), never by
    ``onnx.save_model``, which opens external data files through onnx's C++ code.
    """
    from ..formats._onnx_write import Initializer, write_model

    initializers = []
    for proto in model.graph.initializer:
        kept = type(proto)()
        kept.CopyFrom(proto)
        if proto.HasField("raw_data"):
            kept.ClearField("raw_data")
            initializers.append(Initializer.of(kept, proto.raw_data))
        else:
            initializers.append(Initializer(kept))
    model.graph.ClearField("initializer")
    return write_model(model, initializers, path, limit=ONNX_SIZE_LIMIT)


def run_to_onnx(args: argparse.Namespace, out: TextIO) -> int:
    _need_onnx("to-onnx")
    from ..formats._onnx_inline import inline_external_data
    from ..formats.onnx_io import load_into_model

    ckpt, model_path, dest = os.fsdecode(args.ckpt), os.fsdecode(args.model), os.fsdecode(args.out)
    state = load(ckpt)
    try:
        model = load_into_model(state, model_path)
        # Initializers the checkpoint did not replace may keep their data in files next to MODEL:
        # read them in, so that OUT does not depend on where MODEL was.
        inline_external_data(model, os.path.dirname(os.path.abspath(model_path)))
    except (*_onnx_errors(), ExternalDataError, TensorDataError) as exc:
        raise _model_error(model_path, exc) from None
    params = state.parameters
    inits = list(model.graph.initializer)
    replaced = sum(1 for init in inits if init.name in params)
    if args.dry_run:
        external = model.ByteSize() > ONNX_SIZE_LIMIT
    else:
        try:
            external = _save_model(model, dest)
        except _onnx_errors() as exc:
            raise _model_error(dest, exc) from None
    where = f", tensor data in {dest}.data" if external else ""
    report: dict[str, JsonValue] = {
        "checkpoint": ckpt,
        "model": model_path,
        "out": dest,
        **written(args, [dest, dest + ".data"] if external else [dest]),
        "replaced": replaced,
        "initializers": len(inits),
        "external_data": external,
    }
    emit(
        args,
        out,
        report,
        [f"{verb(args)} {dest}: {replaced} of {len(inits)} initializers from {ckpt}{where}"],
    )
    if replaced == 0 and len(params):
        print(
            f"ortckpt: warning: no initializer of {model_path} is a parameter of {ckpt}; "
            "the model was written unchanged",
            file=sys.stderr,
        )
    return 0
