"""all_to_all (single tensor): chunk j of rank i's input lands as chunk i of rank j's output.

size = one rank's whole send buffer; count = one chunk (per peer). busbw = algbw x (n-1)/n.
In-place on gloo stages a copy of the input first: gloo's transport races with a shared buffer.
"""

import torch
import torch.distributed as dist

from commbench.collectives.base import Collective, Counts, aligned_chunk, pattern, same_buffer


def _counts(count, n, elt_size):
    chunk = aligned_chunk(count, n, elt_size)
    return Counts(send=chunk * n, recv=chunk * n, param=chunk)


def _launch(buffers, ctx, variant):
    dist.all_to_all_single(buffers.recv, buffers.send, group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    chunk = counts.param
    mine = slice(ctx.rank * chunk, (ctx.rank + 1) * chunk)
    return torch.cat([pattern(src, counts.send, dtype, device)[mine] for src in range(ctx.size)])


ALL_TO_ALL = Collective(
    name="all_to_all",
    redop="none",
    counts=_counts,
    in_place_offsets=same_buffer,
    launch=_launch,
    expected=_expected,
    in_place_staged_on=("gloo",),
)
