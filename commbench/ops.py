"""One home for every fact about a collective op that more than one part of commbench needs.

Per op: commbench's name, the nccl-tests binary and collective names, the busbw factor and the
counts convention (what `size` and `count` mean). The collective declarations
(commbench/collectives/), the nccl-tests reader, the network model and the dashboard read these
facts here. Adding a collective = its declaration file under collectives/ + one entry below.

busbw = algbw x factor normalises every op to what one link of a flat ring carries (nccl-tests'
definition, one formula per src/<op>.cu); n is the number of ranks in the communicator.
Torch-free: the modelling and data layers import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# counts conventions, in nccl-tests' words; `size` is the larger of one rank's send and receive buffers
ONE_BUFFER = "size: the one buffer of every rank; count: its elements"
GATHERED = "size: the whole gathered output; count: the per-rank chunk (size / n elements, 16-byte aligned)"
SCATTERED = "size: the whole input; count: the per-rank chunk (size / n elements, 16-byte aligned)"
EXCHANGED = (
    "size: one rank's whole send buffer; count: the chunk sent to each rank (size / n elements, 16-byte aligned)"
)


@dataclass(frozen=True)
class Op:
    """The facts of one collective op."""

    name: str  # commbench's name, also the records' `op`
    nccl_tests_binary: str | None  # e.g. all_reduce_perf; None where nccl-tests has no test of it
    nccl_tests_name: str | None  # the collective as nccl-tests' JSON names it, e.g. AllReduce
    factor: Callable[[int, str | None], float]  # (ranks n, pingpong direction) -> busbw / algbw
    counts: str  # what `size` and `count` mean for this op
    measured: bool = True  # commbench measures it (a declaration in collectives/); else import-only
    default: bool = False  # in a default sweep


def _ring_twice(n: int, direction: str | None = None) -> float:
    return 2 * (n - 1) / n  # reduce-scatter then all-gather: every byte crosses each link twice


def _all_but_own_share(n: int, direction: str | None = None) -> float:
    return (n - 1) / n


def _one_copy(n: int, direction: str | None = None) -> float:
    return 1.0


def _per_direction(n: int, direction: str | None = None) -> float:
    return 2.0 if direction == "bi" else 1.0  # both ranks send at once: the link carries two copies


# nccl-tests order; the first five make a default sweep
OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("all_reduce", "all_reduce_perf", "AllReduce", _ring_twice, ONE_BUFFER, default=True),
        Op("all_gather", "all_gather_perf", "AllGather", _all_but_own_share, GATHERED, default=True),
        Op("reduce_scatter", "reduce_scatter_perf", "ReduceScatter", _all_but_own_share, SCATTERED, default=True),
        Op("all_to_all", "alltoall_perf", "AlltoAll", _all_but_own_share, EXCHANGED, default=True),
        Op("sendrecv", "sendrecv_perf", "SendRecv", _one_copy, ONE_BUFFER, default=True),
        Op("broadcast", "broadcast_perf", "Broadcast", _one_copy, ONE_BUFFER),
        Op(
            "pingpong",
            None,
            None,
            _per_direction,
            "size: the message each rank sends; count: its elements (uni: half the round trip is timed)",
        ),
        # alltoallv: nccl-tests' own test (src/alltoallv.cu: algbw = one rank's send bytes / time, busbw =
        # algbw x (n-1)/n); uneven splits from commbench.modeling.routing, sized by the busiest rank
        Op(
            "all_to_allv",
            "alltoallv_perf",
            "AlltoAllv",
            _all_but_own_share,
            "size: the busiest rank's larger of send and receive bytes; count: those elements",
        ),
        # nccl-tests collectives commbench imports but does not measure
        Op("reduce", "reduce_perf", "Reduce", _one_copy, ONE_BUFFER, measured=False),
        Op("gather", "gather_perf", "Gather", _all_but_own_share, GATHERED, measured=False),
        Op("scatter", "scatter_perf", "Scatter", _all_but_own_share, SCATTERED, measured=False),
        # hypercube already counts its (n-1) pieces in algbw, so its factor is 1
        Op("hypercube", "hypercube_perf", "HyperCube", _one_copy, GATHERED, measured=False),
    )
}

MEASURED_OPS: tuple[str, ...] = tuple(name for name, op in OPS.items() if op.measured)
DEFAULT_OPS: tuple[str, ...] = tuple(name for name, op in OPS.items() if op.default)


def busbw_factor(op: str, n: int, direction: str | None = None) -> float:
    """busbw / algbw of `op` on n ranks; KeyError for an op without a known formula."""
    return OPS[op].factor(n, direction)


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


# binaries (all_reduce_perf, alltoall_perf) and JSON names (AllReduce, AlltoAll) squash to one key
_BY_SQUASHED_NCCL_TESTS_NAME = {_squash(op.nccl_tests_name): op.name for op in OPS.values() if op.nccl_tests_name}


def op_from_nccl_tests(name: str) -> str | None:
    """Commbench's name for an nccl-tests binary or collective ('./all_reduce_perf', 'AllReduce'
    -> 'all_reduce'); None when no op here is it."""
    stem = re.sub(r"_perf(_mpi)?$", "", Path(name).name)
    return _BY_SQUASHED_NCCL_TESTS_NAME.get(_squash(stem))
