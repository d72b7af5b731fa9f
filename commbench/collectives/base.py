"""The shared shape of a collective declaration, and the helpers every declaration uses.

A declaration says, for one op, what nccl-tests says in one short src/<op>.cu file:
how a size in bytes becomes element counts, where the in-place buffers sit, how to launch the op
through torch.distributed, and what every rank must hold afterwards given the known inputs of
`pattern`. Facts shared beyond measuring (busbw factor, nccl-tests names, what size and count
mean) live in commbench.ops. The harness in commbench.measure.harness does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.ops import busbw_factor

if TYPE_CHECKING:  # torch is imported only by the measuring path
    import torch


@dataclass(frozen=True)
class Counts:
    """Elements of one rank's buffers, nccl-tests style (sendcount, recvcount, paramcount)."""

    send: int
    recv: int
    param: int  # the count passed to the collective call: nccl-tests prints it as `count`

    def size_bytes(self, elt_size: int) -> int:
        """nccl-tests `size`: the larger of one rank's send and receive bytes."""
        return max(self.send, self.recv) * elt_size


@dataclass(frozen=True)
class Variant:
    """One column group of an nccl-tests row: out-of-place/in-place, or a ping-pong direction."""

    label: str
    in_place: bool = False
    direction: str | None = None
    round_trip: bool = False  # the op is a round trip: report half its time


OUT_OF_PLACE = Variant("out-of-place")
IN_PLACE = Variant("in-place", in_place=True)


@dataclass
class Buffers:
    """The tensors one rank passes to the op; in-place variants alias one allocation."""

    send: torch.Tensor
    recv: torch.Tensor


@dataclass(frozen=True)
class GroupContext:
    """Where this rank sits in the communicator under test."""

    group: object  # a torch ProcessGroup
    rank: int  # rank inside the group
    size: int
    global_ranks: tuple[int, ...]  # group rank -> global rank (torch p2p takes global ranks)

    def peer(self, offset: int) -> int:
        return self.global_ranks[(self.rank + offset) % self.size]


Launch = Callable[[Buffers, GroupContext, Variant], None]
Expected = Callable[[GroupContext, Counts, "torch.dtype", "torch.device", Variant], "torch.Tensor"]


@dataclass(frozen=True)
class Collective:
    name: str  # a key of commbench.ops.OPS
    redop: str  # "sum" or "none", as nccl-tests prints it
    counts: Callable[[int, int, int], Counts]  # (elements in `size`, group size, element bytes) -> Counts
    in_place_offsets: Callable[[Counts, int], tuple[int, int]]  # (counts, rank) -> (send, recv) offsets
    launch: Launch
    expected: Expected  # what this rank's recv buffer holds after one op on `pattern` inputs
    variants: tuple[Variant, ...] = (OUT_OF_PLACE, IN_PLACE)
    min_group_size: int = 1
    max_group_size: int | None = None
    # torch offers no out-of-place form of some ops (all_reduce, broadcast): the out-of-place
    # variant then copies send into recv first, as torch's functional collectives do.
    out_of_place_copies: bool = False
    # gloo's transport lets incoming data overwrite outgoing data still being sent, so on these
    # backends the in-place variant stages the outgoing data in a scratch copy first (timed too)
    in_place_staged_on: tuple[str, ...] = ()
    root: int = -1  # the group rank a rooted op sends from (nccl-tests' root column), -1 if unrooted

    def busbw_factor(self, n: int, variant: Variant) -> float:
        """busbw / algbw on n ranks, from commbench.ops (the one home of the factor)."""
        return busbw_factor(self.name, n, variant.direction)


def aligned_chunk(count: int, n: int, elt_size: int) -> int:
    """Per-rank chunk of `count` elements over n ranks, trimmed to a multiple of 16 bytes (nccl-tests)."""
    per_rank = count // n
    align = max(1, 16 // elt_size)
    return per_rank - per_rank % align


PERIOD = 13  # inputs cycle through 0..12: exact in every dtype, int8 and bfloat16 included
_BASES: dict = {}  # (dtype, device) -> 0, 1, ..., 12, 0, 1, ... long enough for every slice so far


def _base(length: int, dtype, device) -> torch.Tensor:
    import torch

    key = (dtype, str(device))
    base = _BASES.get(key)
    if base is None or base.numel() < length:
        size = 1 << max(length - 1, 1).bit_length()  # grow in powers of two: few rebuilds per sweep
        base = _BASES[key] = (torch.arange(size, device=device) % PERIOD).to(dtype)
    return base


def pattern(rank: int, numel: int, dtype: torch.dtype, device, start: int = 0) -> torch.Tensor:
    """Known inputs, different on every rank: element i of rank r is (i + 7r) mod 13.
    A view of one cached tensor, so filling and checking cost no arithmetic."""
    shift = (7 * rank) % PERIOD
    return _base(start + shift + numel, dtype, device)[start + shift : start + shift + numel]


def pattern_sum(ranks: int, numel: int, dtype, device, start: int = 0) -> torch.Tensor:
    """Sum over ranks 0..ranks-1 of pattern(r)[start:start+numel]. Every pattern cycles with PERIOD,
    so the sum does too: one period is summed (ranks whose shift 7r mod 13 is the same contribute
    alike) and the result is a view of a cached tensor repeating it, so checking a row costs no
    arithmetic over its elements."""
    held = _SUM_BASES.get((dtype, str(device)))
    if held is None or held[0] != ranks or held[1].numel() < start + numel:
        held = _SUM_BASES[(dtype, str(device))] = (ranks, _sum_base(ranks, start + numel, dtype, device))
    return held[1][start : start + numel]


# (dtype, device) -> (ranks, pattern_sum's period repeated, grown like _BASES): one group size at a
# time (a sweep goes scope by scope), so a device never holds one such tensor per group size
_SUM_BASES: dict = {}


def _sum_base(ranks: int, length: int, dtype, device) -> torch.Tensor:
    import torch

    accumulate = (
        torch.int64 if not dtype.is_floating_point else (torch.float64 if dtype == torch.float64 else torch.float32)
    )
    one_period = torch.zeros(PERIOD, dtype=accumulate)
    for shift in range(min(ranks, PERIOD)):
        owners = len(range(shift, ranks, PERIOD))  # ranks r with r mod 13 == shift
        one_period += owners * pattern(shift, PERIOD, accumulate, "cpu")
    size = 1 << max(length - 1, 1).bit_length()
    repeats = -(-size // PERIOD)
    return one_period.to(dtype).to(device).repeat(repeats)[:size]


def same_count(count: int, n: int, elt_size: int) -> Counts:
    return Counts(send=count, recv=count, param=count)


def same_buffer(counts: Counts, rank: int) -> tuple[int, int]:
    return 0, 0
