"""Errors that the command line turns into one line on stderr and an exit code."""

import errno
import os


class CommbenchError(Exception):
    """A run failed for a reason the user should read (exit 1, or `exit_code`)."""

    exit_code = 1

    def __init__(self, *args: object, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CommbenchError):
    """The user asked for something that cannot be done as asked (exit 2)."""

    exit_code = 2


class Interrupted(CommbenchError):
    """Ctrl-C (or SIGTERM) stopped a launched command; the message says what was kept and where."""

    exit_code = 130


class RankFailure(CommbenchError):
    """A rank was lost or stopped progressing; `reporter` is true on the one rank that says so."""

    def __init__(self, message: str, reporter: bool, linger_s: float = 0.0):
        super().__init__(message)
        self.reporter = reporter
        self.linger_s = linger_s  # how long a rank that does not report waits for the one that does


# Errors of the disk a write can meet: each becomes one line naming the path, never a traceback
# (and never blamed on the network when a rank meets it).
WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT, errno.EPERM, errno.EFBIG})


def write_error(exc: OSError) -> str:
    """'cannot write PATH: No space left on device (ENOSPC)' for an OSError of WRITE_ERRORS."""
    where = f" {exc.filename}" if exc.filename else ""
    code = errno.errorcode.get(exc.errno or 0, "?")
    return f"cannot write{where}: {exc.strerror or os.strerror(exc.errno or 0)} ({code})"
