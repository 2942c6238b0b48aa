"""Formatting shared by the commands: JSON-safe floats, typed property values, float32 text, yes/no,
file sizes (exact and human-readable), natural sort of names, long names shortened for tables."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

#: A value of the ``--json`` reports (what ``json.dump`` accepts).
JsonValue = Any

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_DIGITS = re.compile(r"(\d+)")


def json_float(x: float) -> JsonValue:
    """``x``, or its text when JSON cannot hold it (inf, nan)."""
    return x if math.isfinite(x) else str(x)


#: How ``typed_value`` writes the floats JSON cannot hold (as JavaScript and JSON5 spell them; Python's
#: ``float()`` reads each back).
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def typed_value(value: int | float | str) -> dict[str, JsonValue]:
    """A property value with its type, ``{"type": "int" | "float" | "str", "value": ...}``: a float
    NaN (``{"type": "float", "value": "NaN"}``) stays distinct from the string ``"nan"``
    (``{"type": "str", "value": "nan"}``). Non-finite floats are ``"NaN"``, ``"Infinity"`` and
    ``"-Infinity"``, so the document stays standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"type": "float", "value": _NON_FINITE[str(value)]}
    return {"type": type(value).__name__, "value": value}


#: The widest a name is shown in a text table; longer names are shortened in the middle.
NAME_WIDTH = 60
_ELLIPSIS = "…"


def shorten(name: str, width: int = NAME_WIDTH) -> str:
    """``name``, or when longer than ``width`` its start and end around an ellipsis (the end often
    tells parameters apart: ``.weight``, ``.bias``), so that one long name does not pad every row of
    a table. ``--json`` keeps names whole."""
    if len(name) <= width:
        return name
    tail = (width - len(_ELLIPSIS)) // 2
    head = width - len(_ELLIPSIS) - tail
    return name[:head] + _ELLIPSIS + name[len(name) - tail :]


def f32(value: float) -> str:
    """Shortest text that reads back as the same float32 (how ORT stores these floats)."""
    return str(np.float32(value))


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def file_size(path: str) -> int | None:
    """The file's size; None when unknown, or for an ORT 1.15 checkpoint folder."""
    if os.path.isdir(path):
        return None
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def human_size(nbytes: int | None) -> str:
    """``nbytes`` for people, in binary units: ``512 B``, ``1.5 KiB``, ``64.0 MiB`` (``?`` when
    unknown). ``--json`` reports keep the exact byte counts."""
    if nbytes is None:
        return "?"
    if nbytes < 1024:
        return f"{nbytes} B"
    value = float(nbytes)
    for unit in _UNITS:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def natural_key(name: str) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """Sort key that orders the digit runs of a name by value: ``layer2`` before ``layer10``."""
    parts = tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(name) if p)
    return parts, name  # the plain name breaks ties ("a01" vs "a1")


def natural_sorted(names: Iterable[str]) -> list[str]:
    return sorted(names, key=natural_key)
