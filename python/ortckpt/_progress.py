"""Progress bars for long commands: tqdm on a terminal, nothing otherwise (or without tqdm)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def progress(
    items: Iterable[T], *, enabled: bool, desc: str, total: int | None = None, unit: str = "it"
) -> Iterable[T]:
    """``items``, wrapped in a tqdm bar on stderr when ``enabled`` and stderr is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # the bar is a nicety: work on without it
        return items
    bar: Iterable[T] = tqdm(
        items, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True
    )
    return bar
