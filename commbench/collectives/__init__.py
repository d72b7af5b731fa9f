"""The collectives commbench measures: one declaration per module, over one harness (commbench.measure.harness).

Which ops exist, and their facts beyond measuring, is commbench.ops; this package maps each
measured op to its declaration (which imports torch).
"""

from __future__ import annotations

from commbench.errors import UsageError
from commbench.ops import DEFAULT_OPS, MEASURED_OPS

ALL_OPS = MEASURED_OPS  # every op a sweep can run: the default five, then broadcast and pingpong on request
__all__ = ["ALL_OPS", "DEFAULT_OPS", "check_op_name", "get_collective", "declarations"]


def declarations() -> dict:
    """Op name -> its declaration, for every measured op (imports torch)."""
    from commbench.collectives.all_gather import ALL_GATHER
    from commbench.collectives.all_reduce import ALL_REDUCE
    from commbench.collectives.all_to_all import ALL_TO_ALL
    from commbench.collectives.broadcast import BROADCAST
    from commbench.collectives.pingpong import PINGPONG
    from commbench.collectives.reduce_scatter import REDUCE_SCATTER
    from commbench.collectives.sendrecv import SENDRECV

    return {c.name: c for c in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SENDRECV, BROADCAST, PINGPONG)}


def get_collective(name: str):
    """The declaration of one op (imports torch)."""
    return declarations()[check_op_name(name)]


def check_op_name(name: str) -> str:
    if name not in ALL_OPS:
        raise UsageError(f"unknown op {name!r}; choose from {', '.join(ALL_OPS)}")
    return name
