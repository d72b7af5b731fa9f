"""all_gather into one tensor: rank r's chunk lands at slot r of everyone's output.

size = the whole gathered output (n x per-rank input); count = the per-rank input.
busbw = algbw x (n-1)/n. In-place: the input is the rank's own slot of the output.
"""

import torch
import torch.distributed as dist

from commbench.collectives.base import Collective, Counts, aligned_chunk, pattern


def _counts(count, n, elt_size):
    chunk = aligned_chunk(count, n, elt_size)
    return Counts(send=chunk, recv=chunk * n, param=chunk)


# torch 2.13 renamed all_gather_into_tensor; older releases only have the old name
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _launch(buffers, ctx, variant):
    _all_gather(buffers.recv, buffers.send, group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    return torch.cat([pattern(rank, counts.send, dtype, device) for rank in range(ctx.size)])


ALL_GATHER = Collective(
    name="all_gather",
    redop="none",
    counts=_counts,
    in_place_offsets=lambda counts, rank: (rank * counts.send, 0),
    launch=_launch,
    expected=_expected,
)
