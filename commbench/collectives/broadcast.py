"""broadcast from rank 0 of the group: everyone ends with rank 0's buffer. busbw = algbw."""

import torch.distributed as dist

from commbench.collectives.base import Collective, pattern, same_buffer, same_count


def _launch(buffers, ctx, variant):
    dist.broadcast(buffers.recv, src=ctx.global_ranks[BROADCAST.root], group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    return pattern(BROADCAST.root, counts.recv, dtype, device)


BROADCAST = Collective(
    name="broadcast",
    redop="none",
    counts=same_count,
    in_place_offsets=same_buffer,
    launch=_launch,
    expected=_expected,
    out_of_place_copies=True,
    root=0,
)
