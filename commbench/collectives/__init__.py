"""The collectives commbench measures: one declaration per module, over one harness (commbench.sweep)."""

from __future__ import annotations

from commbench.errors import UsageError

# the five ops of a default sweep, in nccl-tests order; the rest run when asked for
DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
ALL_OPS = DEFAULT_OPS + ("broadcast", "pingpong")


def get_collective(name: str):
    """The declaration of one op (imports torch)."""
    from commbench.collectives.all_gather import ALL_GATHER
    from commbench.collectives.all_reduce import ALL_REDUCE
    from commbench.collectives.all_to_all import ALL_TO_ALL
    from commbench.collectives.broadcast import BROADCAST
    from commbench.collectives.pingpong import PINGPONG
    from commbench.collectives.reduce_scatter import REDUCE_SCATTER
    from commbench.collectives.sendrecv import SENDRECV

    registry = {c.name: c for c in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, SENDRECV, BROADCAST, PINGPONG)}
    return registry[check_op_name(name)]


def check_op_name(name: str) -> str:
    if name not in ALL_OPS:
        raise UsageError(f"unknown op {name!r}; choose from {', '.join(ALL_OPS)}")
    return name
