"""reduce_scatter from one tensor: rank r ends with slot r of the sum of all inputs.

size = the whole input (n x per-rank output); count = the per-rank output.
busbw = algbw x (n-1)/n. In-place: the output is the rank's own slot of the input.
"""

import torch.distributed as dist

from commbench.collectives.base import Collective, Counts, aligned_chunk, pattern_sum


def _counts(count, n, elt_size):
    chunk = aligned_chunk(count, n, elt_size)
    return Counts(send=chunk * n, recv=chunk, param=chunk)


# torch 2.13 renamed reduce_scatter_tensor; older releases only have the old name
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _launch(buffers, ctx, variant):
    _reduce_scatter(buffers.recv, buffers.send, op=dist.ReduceOp.SUM, group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    return pattern_sum(ctx.size, counts.recv, dtype, device, start=ctx.rank * counts.recv)


REDUCE_SCATTER = Collective(
    name="reduce_scatter",
    redop="sum",
    counts=_counts,
    in_place_offsets=lambda counts, rank: (0, rank * counts.recv),
    launch=_launch,
    expected=_expected,
)
