"""``ortckpt recover``: settle interrupted saves of a checkpoint and remove their files."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from ..io import recover

_MESSAGES = {
    "clean": "{path}: nothing to recover",
    "leftovers": "{path}: removed files left by interrupted saves; the checkpoint was not affected",
    "new": "{path}: completed an interrupted save; the checkpoint is the newly saved state",
    "old": "{path}: undid an interrupted save; the checkpoint is the state from before it",
}


def add_parser(commands: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command (``command`` is the parser module's subcommand factory)."""
    parser = command(
        commands,
        "recover",
        "settle an interrupted save of a checkpoint",
        "Restore one complete state of a checkpoint after a save was interrupted (crash, power\n"
        "loss, kill -9): complete the save when all its new files are there, else restore the\n"
        "checkpoint from before it. Removes every temporary, backup and journal file of\n"
        "interrupted saves of CKPT. Needed when loading raises InterruptedSaveError; the next\n"
        "save of CKPT also does it. Waits for a save of CKPT that is still running.",
        "  ortckpt recover model.ckpt\n",
    )
    parser.add_argument("path", metavar="CKPT", help="checkpoint file")


def run_recover(args: argparse.Namespace, out: TextIO) -> int:
    outcome = recover(args.path)
    print(_MESSAGES[outcome].format(path=args.path), file=out)
    return 0
