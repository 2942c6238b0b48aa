"""The error the commands raise for command-line mistakes."""


class UsageError(Exception):
    """A command-line mistake found after parsing (bad NAME=VALUE, unknown property...): exit 2."""


class ArgumentsError(UsageError):
    """Missing or misplaced arguments found by a command itself (as argparse would report them):
    the command's usage is printed before the error line."""
