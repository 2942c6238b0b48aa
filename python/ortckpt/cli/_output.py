"""What every command shares for its output: ``--json`` (all commands) and ``--dry-run`` (commands
that write files), and the one function that prints a command's result either way.

A command builds one JSON-ready ``report`` dict and the text ``lines`` for people, then calls
``emit``. Writing commands put ``"dry_run"`` and ``"files"`` (``[{"path", "size"}]``: what was
written, or would be with ``--dry-run``) in their report, through ``written``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from typing import TextIO

from ._format import JsonValue, file_size


def add_output_options(parser: argparse.ArgumentParser, *, writes: bool) -> None:
    """Add ``--json`` (and, for a command that writes, ``-n/--dry-run``) to ``parser``."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    if writes:
        parser.add_argument(
            "-n",
            "--dry-run",
            action="store_true",
            help="read and check everything, report what would be written, write nothing",
        )


def written(args: argparse.Namespace, paths: Iterable[str]) -> dict[str, JsonValue]:
    """The ``dry_run`` and ``files`` entries of a writing command's report (sizes are null in a
    dry run: nothing was written)."""
    dry = bool(getattr(args, "dry_run", False))
    files = [{"path": p, "size": None if dry else file_size(p)} for p in paths]
    return {"dry_run": dry, "files": files}


def verb(args: argparse.Namespace) -> str:
    """``wrote`` or, in a dry run, ``would write``: how text output starts."""
    return "would write" if getattr(args, "dry_run", False) else "wrote"


def emit(args: argparse.Namespace, out: TextIO, report: dict[str, JsonValue], lines: Iterable[str]) -> None:
    """Print ``report`` as JSON with ``--json``, else the text ``lines``."""
    if getattr(args, "json", False):
        json.dump(report, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return
    for line in lines:
        print(line, file=out)
