"""Formatting shared by the commands: JSON-safe floats, float32 text, yes/no, file sizes (exact and
human-readable), natural sort of names."""

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
