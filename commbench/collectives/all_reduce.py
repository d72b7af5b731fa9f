"""all_reduce: every rank ends with the sum of all ranks' buffers. busbw = algbw x 2(n-1)/n."""

import torch.distributed as dist

from commbench.collectives.base import Collective, pattern_sum, same_buffer, same_count


def _launch(buffers, ctx, variant):
    dist.all_reduce(buffers.recv, op=dist.ReduceOp.SUM, group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    return pattern_sum(ctx.size, counts.recv, dtype, device)


ALL_REDUCE = Collective(
    name="all_reduce",
    redop="sum",
    counts=same_count,
    in_place_offsets=same_buffer,
    launch=_launch,
    expected=_expected,
    out_of_place_copies=True,
)
