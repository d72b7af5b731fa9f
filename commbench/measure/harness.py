"""The measuring harness every driver runs on: rows, groups, buffers, warm-up, timing, checking, a Record.

For one row (an op on every group of a scope at one size) and one variant:
  1. every group of the scope allocates its buffers and fills them with known inputs;
  2. warm-up ops estimate the op time; the slowest estimate anywhere sets the iteration count;
  3. a barrier over all ranks, then one inside the group, so all groups start together;
  4. `iters` back-to-back ops, each timed (CUDA events on NCCL, host clock on gloo);
  5. untimed ops on fresh known inputs are checked on every rank (`wrong` elements);
  6. rank 0 gathers every rank's samples and reports the slowest rank's median.
Control traffic (estimates, barriers, gathers) always runs on a gloo group, so it never
disturbs the NCCL communicators under test. The drivers (sweep, pairwise, overlap) choose the
rows and what to do with each measurement; commbench.measure.runner runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from commbench.collectives import get_collective
from commbench.collectives.base import PERIOD, Buffers, Collective, Counts, GroupContext, Variant, pattern
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.samples import samples_line
from commbench.data.schema import Record
from commbench.measure.faults import corrupt_if_asked, delayed_if_asked, die_if_asked, hang_if_asked
from commbench.measure.moe import routed_rows
from commbench.measure.options import DTYPES
from commbench.measure.placement import applicable_scopes, scope_groups
from commbench.measure.session import Session
from commbench.measure.timing import CudaEventTimer, HostTimer, choose_iters


@dataclass(frozen=True)
class Row:
    """One row of a run: an op on every group of a scope at one size (a line of nccl-tests output)."""

    scope: str
    collective: Collective
    groups: tuple[tuple[int, ...], ...]
    size: int
    counts: Counts
    exchange: object = None  # all_to_allv: the routing model's commbench.measure.moe.RoutedExchange


def scope_rows(session: Session) -> list[Row]:
    """Every (scope, op, size) row of the configured ops, identical on all ranks (it decides which
    collectives they call): the rows of a sweep, and of an overlap run."""
    cfg = session.cfg
    elt = DTYPES[cfg.dtype][1]
    scopes = cfg.scopes or applicable_scopes(session.nodes)
    rows = []
    for scope in scopes:
        for op in cfg.ops:
            collective = get_collective(op)
            groups = _groups_for(collective, scope_groups(scope, session.nodes))
            if not groups:
                continue
            n = len(groups[0])
            if op == "all_to_allv":
                rows += [Row(scope, routed, groups, size, counts, exchange)
                         for routed, size, counts, exchange in routed_rows(cfg, n, elt)]
                continue
            for size in cfg.sizes():
                counts = collective.counts(size // elt, n, elt)
                if counts.param > 0:
                    rows.append(Row(scope, collective, groups, size, counts))
    return rows


def _groups_for(collective: Collective, groups: list[list[int]]) -> tuple[tuple[int, ...], ...]:
    if collective.max_group_size:
        groups = [g[: collective.max_group_size] for g in groups]
    groups = [g for g in groups if len(g) >= collective.min_group_size]
    sizes = {len(g) for g in groups}
    if len(sizes) > 1:  # uneven nodes: keep the groups of the common size so rows stay comparable
        common = max(sizes, key=lambda s: sum(len(g) == s for g in groups))
        groups = [g for g in groups if len(g) == common]
    return tuple(tuple(g) for g in groups)


def my_context(session: Session, row: Row) -> GroupContext | None:
    mine = None
    for ranks in row.groups:
        group = session.group(ranks)  # every rank takes part in creating every group
        if session.rank in ranks:
            mine = GroupContext(group=group, rank=ranks.index(session.rank), size=len(ranks), global_ranks=ranks)
    return mine


def allocate(session: Session, row: Row, variant: Variant, ctx: GroupContext) -> Buffers:
    dtype = getattr(torch, DTYPES[session.cfg.dtype][0])
    counts = row.counts
    if not variant.in_place:
        return Buffers(send=torch.empty(counts.send, dtype=dtype, device=session.device),
                       recv=torch.empty(counts.recv, dtype=dtype, device=session.device))
    whole = torch.empty(max(counts.send, counts.recv), dtype=dtype, device=session.device)
    send_at, recv_at = row.collective.in_place_offsets(counts, ctx.rank)
    return Buffers(send=whole[send_at: send_at + counts.send], recv=whole[recv_at: recv_at + counts.recv])


def fill_known_inputs(buffers: Buffers, ctx: GroupContext) -> None:
    buffers.recv.zero_()  # in-place send views live inside recv's allocation: zero first
    buffers.send.copy_(pattern(ctx.rank, buffers.send.numel(), buffers.send.dtype, buffers.send.device))


def op_callable(session: Session, collective: Collective, buffers: Buffers, ctx: GroupContext, variant: Variant):
    if collective.out_of_place_copies and not variant.in_place:
        def copy_then_op():
            buffers.recv.copy_(buffers.send)
            collective.launch(buffers, ctx, variant)
        return copy_then_op
    if variant.in_place and session.backend in collective.in_place_staged_on:
        scratch = torch.empty_like(buffers.send)

        def staged_op():
            scratch.copy_(buffers.send)
            collective.launch(Buffers(send=scratch, recv=buffers.recv), ctx, variant)
        return staged_op
    return lambda: collective.launch(buffers, ctx, variant)


# largest integer each float type holds exactly: sums of the known inputs up to it compare exactly
_EXACT_UP_TO = {torch.float64: 2 ** 53, torch.float32: 2 ** 24, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8}


def count_wrong(result: torch.Tensor, expected: torch.Tensor, group_size: int) -> int:
    largest = (PERIOD - 1) * group_size  # the largest value a sum of known inputs can reach
    if not result.dtype.is_floating_point or largest <= _EXACT_UP_TO[result.dtype]:
        return int((result != expected).sum().item())  # NaN != NaN: a NaN counts as wrong
    # beyond the mantissa the collective's summation order rounds differently from ours
    tolerance = expected.float().abs() * torch.finfo(result.dtype).eps * group_size
    ok = (result.float() - expected.float()).abs() <= tolerance
    return int((~ok).sum().item())


def check(session: Session, row: Row, variant: Variant, ctx: GroupContext, buffers: Buffers, run_op) -> int:
    wrong = 0
    for _ in range(session.cfg.check_iters):
        fill_known_inputs(buffers, ctx)
        run_op()
        session.sync()
        corrupt_if_asked(session.rank, row.collective.name, buffers.recv)
        expected = row.collective.expected(ctx, row.counts, buffers.recv.dtype, buffers.recv.device, variant)
        wrong += count_wrong(buffers.recv, expected, ctx.size)
    return wrong


def timer_for(session: Session):
    if session.device.type == "cuda":
        return CudaEventTimer(torch)
    return HostTimer(session.sync)


def _graphed(run_op):
    """Capture one op in a CUDA graph, so each iteration is one cheap graph launch."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run_op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run_op()
    return graph.replay


