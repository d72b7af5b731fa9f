"""Two-rank ping-pong: latency and uni- vs bidirectional point-to-point bandwidth.

uni: rank 0 sends S to rank 1, which sends it back; the round trip is timed and half of it is
     reported, so time = one-way latency + S/bandwidth and algbw = busbw = S/time.
bi:  both ranks send S and receive S at the same time (receive posted first, see
     commbench.collectives.sendrecv.exchange); algbw = S/time per direction and
     busbw = 2 x algbw, the bytes the link carried in both directions together.
nccl-tests has no ping-pong (its sendrecv is a ring shift); these rows are labelled by direction.
"""

import torch.distributed as dist

from commbench.collectives.base import Collective, Variant, pattern, same_buffer, same_count
from commbench.collectives.sendrecv import exchange

UNI = Variant("uni", direction="uni", round_trip=True)
BI = Variant("bi", direction="bi")


def _launch(buffers, ctx, variant):
    peer = ctx.peer(+1)
    if variant.direction == "bi":
        exchange(buffers.send, peer, buffers.recv, peer, ctx.group)
    elif ctx.rank == 0:
        dist.send(buffers.send, peer, group=ctx.group)
        dist.recv(buffers.recv, peer, group=ctx.group)
    else:
        dist.recv(buffers.recv, peer, group=ctx.group)
        dist.send(buffers.recv, peer, group=ctx.group)


def _expected(ctx, counts, dtype, device, variant):
    # uni: the message comes back to rank 0 and rests at rank 1; bi: each holds the peer's
    source = 0 if variant.direction == "uni" else 1 - ctx.rank
    return pattern(source, counts.recv, dtype, device)


PINGPONG = Collective(
    name="pingpong",
    redop="none",
    counts=same_count,
    in_place_offsets=same_buffer,
    launch=_launch,
    expected=_expected,
    variants=(UNI, BI),
    min_group_size=2,
    max_group_size=2,
)
