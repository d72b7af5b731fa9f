"""Errors that the command line turns into one line on stderr and an exit code."""


class CommbenchError(Exception):
    """A run failed for a reason the user should read (exit 1)."""

    exit_code = 1


class UsageError(CommbenchError):
    """The user asked for something that cannot be done as asked (exit 2)."""

    exit_code = 2


class RankFailure(CommbenchError):
    """A rank was lost or stopped progressing; `reporter` is true on the one rank that says so."""

    def __init__(self, message: str, reporter: bool):
        super().__init__(message)
        self.reporter = reporter
