"""``ortckpt recover``: settle interrupted saves of a checkpoint and remove their files."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ..io import recover
from ._output import emit

_MESSAGES = {
    "clean": "{path}: nothing to recover",
    "leftovers": "{path}: removed files left by interrupted saves; the checkpoint was not affected",
    "new": "{path}: completed an interrupted save; the checkpoint is the newly saved state",
    "old": "{path}: undid an interrupted save; the checkpoint is the state from before it",
}


def run_recover(args: argparse.Namespace, out: TextIO) -> int:
    path = os.fsdecode(args.path)
    outcome = recover(args.path)
    emit(args, out, {"path": path, "outcome": outcome}, [_MESSAGES[outcome].format(path=path)])
    return 0
