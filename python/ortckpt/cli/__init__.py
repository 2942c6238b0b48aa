"""The ``ortckpt`` command-line tool (``docs/cli.md``).

::

    ortckpt inspect PATH [--json] [--values N]
    ortckpt diff A B [--json] [--rtol R] [--atol A] [--quiet]
    ortckpt from-onnx MODEL OUT [--trainable NAME ...] [--nominal] [--external-data-threshold BYTES]
    ortckpt to-onnx CKPT MODEL OUT
    ortckpt set-property CKPT [NAME=VALUE ...] [--type int|float|str] [--delete NAME]
    ortckpt strip-optimizer CKPT [OUT]
    ortckpt recover CKPT
    ortckpt convert IN OUT [--include-optimizer-state] [--trainable NAME ...] [--format-version 1|2]
    ortckpt strip-values CKPT OUT [--drop-properties]
    ortckpt average OUT SRC... [--weights-property NAME] [--reference REF] [--max-bytes N]
    ortckpt --version

Exit status: 0 on success (``diff``: the checkpoints are identical), 1 when ``diff`` finds
differences, 2 on errors (one ``ortckpt: error: ...`` line on stderr, no traceback).

This package holds ``main`` (dispatch and exit codes); each command lives in its own module.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from ..errors import CheckpointError
from ._average import run_average
from ._compare import EXACT, Tolerance, compare_values
from ._convert import run_convert, run_strip_values
from ._diff import diff_states, run_diff
from ._diff_text import print_diff
from ._edit import parse_property, run_set_property, run_strip_optimizer
from ._errors import UsageError
from ._format import JsonValue
from ._inspect import print_text, run_inspect, to_json
from ._onnx import run_from_onnx, run_to_onnx
from ._parser import build_parser
from ._recover import run_recover

__all__ = [
    "EXACT",
    "JsonValue",
    "Tolerance",
    "UsageError",
    "compare_values",
    "diff_states",
    "main",
    "parse_property",
    "print_diff",
    "print_text",
    "to_json",
]

_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "inspect": run_inspect,
    "diff": run_diff,
    "from-onnx": run_from_onnx,
    "to-onnx": run_to_onnx,
    "set-property": run_set_property,
    "strip-optimizer": run_strip_optimizer,
    "recover": run_recover,
    "convert": run_convert,
    "strip-values": run_strip_values,
    "average": run_average,
}


def _fail(message: str) -> int:
    print(f"ortckpt: error: {message}", file=sys.stderr)
    return 2


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extras = parser.parse_known_args(argv)
        if extras:
            if args.command == "set-property" and not any(e.startswith("-") for e in extras):
                # NAME=VALUE arguments after an option (argparse stops collecting them there)
                args.assignments = [*args.assignments, *extras]
            else:
                parser.error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("ortckpt: error: a command is required (try 'ortckpt inspect PATH')", file=sys.stderr)
        return 2
    out = sys.stdout
    try:
        return _COMMANDS[args.command](args, out)
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): quietly stop
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1 if args.command == "inspect" else 2
    except KeyboardInterrupt:
        return 130
    except (CheckpointError, OSError, UsageError, ImportError) as exc:
        return _fail(_message(exc))
    except (ValueError, OverflowError) as exc:
        # invalid input the library refused (e.g. an unknown --trainable name)
        return _fail(_message(exc))
