"""sendrecv, the nccl-tests ring shift: every rank sends to rank+1 and receives from rank-1.

size = count = the buffer. busbw = algbw (factor 1): each rank's link carries S each way.
In-place (send and receive in one buffer) relies on NCCL's staging buffers; gloo would write the
incoming message over the outgoing one mid-send, so on gloo the in-place row stages a copy first.
"""

import torch.distributed as dist

from commbench.collectives.base import Collective, pattern, same_buffer, same_count


def _launch(buffers, ctx, variant):
    ops = [
        dist.P2POp(dist.isend, buffers.send, ctx.peer(+1), group=ctx.group),
        dist.P2POp(dist.irecv, buffers.recv, ctx.peer(-1), group=ctx.group),
    ]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _expected(ctx, counts, dtype, device, variant):
    return pattern((ctx.rank - 1) % ctx.size, counts.recv, dtype, device)


SENDRECV = Collective(
    name="sendrecv",
    redop="none",
    counts=same_count,
    in_place_offsets=same_buffer,
    launch=_launch,
    expected=_expected,
    min_group_size=2,
    in_place_staged_on=("gloo",),
)
