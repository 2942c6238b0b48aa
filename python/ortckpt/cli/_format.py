"""Formatting shared by the commands: JSON-safe floats, float32 text, yes/no, file sizes."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

#: A value of the ``--json`` reports (what ``json.dump`` accepts).
JsonValue = Any


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
