"""all_to_allv: every rank sends its own, possibly different, number of elements to every rank.

ALL_TO_ALLV splits evenly, as nccl-tests' src/alltoallv.cu does (count/n elements per peer).
routed(splits) is the declaration for one row of a routing model's split matrix (elements, source
rank x destination rank; commbench.measure.moe builds it from commbench.modeling.routing): every
rank allocates the busiest rank's buffers, sends the first sum(row) elements of its send buffer and
receives into the first sum(column) of its receive buffer, the rest staying zero.
size = the busiest rank's larger of send and receive bytes; count = those elements.
busbw = algbw x (n-1)/n on that size (commbench.ops). Out-of-place only, as in nccl-tests.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from commbench.collectives.base import OUT_OF_PLACE, Collective, Counts, aligned_chunk, pattern, same_buffer

Splits = tuple[tuple[int, ...], ...]  # elements sent from rank i (row) to rank j (column)


def _even(count: int, n: int, elt_size: int) -> Splits:
    chunk = aligned_chunk(count, n, elt_size)
    return tuple((chunk,) * n for _ in range(n))


def _counts(splits: Splits | None, count, n, elt_size):
    splits = splits or _even(count, n, elt_size)
    busiest = max(max(sum(row) for row in splits), max(sum(column) for column in zip(*splits)))
    return Counts(send=busiest, recv=busiest, param=busiest)


def _my_splits(splits: Splits | None, buffers, ctx) -> tuple[list[int], list[int]]:
    splits = splits or _even(buffers.send.numel(), ctx.size, buffers.send.element_size())
    return list(splits[ctx.rank]), [row[ctx.rank] for row in splits]


def _launch(splits: Splits | None, buffers, ctx, variant):
    send_splits, recv_splits = _my_splits(splits, buffers, ctx)
    dist.all_to_all_single(
        buffers.recv[: sum(recv_splits)],
        buffers.send[: sum(send_splits)],
        output_split_sizes=recv_splits,
        input_split_sizes=send_splits,
        group=ctx.group,
    )


def _expected(splits: Splits | None, ctx, counts, dtype, device, variant):
    splits = splits or _even(counts.send, ctx.size, torch.empty(0, dtype=dtype).element_size())
    # what source rank s sent me: its pattern from the end of its pieces for ranks before me
    pieces = [pattern(src, row[ctx.rank], dtype, device, start=sum(row[: ctx.rank])) for src, row in enumerate(splits)]
    received = sum(row[ctx.rank] for row in splits)
    return torch.cat(pieces + [torch.zeros(counts.recv - received, dtype=dtype, device=device)])


def routed(splits: Splits | None) -> Collective:
    """The declaration for one split matrix (None: even splits, nccl-tests' alltoallv)."""
    return Collective(
        name="all_to_allv",
        redop="none",
        counts=partial(_counts, splits),
        in_place_offsets=same_buffer,
        launch=partial(_launch, splits),
        expected=partial(_expected, splits),
        variants=(OUT_OF_PLACE,),
    )


ALL_TO_ALLV = routed(None)