@dataclass(frozen=True)
class Measured:
    """One variant of one row on this rank: [samples..., wrong] (None outside every group)."""

    values: list[float] | None
    iters: int
    warmups: int


def measure(session: Session, row: Row, variant: Variant) -> Measured:
    cfg = session.cfg
    ctx = my_context(session, row)
    estimate = torch.zeros(1, dtype=torch.float64)
    if ctx is not None:
        hang_if_asked(session.rank, row.collective.name)
        die_if_asked(session.rank, row.collective.name)
        if session.monitor:  # sweeps have one; benchmarks that call measure() directly may not
            session.monitor.progress(f"{row.collective.name} {row.scope} {row.size} B {variant.label}, first call")
        buffers = allocate(session, row, variant, ctx)
        fill_known_inputs(buffers, ctx)
        run_op = op_callable(session, row.collective, buffers, ctx, variant)
        if cfg.cuda_graph and session.device.type == "cuda":
            run_op = _graphed(run_op)
        run_op = delayed_if_asked(session.rank, row.collective.name, run_op)
        estimate[0] = HostTimer(session.sync).time(run_op, 1)[0]
    dist.all_reduce(estimate, op=dist.ReduceOp.MAX)  # every group warms up and times alike
    warmups = 1
    if estimate.item() < cfg.time_budget_ms * 1000 and cfg.warmup > 1:
        # more warm-up only where one op is short: a long op has warmed everything up already
        warmups = cfg.warmup
        more = HostTimer(session.sync).time(run_op, cfg.warmup - 1) if ctx is not None else []
        estimate[0] = min([estimate.item()] + more) if ctx is not None else 0.0
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
    iters = cfg.iters or choose_iters(estimate.item(), cfg.time_budget_ms, cfg.min_iters, cfg.max_iters)
    dist.barrier()
    if ctx is None:
        return Measured(None, iters, warmups)
    dist.barrier(group=ctx.group) if session.backend == "gloo" else _device_barrier(session, ctx)
    samples = timer_for(session).time(run_op, iters)
    wrong = check(session, row, variant, ctx, buffers, run_op) if cfg.check_iters else -1
    return Measured(samples + [float(wrong)], iters, warmups)


