"""``ortckpt set-property`` and ``ortckpt strip-optimizer``: in-place edits of a checkpoint."""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, TextIO

from ..io import load, save
from ._errors import UsageError
from ._format import JsonValue, f32, file_size, human_size, json_float
from ._output import emit, verb, written

if TYPE_CHECKING:
    from .._scalars import PropertyValue


_INT = re.compile(r"[+-]?[0-9]+\Z")
# "0042", "-007", "00.5": a number would lose the zeros, so the type must be said (--type).
_LEADING_ZEROS = re.compile(r"[+-]?0[0-9]")


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
    if kind is None and _LEADING_ZEROS.match(text) and _parse_float(text) is not None:
        raise UsageError(
            f"{text!r} has leading zeros, which a number would drop: "
            "use --type str to keep the text or --type int (or float) to store the number"
        )
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
    return f"{f32(value) if isinstance(value, float) else repr(value)} ({type(value).__name__})"


def _json_value(value: PropertyValue) -> dict[str, JsonValue]:
    shown = json_float(value) if isinstance(value, float) else value
    return {"value": shown, "type": type(value).__name__}


def run_set_property(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    updates: dict[str, PropertyValue] = {}
    for item in args.assignments:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"expected NAME=VALUE, got {item!r}")
        try:
            updates[name] = parse_property(text, args.type)
        except UsageError as exc:
            raise UsageError(f"{item}: {exc}") from None
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
    if not args.dry_run:
        save(state, path)  # atomic; keeps the file's permissions; writes through symlinks
    would = "would be " if args.dry_run else ""
    lines = [f"{path}: {would}deleted {name}" for name in deletes]
    lines += [
        f"{path}: {name} {'would be' if args.dry_run else '='} {_shown(props[name])}" for name in updates
    ]
    report: dict[str, JsonValue] = {
        "path": path,
        **written(args, [path]),
        "set": {name: _json_value(props[name]) for name in updates},
        "deleted": deletes,
    }
    emit(args, out, report, lines)
    return 0


def _same_file(a: str, b: str) -> bool:
    try:
        return bool(os.path.samefile(a, b))
    except OSError:
        return False


def run_strip_optimizer(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    dest = path if args.out is None else os.fsdecode(args.out)
    state = load(path)
    groups = 0 if state.optimizer is None else len(state.optimizer)
    before = file_size(path)
    report: dict[str, JsonValue] = {
        "path": path,
        "out": dest,
        "removed_groups": groups,
        "size_before": before,
    }
    if groups == 0 and (dest == path or _same_file(path, dest)):
        report.update(written(args, []))
        emit(args, out, report, [f"{path}: no optimizer state; unchanged"])
        return 0
    if not args.dry_run:
        save(state, dest, include_optimizer_state=False)
    report.update(written(args, [dest]))
    if groups:
        action = "would remove" if args.dry_run else "removed"
        done = f"{action} {groups} optimizer group{'' if groups == 1 else 's'}"
    else:
        done = "no optimizer state to remove"
    sizes = "" if args.dry_run else f" ({human_size(before)} -> {human_size(file_size(dest))})"
    emit(args, out, report, [f"{verb(args)} {dest}: {done}{sizes}"])
    return 0
