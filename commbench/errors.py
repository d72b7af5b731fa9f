"""Errors that the command line turns into one line on stderr and an exit code."""


class CommbenchError(Exception):
    """A run failed for a reason the user should read (exit 1)."""

    exit_code = 1


class UsageError(CommbenchError):
    """The user asked for something that cannot be done as asked (exit 2)."""

    exit_code = 2