def _device_barrier(session: Session, ctx: GroupContext) -> None:
    token = torch.zeros(1, device=session.device)
    dist.all_reduce(token, group=ctx.group)
    session.sync()


def gather_to_rank0(session: Session, measured: Measured) -> torch.Tensor | None:
    """Every rank's [samples..., wrong] as one (world, iters + 2) tensor on rank 0; column -1 says
    whether the rank took part (ranks outside every group send NaNs)."""
    iters = measured.iters
    mine = torch.full((iters + 2,), float("nan"), dtype=torch.float64)
    if measured.values is not None:
        mine[: iters + 1] = torch.tensor(measured.values, dtype=torch.float64)
        mine[-1] = 1.0
    gathered = [torch.empty_like(mine) for _ in range(session.env.world_size)] if session.rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    return torch.stack(gathered) if gathered is not None else None


def to_record(session: Session, row: Row, variant: Variant, samples: torch.Tensor, measured: Measured) -> Record:
    """The row's record from every rank's gathered samples: the slowest rank's median and spread."""
    iters = measured.iters
    members = [rank for group in row.groups for rank in group]
    divisor = 2.0 if variant.round_trip else 1.0
    per_rank = {rank: Stats.of(samples[rank, :iters].numpy() / divisor) for rank in members}
    slowest = max(members, key=lambda rank: per_rank[rank].median)
    n = len(row.groups[0])
    wrong_values = samples[members, iters]
    wrong = -1 if bool((wrong_values < 0).any()) else int(wrong_values.sum().item())
    return build_record(
        row_facts(session, row, variant, iters, measured.warmups), per_rank[slowest],
        row.collective.busbw_factor(n, variant), wrong=wrong, slowest_rank=slowest,
        time_us_mean_nccl=sum(per_rank[r].mean for r in members) / len(members),
        **(row.exchange.record_fields() if row.exchange else {}),
    )


def kept_samples(row: Row, variant: Variant, samples: torch.Tensor, measured: Measured, record: Record) -> str:
    """The record's samples.jsonl line: the reported rank's per-iteration times and every member's median."""
    iters = measured.iters
    divisor = 2.0 if variant.round_trip else 1.0
    members = [rank for group in row.groups for rank in group]
    times = (samples[record.slowest_rank, :iters] / divisor).tolist()
    medians = np.median(samples[members, :iters].numpy() / divisor, axis=1).tolist()
    return samples_line(record.model_dump(), record.slowest_rank, times, members, medians)


def row_facts(session: Session, row: Row, variant: Variant, iters: int, warmups: int, timer: str | None = None) -> RowFacts:
    """The row's columns left of the times, as nccl-tests prints them."""
    return RowFacts(
        op=row.collective.name, scope=row.scope, group_size=len(row.groups[0]), n_groups=len(row.groups),
        size_bytes=row.counts.size_bytes(DTYPES[session.cfg.dtype][1]), count=row.counts.param,
        dtype=session.cfg.dtype, redop=row.collective.redop, root=0 if row.collective.name == "broadcast" else -1,
        in_place=variant.in_place, direction=variant.direction, iters=iters, warmup=warmups,
        timer=timer or timer_for(session).kind,
    )
