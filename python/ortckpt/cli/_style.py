"""Colour for the terminal: only when the stream is a terminal, ``NO_COLOR`` is not set
(https://no-color.org) and ``TERM`` is not ``dumb``. Pipes and files always get plain text."""

from __future__ import annotations

import os
from typing import TextIO

_CODES = {"red": "31", "green": "32", "yellow": "33", "bold": "1", "dim": "2"}


def use_color(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR", "") != "" or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Style:
    """Wraps text in ANSI colours when enabled, else returns it unchanged."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        return cls(use_color(stream))

    def __call__(self, text: str, color: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\033[{_CODES[color]}m{text}\033[0m"
