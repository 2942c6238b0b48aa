"""The ``ortckpt`` command-line tool (``docs/cli.md``).

::

    ortckpt inspect PATH [--json] [--values N]
    ortckpt diff A B [--json] [--rtol R] [--atol A] [--quiet]
    ortckpt from-onnx MODEL OUT [--trainable NAME ...] [--nominal] [--external-data-threshold BYTES]
    ortckpt to-onnx CKPT MODEL OUT
    ortckpt set-property CKPT [NAME=VALUE ...] [--type int|float|str] [--delete NAME]
    ortckpt strip-optimizer CKPT [OUT]
    ortckpt --version

Exit status: 0 on success (``diff``: the checkpoints are identical), 1 when ``diff`` finds
differences, 2 on errors (one ``ortckpt: error: ...`` line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO, cast

import numpy as np

from . import _dtypes
from .errors import CheckpointError
from .io import DEFAULT_EXTERNAL_DATA_THRESHOLD, external_data_path, load, save
from .state import CheckpointState, Parameter

if TYPE_CHECKING:
    import onnx

    from ._scalars import PropertyValue
    from ._tensor import Tensor

JsonValue = Any


class UsageError(Exception):
    """A command-line mistake found after parsing (bad NAME=VALUE, unknown property...): exit 2."""


def _version() -> str:
    from . import __version__

    return __version__


_FORMATTER = argparse.RawDescriptionHelpFormatter


def _command(
    commands: Any, name: str, summary: str, description: str, examples: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + examples,
        formatter_class=_FORMATTER,
    )
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ortckpt",
        description="Inspect, compare, edit and convert ONNX Runtime on-device training checkpoints.",
        epilog=(
            "exit status: 0 success (diff: identical), 1 diff: different, 2 error\n"
            "'ortckpt COMMAND --help' shows the options and examples of a command."
        ),
        formatter_class=_FORMATTER,
    )
    parser.add_argument("--version", action="version", version=f"ortckpt {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    inspect = _command(
        commands,
        "inspect",
        "print the content of a checkpoint",
        "Print the parameters, optimizer groups and properties of a checkpoint.",
        "  ortckpt inspect model.ckpt\n"
        "  ortckpt inspect model.ckpt --values 5\n"
        "  ortckpt inspect model.ckpt --json | jq '.properties'\n",
    )
    inspect.add_argument("path", metavar="PATH", help="checkpoint file")
    inspect.add_argument("--json", action="store_true", help="print machine-readable JSON")
    inspect.add_argument(
        "--values", type=_non_negative, default=0, metavar="N", help="also print the first N values"
    )

    diff = _command(
        commands,
        "diff",
        "compare two checkpoints (exit 0 identical, 1 different, 2 error)",
        "Compare two checkpoints: parameters only in A or only in B; trainable flag, dtype and\n"
        "shape changes; values (count of differing elements and the largest absolute\n"
        "difference); optimizer groups (step, initial learning rate, momentums); properties.\n"
        "Values are compared bit for bit unless --rtol/--atol is given; NaN equals NaN.\n"
        "Both files are memory-mapped and compared one tensor at a time.\n"
        "Exit status: 0 identical (nothing is printed), 1 different, 2 error.",
        "  ortckpt diff before.ckpt after.ckpt\n"
        "  ortckpt diff a.ckpt b.ckpt --atol 1e-6 --rtol 1e-5\n"
        "  ortckpt diff a.ckpt b.ckpt --json | jq '.parameters.changed[].name'\n"
        "  ortckpt diff -q a.ckpt b.ckpt || echo different\n",
    )
    diff.add_argument("a", metavar="A", help="first checkpoint")
    diff.add_argument("b", metavar="B", help="second checkpoint")
    diff.add_argument("--json", action="store_true", help="print machine-readable JSON")
    diff.add_argument(
        "--rtol",
        type=_tolerance,
        metavar="R",
        help="relative tolerance: values a, b are equal when |a - b| <= atol + rtol * |b| (default 0)",
    )
    diff.add_argument("--atol", type=_tolerance, metavar="A", help="absolute tolerance (default 0)")
    diff.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing; stop at the first difference"
    )

    from_onnx = _command(
        commands,
        "from-onnx",
        "write a checkpoint from the initializers of an ONNX model",
        "Write a checkpoint from the initializers of an ONNX model's main graph (needs the\n"
        "'onnx' package), like ORT's generate_artifacts. Float initializers are trainable\n"
        "unless --trainable names the trainable ones; the others are frozen. External data of\n"
        "the model is memory-mapped, not read into memory.",
        "  ortckpt from-onnx model.onnx model.ckpt\n"
        "  ortckpt from-onnx model.onnx model.ckpt --trainable fc1.weight fc1.bias\n"
        "  ortckpt from-onnx model.onnx nominal.ckpt --nominal\n",
    )
    from_onnx.add_argument("model", metavar="MODEL", help="ONNX model file")
    from_onnx.add_argument("out", metavar="OUT", help="checkpoint to write")
    from_onnx.add_argument(
        "--trainable",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="initializers to make trainable (repeatable; default: every float initializer)",
    )
    from_onnx.add_argument(
        "--nominal", action="store_true", help="write names and data types only (a nominal checkpoint)"
    )
    from_onnx.add_argument(
        "--external-data-threshold",
        type=_non_negative,
        default=DEFAULT_EXTERNAL_DATA_THRESHOLD,
        metavar="BYTES",
        help="move tensor data to OUT.data when it exceeds BYTES in total (default: 1800 MiB, as ORT)",
    )

    to_onnx = _command(
        commands,
        "to-onnx",
        "write an ONNX model with the values of a checkpoint",
        "Write a copy of MODEL whose initializers take the values of the checkpoint's parameters\n"
        "of the same name (like ORT's LoadCheckpointToModel; needs the 'onnx' package).\n"
        "Initializers the checkpoint lacks are kept. A model of 2 GiB or more is saved with its\n"
        "tensor data in OUT.data next to OUT.",
        "  ortckpt to-onnx trained.ckpt model.onnx trained.onnx\n",
    )
    to_onnx.add_argument("ckpt", metavar="CKPT", help="checkpoint file")
    to_onnx.add_argument("model", metavar="MODEL", help="ONNX model file")
    to_onnx.add_argument("out", metavar="OUT", help="ONNX model to write")

    set_property = _command(
        commands,
        "set-property",
        "set or delete properties of a checkpoint, in place",
        "Set (NAME=VALUE) or delete (--delete NAME) properties, rewriting the checkpoint in\n"
        "place atomically; parameters and optimizer state are kept bit for bit. A VALUE is\n"
        "an int if it reads as one, else a float (stored as float32) if it reads as one,\n"
        "else a str; --type forces the type of every VALUE.",
        "  ortckpt set-property model.ckpt epoch=4 best_loss=0.125 note='fine-tuned on v2'\n"
        "  ortckpt set-property model.ckpt run_id=0042 --type str\n"
        "  ortckpt set-property model.ckpt --delete note\n",
    )
    set_property.add_argument("path", metavar="CKPT", help="checkpoint file (rewritten in place)")
    set_property.add_argument(
        "assignments",
        nargs="*",
        metavar="NAME=VALUE",
        help="property to set (its value split at the first '=')",
    )
    set_property.add_argument(
        "--type", choices=("int", "float", "str"), help="type of every VALUE (default: detected)"
    )
    set_property.add_argument(
        "--delete", action="append", default=[], metavar="NAME", help="property to delete (repeatable)"
    )

    strip = _command(
        commands,
        "strip-optimizer",
        "remove the optimizer state of a checkpoint",
        "Save the checkpoint without its optimizer state (as ORT's save_checkpoint with\n"
        "include_optimizer_state=False): parameters and properties are kept bit for bit. Writes\n"
        "OUT, or rewrites CKPT in place atomically when OUT is omitted.",
        "  ortckpt strip-optimizer trained.ckpt deploy.ckpt\n  ortckpt strip-optimizer trained.ckpt\n",
    )
    strip.add_argument("path", metavar="CKPT", help="checkpoint file")
    strip.add_argument("out", metavar="OUT", nargs="?", help="checkpoint to write (default: CKPT, in place)")
    return parser


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0: {text}")
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


# -- diff -------------------------------------------------------------------------------------

#: Elements compared at a time: bounds the temporaries of a value comparison, whatever the tensor size.
_CHUNK = 1 << 16

_FLOAT_TYPES = frozenset(
    {
        _dtypes.FLOAT,
        _dtypes.DOUBLE,
        _dtypes.FLOAT16,
        _dtypes.BFLOAT16,
        _dtypes.FLOAT8E4M3FN,
        _dtypes.FLOAT8E4M3FNUZ,
        _dtypes.FLOAT8E5M2,
        _dtypes.FLOAT8E5M2FNUZ,
    }
)
_COMPLEX_TYPES = frozenset({_dtypes.COMPLEX64, _dtypes.COMPLEX128})
_BITS: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}

Mask = np.ndarray[Any, np.dtype[np.bool_]]


class Tolerance(NamedTuple):
    """How values are compared: bit for bit (``exact``), else ``|a - b| <= atol + rtol * |b|``.
    NaN equals NaN either way."""

    rtol: float = 0.0
    atol: float = 0.0
    exact: bool = True


EXACT = Tolerance()


class _Stop(Exception):
    """Raised at the first difference when only the exit status is wanted."""


class _Counter:
    def __init__(self, stop_at_first: bool) -> None:
        self.count = 0
        self._stop = stop_at_first

    def hit(self) -> None:
        self.count += 1
        if self._stop:
            raise _Stop


def _flat_values(tensor: Tensor, name: str) -> np.ndarray[Any, Any]:
    """The values as a flat array, not cached in the state: numeric tensors are zero-copy views of
    the mapped file (possibly unaligned; they are read chunk by chunk)."""
    if tensor.data_type == _dtypes.STRING:
        return tensor.array(name).reshape(-1)
    if tensor.nbytes == 0:
        return np.empty(0, dtype=tensor.dtype)
    return np.frombuffer(cast("bytes", tensor.spec_data(name)), dtype=tensor.dtype)


def _finite_max(diff: np.ndarray[Any, Any]) -> float | None:
    """The largest |a - b| that is a number (pairs where one side only is NaN have none)."""
    diff = diff[~np.isnan(diff)]
    return float(diff.max()) if diff.size else None


def _float_chunk(
    ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance
) -> tuple[Mask, float | None]:
    a64 = ca.astype(np.float64)
    b64 = cb.astype(np.float64)
    if tol.exact:
        bits = _BITS[ca.dtype.itemsize]
        mask: Mask = (ca.view(bits) != cb.view(bits)) & ~(np.isnan(a64) & np.isnan(b64))
    else:
        mask = ~np.isclose(a64, b64, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if not mask.any():
        return mask, None
    return mask, _finite_max(np.abs(a64[mask] - b64[mask]))


def _complex_chunk(
    ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance
) -> tuple[Mask, float | None]:
    a128 = ca.astype(np.complex128)
    b128 = cb.astype(np.complex128)
    if tol.exact:
        bits = _BITS[ca.dtype.itemsize // 2]
        differ = (ca.view(bits).reshape(-1, 2) != cb.view(bits).reshape(-1, 2)).any(axis=1)
        mask: Mask = differ & ~(np.isnan(a128) & np.isnan(b128))
    else:
        mask = ~np.isclose(a128, b128, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if not mask.any():
        return mask, None
    return mask, _finite_max(np.abs(a128[mask] - b128[mask]))


def _int_chunk(ca: np.ndarray[Any, Any], cb: np.ndarray[Any, Any], tol: Tolerance) -> tuple[Mask, int | None]:
    bits = _BITS[ca.dtype.itemsize]
    ua = ca.view(bits)
    ub = cb.view(bits)
    # |a - b| exactly, as an unsigned number of the same width (which always holds it): the
    # wrapping difference of the bit patterns, taken the right way round
    greater = (ca >= cb) if ca.dtype.kind == "i" else (ua >= ub)
    diff = np.where(greater, ua - ub, ub - ua)
    if tol.exact:
        mask: Mask = ua != ub
    else:
        mask = diff.astype(np.float64) > tol.atol + tol.rtol * np.abs(cb.astype(np.float64))
    if not mask.any():
        return mask, None
    return mask, int(diff[mask].max())


def compare_values(a: Tensor, b: Tensor, name: str, tol: Tolerance) -> dict[str, JsonValue] | None:
    """None when the values of two tensors of one data type and shape are equal, else
    ``{"differing": count, "total": count, "max_abs_diff": number | None}``.

    The tensors are read ``_CHUNK`` elements at a time, so memory use stays bounded whatever their size.
    """
    fa = _flat_values(a, name)
    fb = _flat_values(b, name)
    code = a.data_type
    total = int(fa.size)
    differing = 0
    worst: float | int | None = None
    with np.errstate(all="ignore"):
        for start in range(0, total, _CHUNK):
            ca = fa[start : start + _CHUNK]
            cb = fb[start : start + _CHUNK]
            chunk_max: float | int | None
            if code == _dtypes.STRING:
                mask: Mask = np.asarray(ca != cb, dtype=bool)
                chunk_max = None
            elif code in _FLOAT_TYPES:
                mask, chunk_max = _float_chunk(ca, cb, tol)
            elif code in _COMPLEX_TYPES:
                mask, chunk_max = _complex_chunk(ca, cb, tol)
            else:  # integers and bool
                mask, chunk_max = _int_chunk(ca, cb, tol)
            differing += int(np.count_nonzero(mask))
            if chunk_max is not None and (worst is None or chunk_max > worst):
                worst = chunk_max
    if differing == 0:
        return None
    if worst is None and code != _dtypes.STRING:
        worst = math.nan  # every differing pair has a NaN on one side only
    shown = _json_float(worst) if isinstance(worst, float) else worst
    return {"differing": differing, "total": total, "max_abs_diff": shown}


def _pair(a: JsonValue, b: JsonValue) -> dict[str, JsonValue]:
    return {"a": a, "b": b}


def _shape(tensor: Tensor) -> list[int] | None:
    return None if tensor.is_nominal else list(tensor.shape)


def _tensor_changes(
    ta: Tensor, tb: Tensor, name: str, tol: Tolerance, counter: _Counter, entry: dict[str, JsonValue]
) -> None:
    """Add the nominal/dtype/shape/values differences of two tensors to ``entry``."""
    if ta.is_nominal != tb.is_nominal:
        entry["nominal"] = _pair(ta.is_nominal, tb.is_nominal)
        counter.hit()
    if ta.data_type != tb.data_type:
        entry["dtype"] = _pair(_dtypes.type_name(ta.data_type), _dtypes.type_name(tb.data_type))
        counter.hit()
    if ta.is_nominal or tb.is_nominal:
        return
    if ta.shape != tb.shape:
        entry["shape"] = _pair(list(ta.shape), list(tb.shape))
        counter.hit()
    if "dtype" in entry or "shape" in entry:
        return
    values = compare_values(ta, tb, name, tol)
    if values is not None:
        entry["values"] = values
        counter.hit()


def _param_entry(param: Parameter) -> dict[str, JsonValue]:
    tensor = param._tensor
    return {
        "name": param.name,
        "trainable": param.trainable,
        "dtype": _dtypes.type_name(tensor.data_type),
        "shape": _shape(tensor),
    }


def _diff_parameters(
    a: CheckpointState, b: CheckpointState, tol: Tolerance, counter: _Counter
) -> dict[str, JsonValue]:
    pa, pb = a.parameters, b.parameters
    only_a: list[JsonValue] = []
    only_b: list[JsonValue] = []
    changed: list[JsonValue] = []
    for name in sorted(set(pa) | set(pb)):
        if name not in pb:
            only_a.append(_param_entry(pa[name]))
            counter.hit()
        elif name not in pa:
            only_b.append(_param_entry(pb[name]))
            counter.hit()
        else:
            x, y = pa[name], pb[name]
            entry: dict[str, JsonValue] = {"name": name}
            if x.trainable != y.trainable:
                entry["trainable"] = _pair(x.trainable, y.trainable)
                counter.hit()
            _tensor_changes(x._tensor, y._tensor, name, tol, counter, entry)
            if len(entry) > 1:
                changed.append(entry)
    return {"only_in_a": only_a, "only_in_b": only_b, "changed": changed}


def _same_float(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


def _diff_optimizer(
    a: CheckpointState, b: CheckpointState, tol: Tolerance, counter: _Counter
) -> dict[str, JsonValue]:
    ga = a.optimizer if a.optimizer is not None else {}
    gb = b.optimizer if b.optimizer is not None else {}
    only_a: list[JsonValue] = []
    only_b: list[JsonValue] = []
    changed: list[JsonValue] = []
    for group_name in sorted(set(ga) | set(gb)):
        if group_name not in gb:
            only_a.append(group_name)
            counter.hit()
            continue
        if group_name not in ga:
            only_b.append(group_name)
            counter.hit()
            continue
        x, y = ga[group_name], gb[group_name]
        entry: dict[str, JsonValue] = {"name": group_name}
        if x.step != y.step:
            entry["step"] = _pair(x.step, y.step)
            counter.hit()
        if not _same_float(x.initial_learning_rate, y.initial_learning_rate):
            entry["initial_learning_rate"] = _pair(
                _json_float(x.initial_learning_rate), _json_float(y.initial_learning_rate)
            )
            counter.hit()
        states_a: list[JsonValue] = []
        states_b: list[JsonValue] = []
        mom_a: list[JsonValue] = []
        mom_b: list[JsonValue] = []
        mom_changed: list[JsonValue] = []
        for param in sorted(set(x.states) | set(y.states)):
            if param not in y.states:
                states_a.append(param)
                counter.hit()
                continue
            if param not in x.states:
                states_b.append(param)
                counter.hit()
                continue
            ma, mb = x.states[param], y.states[param]
            for momentum in sorted(set(ma) | set(mb)):
                if momentum not in mb or momentum not in ma:
                    tensor = (ma if momentum in ma else mb)._tensor(momentum)
                    item = {
                        "parameter": param,
                        "momentum": momentum,
                        "dtype": _dtypes.type_name(tensor.data_type),
                        "shape": _shape(tensor),
                    }
                    (mom_a if momentum in ma else mom_b).append(item)
                    counter.hit()
                    continue
                change: dict[str, JsonValue] = {"parameter": param, "momentum": momentum}
                label = f"{group_name}/{param}/{momentum}"
                _tensor_changes(ma._tensor(momentum), mb._tensor(momentum), label, tol, counter, change)
                if len(change) > 2:
                    mom_changed.append(change)
        if states_a or states_b:
            entry["states"] = {"only_in_a": states_a, "only_in_b": states_b}
        if mom_a or mom_b or mom_changed:
            entry["momentums"] = {"only_in_a": mom_a, "only_in_b": mom_b, "changed": mom_changed}
        if len(entry) > 1:
            changed.append(entry)
    return {"only_in_a": only_a, "only_in_b": only_b, "changed": changed}


def _property_entry(name: str, value: PropertyValue) -> dict[str, JsonValue]:
    shown = _json_float(value) if isinstance(value, float) else value
    return {"name": name, "value": shown, "type": type(value).__name__}


def _same_property(x: PropertyValue, y: PropertyValue) -> bool:
    if type(x) is not type(y):
        return False
    if isinstance(x, float) and isinstance(y, float):
        return _same_float(x, y)
    return x == y


def _diff_properties(a: CheckpointState, b: CheckpointState, counter: _Counter) -> dict[str, JsonValue]:
    pa, pb = a.properties, b.properties
    removed: list[JsonValue] = []
    added: list[JsonValue] = []
    changed: list[JsonValue] = []
    for name in sorted(set(pa) | set(pb)):
        if name not in pb:
            removed.append(_property_entry(name, pa[name]))
            counter.hit()
        elif name not in pa:
            added.append(_property_entry(name, pb[name]))
            counter.hit()
        elif not _same_property(pa[name], pb[name]):
            x, y = _property_entry(name, pa[name]), _property_entry(name, pb[name])
            del x["name"], y["name"]
            changed.append({"name": name, "a": x, "b": y})
            counter.hit()
    return {"removed": removed, "added": added, "changed": changed}


def _side(state: CheckpointState, path: str) -> dict[str, JsonValue]:
    return {
        "path": path,
        "version": state.version,
        "is_nominal": state.is_nominal,
        "has_external_data": state.has_external_data,
    }


def diff_states(
    a: CheckpointState,
    b: CheckpointState,
    *,
    tolerance: Tolerance = EXACT,
    paths: tuple[str, str] = ("A", "B"),
    stop_at_first: bool = False,
) -> dict[str, JsonValue]:
    """The differences between two states, as ``ortckpt diff --json`` prints them.

    With ``stop_at_first`` the comparison stops at the first difference (``differences`` is then 1).
    """
    counter = _Counter(stop_at_first)
    report: dict[str, JsonValue] = {
        "a": _side(a, paths[0]),
        "b": _side(b, paths[1]),
        "identical": True,
        "differences": 0,
        "exact": tolerance.exact,
        "rtol": tolerance.rtol,
        "atol": tolerance.atol,
        "nominal": None,
    }
    try:
        if a.is_nominal != b.is_nominal:
            report["nominal"] = _pair(a.is_nominal, b.is_nominal)
            counter.hit()
        report["parameters"] = _diff_parameters(a, b, tolerance, counter)
        report["optimizer"] = _diff_optimizer(a, b, tolerance, counter)
        report["properties"] = _diff_properties(a, b, counter)
    except _Stop:
        pass
    report["differences"] = counter.count
    report["identical"] = counter.count == 0
    return report


def _dims(shape: list[int] | None) -> str:
    return "nominal" if shape is None else str(shape)


def _number(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _values_text(values: dict[str, JsonValue]) -> str:
    text = f"{values['differing']} of {values['total']} values differ"
    if values["max_abs_diff"] is not None:
        text += f", max abs diff {_number(values['max_abs_diff'])}"
    return text


def _tensor_lines(label: str, entry: dict[str, JsonValue]) -> list[str]:
    lines = []
    if "trainable" in entry:
        kinds = ["trainable" if entry["trainable"][side] else "frozen" for side in ("a", "b")]
        lines.append(f"  ~ {label}: {kinds[0]} -> {kinds[1]}")
    if "nominal" in entry:
        lines.append(f"  ~ {label}: nominal {_yes(entry['nominal']['a'])} -> {_yes(entry['nominal']['b'])}")
    for key in ("dtype", "shape"):
        if key in entry:
            lines.append(f"  ~ {label}: {key} {entry[key]['a']} -> {entry[key]['b']}")
    if "values" in entry:
        lines.append(f"  ~ {label}: {_values_text(entry['values'])}")
    return lines


def _property_text(entry: dict[str, JsonValue]) -> str:
    value = entry["value"]
    if entry["type"] == "float":
        shown = _f32(float(value))
    else:
        shown = repr(value)
    return f"{shown} ({entry['type']})"


def print_diff(report: dict[str, JsonValue], out: TextIO) -> None:
    """The text form of ``diff_states``: nothing when identical."""
    if report["identical"]:
        return
    lines = [f"--- {report['a']['path']}", f"+++ {report['b']['path']}"]
    if report["nominal"] is not None:
        nominal = report["nominal"]
        lines.append(f"nominal checkpoint: {_yes(nominal['a'])} -> {_yes(nominal['b'])}")

    params = report.get("parameters")
    if params and (params["only_in_a"] or params["only_in_b"] or params["changed"]):
        lines.append("parameters:")
        for sign, key in (("-", "only_in_a"), ("+", "only_in_b")):
            for p in params[key]:
                kind = "trainable" if p["trainable"] else "frozen"
                side = "A" if sign == "-" else "B"
                lines.append(
                    f"  {sign} {p['name']}: {kind} {p['dtype']} {_dims(p['shape'])} (only in {side})"
                )
        for entry in params["changed"]:
            lines.extend(_tensor_lines(entry["name"], entry))

    optimizer = report.get("optimizer")
    if optimizer and (optimizer["only_in_a"] or optimizer["only_in_b"] or optimizer["changed"]):
        lines.append("optimizer:")
        lines.extend(f"  - group {name} (only in A)" for name in optimizer["only_in_a"])
        lines.extend(f"  + group {name} (only in B)" for name in optimizer["only_in_b"])
        for group in optimizer["changed"]:
            name = group["name"]
            if "step" in group:
                lines.append(f"  ~ {name}: step {group['step']['a']} -> {group['step']['b']}")
            if "initial_learning_rate" in group:
                lr = group["initial_learning_rate"]
                lines.append(
                    f"  ~ {name}: initial_learning_rate {_f32(float(lr['a']))} -> {_f32(float(lr['b']))}"
                )
            states = group.get("states", {})
            for sign, key, side in (("-", "only_in_a", "A"), ("+", "only_in_b", "B")):
                lines.extend(
                    f"  {sign} {name}/{p}: optimizer state only in {side}" for p in states.get(key, [])
                )
            momentums = group.get("momentums", {})
            for sign, key, side in (("-", "only_in_a", "A"), ("+", "only_in_b", "B")):
                for m in momentums.get(key, []):
                    lines.append(
                        f"  {sign} {name}/{m['parameter']}/{m['momentum']}: {m['dtype']} "
                        f"{_dims(m['shape'])} (only in {side})"
                    )
            for m in momentums.get("changed", []):
                lines.extend(_tensor_lines(f"{name}/{m['parameter']}/{m['momentum']}", m))

    props = report.get("properties")
    if props and (props["removed"] or props["added"] or props["changed"]):
        lines.append("properties:")
        lines.extend(f"  - {p['name']} = {_property_text(p)} (only in A)" for p in props["removed"])
        lines.extend(f"  + {p['name']} = {_property_text(p)} (only in B)" for p in props["added"])
        lines.extend(
            f"  ~ {p['name']}: {_property_text(p['a'])} -> {_property_text(p['b'])}" for p in props["changed"]
        )

    count = report["differences"]
    lines.append(f"{count} difference{'' if count == 1 else 's'}")
    for line in lines:
        print(line, file=out)


def _diff(args: argparse.Namespace, out: TextIO) -> int:
    path_a, path_b = os.fsdecode(args.a), os.fsdecode(args.b)
    exact = args.rtol is None and args.atol is None
    tolerance = Tolerance(rtol=args.rtol or 0.0, atol=args.atol or 0.0, exact=exact)
    a = load(path_a)
    b = load(path_b)
    report = diff_states(a, b, tolerance=tolerance, paths=(path_a, path_b), stop_at_first=args.quiet)
    if args.quiet:
        pass
    elif args.json:
        json.dump(report, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        print_diff(report, out)
    return 0 if report["identical"] else 1


# -- ONNX -------------------------------------------------------------------------------------

#: Largest ONNX model ``to-onnx`` writes as one file (protobuf's limit); larger ones get OUT.data.
_ONNX_SIZE_LIMIT = 2**31 - 1


def _need_onnx(command: str) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ImportError(
            f"'ortckpt {command}' needs the 'onnx' package: pip install onnx (or pip install 'ortckpt[onnx]')"
        ) from None


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


def _summary(path: str) -> str:
    state = load(path)
    trainable = len(state.trainable_parameters)
    frozen = len(state.frozen_parameters)
    parts = [f"{trainable} trainable + {frozen} frozen parameters"]
    if state.is_nominal:
        parts.append("nominal")
    size = _file_size(path)
    if size is not None:
        parts.append(f"{size} bytes")
    if state.has_external_data:
        ext = external_data_path(path)
        parts.append(f"tensor data in {ext} ({_file_size(ext)} bytes)")
    return ", ".join(parts)


def _from_onnx(args: argparse.Namespace, out: TextIO) -> int:
    _need_onnx("from-onnx")
    from .onnx_io import save_from_onnx

    model, dest = os.fsdecode(args.model), os.fsdecode(args.out)
    try:
        save_from_onnx(
            model,
            dest,
            trainable=args.trainable,
            nominal=args.nominal,
            external_data_threshold=args.external_data_threshold,
        )
    except _onnx_errors() as exc:
        raise _model_error(model, exc) from None
    print(f"wrote {dest}: {_summary(dest)}", file=out)
    return 0


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_model(model: onnx.ModelProto, path: str) -> bool:
    """Write ``model`` to ``path`` atomically; models of 2 GiB or more keep their tensor data in
    ``<path>.data`` (ONNX external data, location relative to the model). Returns True when the
    data went there.

    Both files are written into a temporary directory beside ``path``, synced, then renamed into
    place (the data file first), so an existing model is never left half-written and a stale
    ``<path>.data`` is replaced, not appended to.
    """
    import onnx

    target = os.path.abspath(path)
    parent, base = os.path.split(target)
    size: int = model.ByteSize()
    external = size > _ONNX_SIZE_LIMIT
    workdir = tempfile.mkdtemp(prefix=".ortckpt-", dir=parent)
    try:
        tmp = os.path.join(workdir, base)
        if external:
            onnx.save_model(
                model, tmp, save_as_external_data=True, all_tensors_to_one_file=True, location=base + ".data"
            )
        else:
            onnx.save_model(model, tmp)
        names = [base + ".data", base] if external else [base]
        names = [n for n in names if os.path.exists(os.path.join(workdir, n))]
        for name in names:
            _fsync(os.path.join(workdir, name))
        for name in names:
            os.replace(os.path.join(workdir, name), os.path.join(parent, name))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return external


def _to_onnx(args: argparse.Namespace, out: TextIO) -> int:
    _need_onnx("to-onnx")
    import onnx.external_data_helper

    from .onnx_io import load_into_model

    ckpt, model_path, dest = os.fsdecode(args.ckpt), os.fsdecode(args.model), os.fsdecode(args.out)
    state = load(ckpt)
    try:
        model = load_into_model(state, model_path)
        # Initializers the checkpoint did not replace may keep their data in files next to MODEL:
        # read them in, so that OUT does not depend on where MODEL was.
        onnx.external_data_helper.load_external_data_for_model(
            model, os.path.dirname(os.path.abspath(model_path))
        )
    except _onnx_errors() as exc:
        raise _model_error(model_path, exc) from None
    params = state.parameters
    inits = list(model.graph.initializer)
    replaced = sum(1 for init in inits if init.name in params)
    try:
        external = _save_model(model, dest)
    except _onnx_errors() as exc:
        raise _model_error(dest, exc) from None
    where = f", tensor data in {dest}.data" if external else ""
    print(f"wrote {dest}: {replaced} of {len(inits)} initializers from {ckpt}{where}", file=out)
    if replaced == 0 and len(params):
        print(
            f"ortckpt: warning: no initializer of {model_path} is a parameter of {ckpt}; "
            "the model was written unchanged",
            file=sys.stderr,
        )
    return 0


# -- properties and optimizer state ---------------------------------------------------------------

_INT = re.compile(r"[+-]?[0-9]+\Z")


def _parse_float(text: str) -> float | None:
    if "_" in text or text != text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_property(text: str, kind: str | None = None) -> PropertyValue:
    """The value of a ``NAME=VALUE`` argument: an int if it reads as one, else a float if it reads
    as one, else the text; ``kind`` ("int", "float", "str") forces the type."""
    if kind == "str":
        return text
    if kind in (None, "int") and _INT.match(text):
        return int(text)
    if kind == "int":
        raise UsageError(f"not an integer: {text!r}")
    number = _parse_float(text)
    if number is not None:
        return number
    if kind == "float":
        raise UsageError(f"not a number: {text!r}")
    return text


def _shown(value: PropertyValue) -> str:
    return f"{_f32(value) if isinstance(value, float) else repr(value)} ({type(value).__name__})"


def _set_property(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    updates: dict[str, PropertyValue] = {}
    for item in args.assignments:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"expected NAME=VALUE, got {item!r}")
        updates[name] = parse_property(text, args.type)
    deletes: list[str] = list(dict.fromkeys(args.delete))
    if not updates and not deletes:
        raise UsageError("nothing to do: give NAME=VALUE arguments or --delete NAME")
    both = sorted(set(updates) & set(deletes))
    if both:
        raise UsageError(f"property {both[0]!r} is both set and deleted")

    state = load(path)
    props = state.properties
    for name in deletes:
        if name not in props:
            known = ", ".join(repr(k) for k in props) or "none"
            raise UsageError(f"{path}: no property {name!r} to delete (properties: {known})")
        del props[name]
    for name, value in updates.items():
        try:
            props[name] = value
        except OverflowError as exc:
            hint = " (use --type float or --type str)" if isinstance(value, int) else " (use --type str)"
            raise UsageError(f"{exc}{hint}") from None
    save(state, path)  # atomic; keeps the file's permissions; writes through symlinks
    for name in deletes:
        print(f"{path}: deleted {name}", file=out)
    for name in updates:
        print(f"{path}: {name} = {_shown(props[name])}", file=out)
    return 0


def _same_file(a: str, b: str) -> bool:
    try:
        return bool(os.path.samefile(a, b))
    except OSError:
        return False


def _strip_optimizer(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    dest = path if args.out is None else os.fsdecode(args.out)
    state = load(path)
    groups = 0 if state.optimizer is None else len(state.optimizer)
    if groups == 0 and (dest == path or _same_file(path, dest)):
        print(f"{path}: no optimizer state; unchanged", file=out)
        return 0
    before = _file_size(path)
    if args.out is None:
        save(state, path, include_optimizer_state=False)
    else:
        save(state, dest, include_optimizer_state=False)
    if groups:
        done = f"removed {groups} optimizer group{'' if groups == 1 else 's'}"
    else:
        done = "no optimizer state to remove"
    print(f"wrote {dest}: {done} ({before} -> {_file_size(dest)} bytes)", file=out)
    return 0


# -- entry point ------------------------------------------------------------------------------

_COMMANDS = {
    "inspect": _inspect,
    "diff": _diff,
    "from-onnx": _from_onnx,
    "to-onnx": _to_onnx,
    "set-property": _set_property,
    "strip-optimizer": _strip_optimizer,
}


def _fail(message: str) -> int:
    print(f"ortckpt: error: {message}", file=sys.stderr)
    return 2


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            if args.command == "set-property" and not any(e.startswith("-") for e in extras):
                # NAME=VALUE arguments after an option (argparse stops collecting them there)
                args.assignments = [*args.assignments, *extras]
            else:
                parser.error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("ortckpt: error: a command is required (try 'ortckpt inspect PATH')", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        return _COMMANDS[args.command](args, out)
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): quietly stop
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1 if args.command == "inspect" else 2
    except KeyboardInterrupt:
        return 130
    except (CheckpointError, OSError, UsageError, ImportError) as exc:
        return _fail(_message(exc))
    except (ValueError, OverflowError) as exc:
        # invalid input the library refused (e.g. an unknown --trainable name)
        return _fail(_message(exc))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
