"""The measuring harness every driver runs on: rows, groups, buffers, warm-up, timing, checking, a Record.

For one row (an op on every group of a scope at one size) and one variant:
  1. every group of the scope takes its buffers (views of the session's, reused row to row) and
     fills them with known inputs;
  2. the first call, after a barrier, on those inputs: timed, and its result checked on every
     rank (`wrong` elements), the row's first correctness check;
  3. warm-up until the per-op time stops falling on every rank (or -w ops); a sweep's WarmState
     lets a latency-bound size reuse the previous size's warm-up and timed count;
  4. a barrier over all ranks, then one inside the group (where it is another), so all groups
     start together; later chunks start as the last chunk's agreement over every rank ends;
  5. back-to-back timed ops (CUDA events on NCCL, host clock on gloo), in chunks, until every
     rank's median is known within --ci-pct or the budget is spent (or -n ops); the record's
     stop_reason says which (commbench.measure.timing holds the rules);
  6. -c N > 1: N - 1 more untimed ops on fresh known inputs are checked;
  7. rank 0 gathers every rank's samples and reports the slowest rank's median.
Control traffic (estimates, barriers, gathers) always runs on a gloo group, so it never
disturbs the NCCL communicators under test. The drivers (sweep, pairwise, overlap) choose the
rows and what to do with each measurement; commbench.measure.runner runs them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from commbench.collectives import get_collective
from commbench.collectives.base import (
    PERIOD,
    Buffers,
    Collective,
    Counts,
    GroupContext,
    Variant,
    pattern,
)
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.samples import samples_line
from commbench.data.schema import Record
from commbench.dtypes import DTYPES
from commbench.measure.faults import corrupt_if_asked, delayed_if_asked, die_if_asked, hang_if_asked
from commbench.measure.moe import routed_rows
from commbench.measure.placement import applicable_scopes, scope_groups
from commbench.measure.session import Session
from commbench.measure.timing import (
    FIRST_CHUNK_MIN,
    WARMUP_LIMIT,
    WARMUP_WINDOW,
    CudaEventTimer,
    HostTimer,
    choose_iters,
    median_ci_halfwidth,
    next_chunk,
    spent_budget,
    stop_reason,
    warmed_up,
)


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
    elt = DTYPES[cfg.dtype].bytes
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
                rows += [
                    Row(scope, routed, groups, size, counts, exchange)
                    for routed, size, counts, exchange in routed_rows(cfg, n, elt)
                ]
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
    dtype = getattr(torch, DTYPES[session.cfg.dtype].torch)
    counts = row.counts
    if not variant.in_place:
        return Buffers(send=session.buffer("send", counts.send, dtype), recv=session.buffer("recv", counts.recv, dtype))
    whole = session.buffer("recv", max(counts.send, counts.recv), dtype)
    send_at, recv_at = row.collective.in_place_offsets(counts, ctx.rank)
    return Buffers(send=whole[send_at : send_at + counts.send], recv=whole[recv_at : recv_at + counts.recv])


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
        scratch = session.buffer("scratch", buffers.send.numel(), buffers.send.dtype)

        def staged_op():
            scratch.copy_(buffers.send)
            collective.launch(Buffers(send=scratch, recv=buffers.recv), ctx, variant)

        return staged_op
    return lambda: collective.launch(buffers, ctx, variant)


# largest integer each float type holds exactly: sums of the known inputs up to it compare exactly
_EXACT_UP_TO = {torch.float64: 2**53, torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8}


def count_wrong(result: torch.Tensor, expected: torch.Tensor, group_size: int) -> int:
    largest = (PERIOD - 1) * group_size  # the largest value a sum of known inputs can reach
    if not result.dtype.is_floating_point or largest <= _EXACT_UP_TO[result.dtype]:
        if torch.equal(result, expected):  # one pass, no temporaries: the answer nearly every row
            return 0
        return int(torch.count_nonzero(result != expected).item())  # NaN != NaN: a NaN counts as wrong
    # beyond the mantissa the collective's summation order rounds differently from ours
    tolerance = expected.float().abs() * torch.finfo(result.dtype).eps * group_size
    ok = (result.float() - expected.float()).abs() <= tolerance
    return int((~ok).sum().item())


def check(
    session: Session, row: Row, variant: Variant, ctx: GroupContext, buffers: Buffers, run_op, times: int | None = None
) -> int:
    """Wrong elements over `times` (default -c) ops, each on fresh known inputs."""
    wrong = 0
    for _ in range(session.cfg.check_iters if times is None else times):
        fill_known_inputs(buffers, ctx)
        run_op()
        wrong += wrong_in_result(session, row, variant, ctx, buffers)
    return wrong


def wrong_in_result(session: Session, row: Row, variant: Variant, ctx: GroupContext, buffers: Buffers) -> int:
    """Wrong elements in the result of the op just run on known inputs."""
    session.sync()
    corrupt_if_asked(session.rank, row.collective.name, buffers.recv)
    expected = row.collective.expected(ctx, row.counts, buffers.recv.dtype, buffers.recv.device, variant)
    return count_wrong(buffers.recv, expected, ctx.size)


def timer_for(session: Session):
    if session.device.type == "cuda":
        return CudaEventTimer(torch)
    return HostTimer(session.op_wait)


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
    stop_reason: str = "fixed"  # converged / budget / fixed (commbench.measure.timing)
    op_time_us: float = 0.0  # the warmed-up per-op time every rank agreed on


@dataclass
class WarmState:
    """What a sweep carries from one size to the next of the same op, variant and scope: the
    warmed-up op time and the timed count the last row stopped at. While the op is latency-bound
    (the first warm-up window's median no slower than LATENCY_BOUND x that time) the process is
    still warm, so that one window does, and the last count is where timing starts instead of
    re-estimating. The window decides, not the first call: on fresh buffers that call is 2-3x the
    warm time even where the size changes nothing."""

    key: tuple | None = None
    op_time_us: float = 0.0
    iters: int = 0

    def reference_us(self, key: tuple) -> float:
        """The last size's warmed-up op time when it was this op, variant and scope, else 0."""
        return self.op_time_us if key == self.key else 0.0

    def remember(self, key: tuple, measured: Measured) -> None:
        self.key, self.op_time_us, self.iters = key, measured.op_time_us, measured.iters


LATENCY_BOUND = 1.5


def latency_bound(window_us: list[float], reference_us: float) -> bool:
    """Whether the first warm-up window runs at the last size's warm pace (within LATENCY_BOUND)."""
    return bool(window_us) and reference_us > 0 and statistics.median(window_us) <= LATENCY_BOUND * reference_us


def _agreed(values: list[float], op=dist.ReduceOp.MAX) -> list[float]:
    """Every rank's values reduced over the (gloo) control group: all ranks then decide alike."""
    holder = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(holder, op=op)
    return holder.tolist()


def _prepared_op(session: Session, row: Row, variant: Variant, ctx: GroupContext):
    """The buffers on known inputs and the callable one iteration runs."""
    hang_if_asked(session.rank, row.collective.name)
    die_if_asked(session.rank, row.collective.name)
    if session.monitor:  # sweeps have one; benchmarks that call measure() directly may not
        session.monitor.progress(f"{row.collective.name} {row.scope} {row.size} B {variant.label}, first call")
    buffers = allocate(session, row, variant, ctx)
    run_op = op_callable(session, row.collective, buffers, ctx, variant)
    if session.cfg.cuda_graph and session.device.type == "cuda":
        run_op = _graphed(run_op)  # runs the op once: fill afterwards, so the first call is checkable
    fill_known_inputs(buffers, ctx)
    return buffers, delayed_if_asked(session.rank, row.collective.name, run_op)


def measure(session: Session, row: Row, variant: Variant, warm: WarmState | None = None) -> Measured:
    """Warm up, time and check one variant of one row on every rank (see the module's steps)."""
    ctx = my_context(session, row)
    buffers, run_op = _prepared_op(session, row, variant, ctx) if ctx is not None else (None, None)
    first, wrong = _first_call(session, row, variant, ctx, buffers, run_op)
    key = (row.scope, row.collective.name, variant.label)
    reference = warm.reference_us(key) if warm is not None else 0.0
    warmups, op_time, reused = _warm_up(session, run_op if ctx is not None else None, first, reference)
    samples, iters, reason = _timed(session, ctx, run_op, op_time, warm.iters if reused else 0)
    if ctx is None:
        measured = Measured(None, iters, warmups, reason, op_time)
    else:
        if session.cfg.check_iters > 1:
            wrong += check(session, row, variant, ctx, buffers, run_op, session.cfg.check_iters - 1)
        measured = Measured(samples + [float(wrong)], iters, warmups, reason, op_time)
    if warm is not None:
        warm.remember(key, measured)
    return measured


def _first_call(
    session: Session, row: Row, variant: Variant, ctx: GroupContext | None, buffers: Buffers | None, run_op
) -> tuple[float, int]:
    """(the agreed time of the row's first op, its wrong elements; -1 unchecked). After a barrier,
    so the time is the op's and not a wait for a rank still busy with the last row's records
    (rank 0 writing them took tens of ms on a loaded host, which made a latency-bound op look
    bandwidth-bound). The op runs on the known inputs _prepared_op left and is the row's first
    correctness check (-c counts it): checking costs no op of its own, as the fresh-input op
    nccl-tests runs after its timed loop does."""
    _start_together(session, ctx)
    mine = HostTimer(session.op_wait).time(run_op, 1)[0] if ctx is not None else 0.0
    checked = ctx is not None and session.cfg.check_iters > 0
    wrong = wrong_in_result(session, row, variant, ctx, buffers) if checked else -1
    return _agreed([mine])[0], wrong


def _warm_up(session: Session, run_op, first_us: float, reference_us: float) -> tuple[int, float, bool]:
    """(warm-up ops run, the agreed per-op time after them, whether the last size's warm-up and
    count were reused). -w runs exactly that many (the first call is one); else windows of
    WARMUP_WINDOW ops until every rank's time stops falling, at most WARMUP_LIMIT ops or the time
    budget, or one window where every rank runs it at the last size's warm pace (`reference_us`,
    WarmState). A long op warms everything up in one call."""
    cfg, host = session.cfg, HostTimer(session.op_wait)
    if cfg.warmup is not None:
        more = host.time(run_op, cfg.warmup - 1) if run_op is not None and cfg.warmup > 1 else []
        return max(cfg.warmup, 1), _agreed([min([first_us] + more) if run_op is not None else 0.0])[0], False
    budget_us = cfg.time_budget_ms * 1000.0
    if first_us >= budget_us:
        return 1, first_us, False
    times, count, reused = [first_us], 1, False
    while True:
        size = min(WARMUP_WINDOW, WARMUP_LIMIT - count)
        window = host.time(run_op, size) if run_op is not None else []
        times += window
        count += size
        # a rank outside every group runs nothing and vetoes nothing
        warm_pace = run_op is None or (count == 1 + WARMUP_WINDOW and latency_bound(window, reference_us))
        settled = warm_pace or warmed_up(times)
        spent_here = spent_budget(times, count) if run_op is not None else 0.0  # as _timed counts it
        recent = statistics.median(times[-WARMUP_WINDOW:]) if run_op is not None else 0.0
        # one round trip a window: whether to go on, and the pace the last one would leave
        not_settled, spent, not_warm_pace, pace = _agreed(
            [0.0 if settled else 1.0, spent_here, 0.0 if warm_pace else 1.0, recent]
        )
        reused = count == 1 + WARMUP_WINDOW and reference_us > 0 and not not_warm_pace
        if not not_settled or count >= WARMUP_LIMIT or spent >= budget_us:
            return count, pace, reused


def _timed(
    session: Session, ctx: GroupContext | None, run_op, op_time_us: float, predicted: int
) -> tuple[list[float], int, str]:
    """(this rank's samples, the agreed count, why it stopped): -n's count, else chunks until the
    slowest-converging rank's median is within --ci-pct or the budget is spent."""
    cfg, timer = session.cfg, timer_for(session)
    if cfg.iters:
        _start_together(session, ctx)
        return (timer.time(run_op, cfg.iters) if ctx is not None else []), cfg.iters, "fixed"
    opening = predicted or min(FIRST_CHUNK_MIN, choose_iters(op_time_us, cfg.time_budget_ms, 1, cfg.max_iters))
    chunk = max(cfg.min_iters, min(opening, cfg.max_iters))
    samples: list[float] = []
    done = 0
    _start_together(session, ctx)
    while True:
        # later chunks start as the last chunk's agreement (an all_reduce over every rank) ends
        if ctx is not None:
            samples += timer.time(run_op, chunk)
        done += chunk
        mine = [median_ci_halfwidth(samples), spent_budget(samples, done)] if ctx is not None else [0.0, 0.0]
        halfwidth, elapsed = _agreed(mine)
        reason = stop_reason(halfwidth, cfg.ci_pct, done, elapsed, cfg.time_budget_ms, cfg.min_iters, cfg.max_iters)
        chunk = next_chunk(done, elapsed / done, elapsed, cfg.time_budget_ms, cfg.max_iters)
        if reason or not chunk:
            return samples, done, reason or "budget"


def _start_together(session: Session, ctx: GroupContext | None) -> None:
    """A barrier over all ranks, then one inside the group, so all groups start together."""
    dist.barrier()
    if ctx is None or (session.backend == "gloo" and ctx.group is dist.group.WORLD):
        return  # gloo's world group is the control group: the barrier above was on it
    dist.barrier(group=ctx.group) if session.backend == "gloo" else _device_barrier(session, ctx)


def _device_barrier(session: Session, ctx: GroupContext) -> None:
    token = torch.zeros(1, device=session.device)
    dist.all_reduce(token, group=ctx.group)
    session.sync()


def gather_rows(session: Session, mine: torch.Tensor) -> torch.Tensor | None:
    """Every rank's 1-d float64 tensor (all of one length) as one (world, length) tensor on rank 0,
    over the control group; None on the other ranks. Every driver gathers through here."""
    gathered = [torch.empty_like(mine) for _ in range(session.env.world_size)] if session.rank == 0 else None
    dist.gather(mine, gathered, dst=0)
    return torch.stack(gathered) if gathered is not None else None


def gather_to_rank0(session: Session, measured: Measured) -> torch.Tensor | None:
    """Every rank's [samples..., wrong] as one (world, iters + 2) tensor on rank 0; column -1 says
    whether the rank took part (ranks outside every group send NaNs)."""
    iters = measured.iters
    mine = torch.full((iters + 2,), float("nan"), dtype=torch.float64)
    if measured.values is not None:
        mine[: iters + 1] = torch.tensor(measured.values, dtype=torch.float64)
        mine[-1] = 1.0
    return gather_rows(session, mine)


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
        row_facts(session, row, variant, iters, measured.warmups, stop_reason=measured.stop_reason),
        per_rank[slowest],
        row.collective.busbw_factor(n, variant),
        wrong=wrong,
        slowest_rank=slowest,
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


def row_facts(
    session: Session,
    row: Row,
    variant: Variant,
    iters: int,
    warmups: int,
    timer: str | None = None,
    stop_reason: str = "fixed",
) -> RowFacts:
    """The row's columns left of the times, as nccl-tests prints them."""
    return RowFacts(
        op=row.collective.name,
        scope=row.scope,
        group_size=len(row.groups[0]),
        n_groups=len(row.groups),
        size_bytes=row.counts.size_bytes(DTYPES[session.cfg.dtype].bytes),
        count=row.counts.param,
        dtype=session.cfg.dtype,
        redop=row.collective.redop,
        root=row.collective.root,
        in_place=variant.in_place,
        direction=variant.direction,
        iters=iters,
        warmup=warmups,
        timer=timer or timer_for(session).kind,
        stop_reason=stop_reason,
    )
