"""The error the commands raise for command-line mistakes."""


class UsageError(Exception):
    """A command-line mistake found after parsing (bad NAME=VALUE, unknown property...): exit 2."""
