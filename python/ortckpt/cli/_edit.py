"""``ortckpt set-property`` and ``ortckpt strip-optimizer``: in-place edits of a checkpoint."""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING, TextIO

from ..io import load, save
from ._errors import UsageError
from ._format import f32, file_size

if TYPE_CHECKING:
    from .._scalars import PropertyValue


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
    return f"{f32(value) if isinstance(value, float) else repr(value)} ({type(value).__name__})"


def run_set_property(args: argparse.Namespace, out: TextIO) -> int:
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


def run_strip_optimizer(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    dest = path if args.out is None else os.fsdecode(args.out)
    state = load(path)
    groups = 0 if state.optimizer is None else len(state.optimizer)
    if groups == 0 and (dest == path or _same_file(path, dest)):
        print(f"{path}: no optimizer state; unchanged", file=out)
        return 0
    before = file_size(path)
    if args.out is None:
        save(state, path, include_optimizer_state=False)
    else:
        save(state, dest, include_optimizer_state=False)
    if groups:
        done = f"removed {groups} optimizer group{'' if groups == 1 else 's'}"
    else:
        done = "no optimizer state to remove"
    print(f"wrote {dest}: {done} ({before} -> {file_size(dest)} bytes)", file=out)
    return 0
