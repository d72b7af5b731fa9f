"""Fault injection, so tests (and sceptical users) can see the checker and the watchdog work.

COMMBENCH_INJECT_CORRUPTION=RANK[:OP]  that rank adds 1 to one element of its result before the
                                       correctness check (of every op, or only OP)
COMMBENCH_INJECT_HANG=RANK[:OP]        that rank stops calling collectives when it reaches OP
                                       (or the first op): it stays alive but never progresses
COMMBENCH_INJECT_KILL=RANK[:OP]        that rank kills itself with SIGKILL when it reaches OP,
                                       as the OOM killer or a node failure would
"""

from __future__ import annotations

import os
import signal
import threading

CORRUPTION_ENV = "COMMBENCH_INJECT_CORRUPTION"
HANG_ENV = "COMMBENCH_INJECT_HANG"
KILL_ENV = "COMMBENCH_INJECT_KILL"


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
