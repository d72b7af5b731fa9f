"""Start a launcher as a terminal's foreground job would run it, for the tests that send it Ctrl-C.

A process inherits ignored signals and its signal mask from the one that starts it: a job a shell
starts in the background gets SIGINT ignored (POSIX), and a test process can carry a mask a
library set. Python then installs no KeyboardInterrupt handler and the launcher never sees the
Ctrl-C the test sends, so the test would time out on its parent's state, not the launcher's.
"""

from __future__ import annotations

import signal
from pathlib import Path


def as_foreground_job() -> None:
    """preexec_fn: SIGINT and SIGTERM at their defaults and nothing blocked, as in a shell's
    foreground job."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def signal_state(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks and its children, for a failure's
    message (a launcher that did not leave: did it ignore the signal, or wait on a child?)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError as error:
        return f"pid {pid}: {error}"
    masks = [line for line in status if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt"))]
    return f"pid {pid}: {'; '.join(masks)}; children {children}"
