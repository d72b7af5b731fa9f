"""Fault injection, so tests (and sceptical users) can see the checker and the watchdog work.

COMMBENCH_INJECT_CORRUPTION=RANK[:OP]  that rank adds 1 to one element of its result before the
                                       correctness check (of every op, or only OP)
COMMBENCH_INJECT_HANG=RANK[:OP]        that rank stops calling collectives when it reaches OP
                                       (or the first op): it stays alive but never progresses
COMMBENCH_INJECT_KILL=RANK[:OP]        that rank kills itself with SIGKILL when it reaches OP,
                                       as the OOM killer or a node failure would
COMMBENCH_INJECT_DELAY=RANK[:OP]       that rank sleeps COMMBENCH_INJECT_DELAY_US microseconds
                                       (default 2000) inside every timed op (of OP): a straggler,
                                       to see which rank the report names as the slowest
`commbench diagnose` names its ops `screen` (the straggler screen's ring) and `round<N>` (N counted
from 1, as its report does): a rank that hangs or dies in round N is the node the diagnosis must name
as not answering; there the delay comes before each timed iteration (a node busy elsewhere, late to
every iteration), so the others wait for it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

CORRUPTION_ENV = "COMMBENCH_INJECT_CORRUPTION"
HANG_ENV = "COMMBENCH_INJECT_HANG"
KILL_ENV = "COMMBENCH_INJECT_KILL"
DELAY_ENV = "COMMBENCH_INJECT_DELAY"
DELAY_US_ENV = "COMMBENCH_INJECT_DELAY_US"
DEFAULT_DELAY_US = 2000.0


def _targets(env_name: str, rank: int, op: str) -> bool:
    spec = os.environ.get(env_name)
    if not spec:
        return False
    target_rank, _, target_op = spec.partition(":")
    return target_rank.strip().isdigit() and int(target_rank) == rank and target_op in ("", op)


def corrupt_if_asked(rank: int, op: str, result) -> None:
    if _targets(CORRUPTION_ENV, rank, op) and result.numel():
        result.view(-1)[result.numel() // 2] += 1


def hang_if_asked(rank: int, op: str) -> None:
    if _targets(HANG_ENV, rank, op):
        threading.Event().wait()  # forever: only the watchdog ends this process


def die_if_asked(rank: int, op: str) -> None:
    if _targets(KILL_ENV, rank, op):
        os.kill(os.getpid(), signal.SIGKILL)


def delayed_if_asked(rank: int, op: str, run_op: Callable[[], None]) -> Callable[[], None]:
    """`run_op`, or on the straggler rank a version that sleeps first (inside the timed region)."""
    if not _targets(DELAY_ENV, rank, op):
        return run_op
    delay_s = float(os.environ.get(DELAY_US_ENV) or DEFAULT_DELAY_US) / 1e6

    def late_op() -> None:
        time.sleep(delay_s)
        run_op()

    return late_op
