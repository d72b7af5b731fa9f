"""sendrecv, the nccl-tests ring shift: every rank sends to rank+1 and receives from rank-1.

size = count = the buffer. busbw = algbw (factor 1): each rank's link carries S each way.
In-place (send and receive in one buffer) relies on NCCL's staging buffers; gloo would write the
incoming message over the outgoing one mid-send, so on gloo the in-place row stages a copy first.

The receive is posted before the send (`exchange`). NCCL does not care about the order inside a
group, but gloo does: a gloo send waits for the receiver's "ready to receive" message, and that
message travels on the pair's one TCP connection behind any data already queued there. With the
send posted first, on two ranks (peer +1 = peer -1) one rank's 16 MiB went out before its "ready"
message, so the two directions ran one after the other and each row showed half the link
(bench/RESULTS.md, "gloo point-to-point": 280 ms vs 145 ms for 16 MiB at 1 Gbit/s).
"""

import torch.distributed as dist

from commbench.collectives.base import Collective, pattern, same_buffer, same_count


def exchange(send, dst: int, recv, src: int, group) -> None:
    """Send `send` to global rank dst while receiving `recv` from src, both in flight at once
    (nccl-tests' ncclSend + ncclRecv in one group); the receive is posted first (module docstring)."""
    ops = [dist.P2POp(dist.irecv, recv, src, group=group), dist.P2POp(dist.isend, send, dst, group=group)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _launch(buffers, ctx, variant):
    exchange(buffers.send, ctx.peer(+1), buffers.recv, ctx.peer(-1), ctx.group)


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
