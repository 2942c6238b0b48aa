# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this marker)
"""The ``ortckpt`` command-line tool (``docs/cli.md``).

::

    ortckpt inspect PATH [--json] [--values N]
    ortckpt diff A B [--json] [--rtol R] [--atol A] [--quiet]
    ortckpt from-onnx MODEL OUT [--trainable NAME ...] [--nominal] [--external-data-threshold BYTES]
    ortckpt to-onnx CKPT MODEL OUT
    ortckpt set-property CKPT [NAME=VALUE ...] [--type int|float|str] [--delete NAME]
    ortckpt strip-optimizer CKPT [OUT]
    ortckpt --version

Every command takes ``--json``; the commands that write take ``--dry-run``. Exit status: 0 on
success (``diff``: the checkpoints are identical), 1 when ``diff`` finds differences, 2 on errors
(one ``ortckpt: error: ...`` line on stderr, never a traceback, whatever the input; the
command's usage first for command-line mistakes).

This package holds ``main`` (parsing, dispatch, errors and exit codes); each command lives in its
own module, imported only when it runs (see ``_parser``).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import CheckpointError
from ._errors import ArgumentsError, UsageError
from ._parser import Parser, build_parser

if TYPE_CHECKING:
    import argparse

# The package's one public name: the commands' helpers stay in their private modules (the tests
# import them from there).
__all__ = ["main"]


def _error_prefix() -> str:
    from ._style import Style

    return Style.for_stream(sys.stderr)("ortckpt: error:", "red")


def _fail(message: str) -> int:
    print(f"{_error_prefix()} {message}", file=sys.stderr)
    return 2


def _message(exc: BaseException) -> str:
    """One clean line for an exception: an OSError says "<file>: <reason>" once (not the errno,
    the path and the OS's message each twice)."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.filename is not None:
        reason = os.strerror(exc.errno)
        names = [os.fsdecode(exc.filename)]
        if exc.filename2 is not None:
            names.append(os.fsdecode(exc.filename2))
        return f"{' -> '.join(names)}: {reason}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _unknown_command(parser: Parser, argv: Sequence[str]) -> str | None:
    """The error for a mistyped command (with a suggestion), or None. The top-level options take
    no values, so the first word not starting with '-' is the command."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in parser.commands:
        return None
    import difflib

    close = difflib.get_close_matches(word, list(parser.commands), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (commands: {', '.join(parser.commands)})"
    return f"unknown command {word!r}{hint}"


def _autocomplete(parser: Parser) -> None:
    """Shell completion through argcomplete (the optional 'completion' extra), only when the shell
    asks for it: argcomplete is not imported otherwise."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def _parse(parser: Parser, argv: Sequence[str] | None) -> argparse.Namespace:
    args_list = list(sys.argv[1:] if argv is None else argv)
    unknown = _unknown_command(parser, args_list)
    if unknown is not None:
        parser.error(unknown)
    args, extras = parser.parse_known_args(args_list)
    if extras and args.command is not None:
        command = parser.commands[args.command]
        if args.command == "set-property" and not any(e.startswith("-") for e in extras):
            # NAME=VALUE arguments after an option (argparse stops collecting them there)
            args.assignments = [*args.assignments, *extras]
        else:
            command.error(f"unrecognized arguments: {' '.join(extras)}")
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _run(args: argparse.Namespace) -> int:
    module_name, function = args.run.split(":")
    module = importlib.import_module(f".{module_name}", __name__)
    result: int = getattr(module, function)(args, sys.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    parser = build_parser()
    _autocomplete(parser)
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # --help, --version, usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_usage(sys.stderr)
        return _fail("a command is required (try 'ortckpt inspect PATH')")
    try:
        return _run(args)
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): quietly stop
        _quiet_stdout()
        return 1 if args.command == "inspect" else 2
    except KeyboardInterrupt:
        return 130
    except ArgumentsError as exc:
        parser.commands[args.command].print_usage(sys.stderr)
        return _fail(_message(exc))
    except (CheckpointError, OSError, UsageError, ImportError) as exc:
        return _fail(_message(exc))
    except (ValueError, OverflowError) as exc:
        # invalid input the library refused (e.g. an unknown --trainable name)
        return _fail(_message(exc))
    except MemoryError:
        return _fail("out of memory (the input is larger than this machine can hold)")
    except Exception as exc:  # a bug of ours: still one line, never a traceback
        return _fail(
            f"internal error ({type(exc).__name__}: {_message(exc)}); please report this with the input"
        )
