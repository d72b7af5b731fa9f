"""When warm-up and timing stop (issue 31): the rules on synthetic sequences, then the harness's
own loop driven by a scripted clock on a one-rank gloo group, so every stop_reason and both
nccl-tests overrides (-w, -n) are seen to come out of measure() itself."""

import math
import random
from dataclasses import dataclass

import pytest
import torch
import torch.distributed as dist

from commbench.collectives import get_collective
from commbench.collectives.base import IN_PLACE
from commbench.data.schema import NodeInfo, Record
from commbench.measure import harness
from commbench.measure.harness import Row, WarmState, measure
from commbench.measure.launch import RankEnv, free_port
from commbench.measure.options import RunConfig
from commbench.measure.session import Session
from commbench.measure.timing import (
    WARMUP_LIMIT,
    WARMUP_WINDOW,
    median_ci_halfwidth,
    next_chunk,
    spent_budget,
    stop_reason,
    warmed_up,
)


def test_warm_up_waits_for_the_window_median_to_stop_falling():
    falling = [1000, 900, 800, 700, 600, 500, 400, 300, 200, 100]
    assert not warmed_up(falling)
    assert not warmed_up([100] * 9)  # fewer than two windows: not yet known
    assert warmed_up([300] * 5 + [200] * 5 + [200] * 5)
    assert warmed_up([200] * 5 + [203, 199, 201, 198, 202])  # noise within 2%
    assert not warmed_up([200] * 5 + [190] * 5)  # 5% faster: still warming up


def test_median_interval_is_tight_for_steady_times_and_wide_for_scattered_ones():
    assert median_ci_halfwidth([100.0] * 5) == math.inf  # too few samples bound a median at 95%
    assert median_ci_halfwidth([100.0] * 20) == 0.0
    rng = random.Random(0)
    steady = [100 * (1 + rng.gauss(0, 0.01)) for _ in range(200)]
    scattered = [100 * (1 + abs(rng.gauss(0, 0.5))) for _ in range(200)]
    assert median_ci_halfwidth(steady) < 0.005
    assert median_ci_halfwidth(scattered) > 0.02
    # more samples, narrower interval: n = 16 spans ranks 4..13 of the sorted 1..16
    assert median_ci_halfwidth([float(v) for v in range(1, 17)]) == pytest.approx((13 - 4) / (2 * 8.5))


def test_stop_reason_and_chunking():
    assert stop_reason(0.01, 2.0, done=3, elapsed_us=1e9, budget_ms=20, min_iters=5, max_iters=200) is None
    assert stop_reason(0.01, 2.0, done=10, elapsed_us=100, budget_ms=20, min_iters=5, max_iters=200) == "converged"
    assert stop_reason(0.05, 2.0, done=10, elapsed_us=100, budget_ms=20, min_iters=5, max_iters=200) is None
    assert stop_reason(0.05, 2.0, done=10, elapsed_us=20_000, budget_ms=20, min_iters=5, max_iters=200) == "budget"
    assert stop_reason(0.05, 2.0, done=200, elapsed_us=100, budget_ms=20, min_iters=5, max_iters=200) == "budget"
    assert next_chunk(10, 100.0, 1000.0, 20, 200) == 10  # doubles the count
    assert next_chunk(10, 100.0, 19_500.0, 20, 200) == 5  # what the budget leaves
    assert next_chunk(190, 1.0, 190.0, 20, 200) == 10  # what --max-iters leaves


class ScriptedClock:
    """Stands in for both timers: each op 'takes' the next scripted time; counts what was asked."""

    kind = "host"

    def __init__(self, times):
        self.times = iter(times)
        self.asked = []

    def time(self, op, iters):
        self.asked.append(iters)
        return [next(self.times) for _ in range(iters)]


@pytest.fixture(scope="module")
def one_rank_group():
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield port
    dist.destroy_process_group()


def _one_rank_session(cfg: RunConfig, port: int) -> Session:
    """The session of a one-rank gloo run on this host, over the fixture's process group."""
    return Session(
        cfg=cfg,
        env=RankEnv(0, 1, 0, "127.0.0.1", port, "test"),
        backend="gloo",
        device=torch.device("cpu"),
        nodes=[NodeInfo(hostname="h", node_id=0, ranks=[0], local_ranks=[0])],
    )


def _measure(port, clock, monkeypatch, warm=None, **options):
    cfg = RunConfig(ops=("all_reduce",), check_iters=0, **options).validate()
    session = _one_rank_session(cfg, port)
    monkeypatch.setattr(harness, "HostTimer", lambda wait=None: clock)
    monkeypatch.setattr(harness, "timer_for", lambda session: clock)
    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0,),), 1024, collective.counts(256, 1, 4))
    measured = measure(session, row, IN_PLACE, warm)
    return measured, session, row


@dataclass
class Script:
    warm_up: list
    timed: list

    def times(self):
        return [1000.0] + self.warm_up + self.timed  # the first call, then the rest


FALLING_THEN_FLAT = [500.0] * 5 + [300.0] * 5 + [200.0] * 5 + [200.0] * 5  # settles at the 4th window


def test_steady_times_converge_and_the_record_says_so(one_rank_group, monkeypatch):
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, [100.0] * 50).times())
    measured, session, row = _measure(one_rank_group, clock, monkeypatch)
    assert measured.warmups == 1 + 20 and clock.asked[:5] == [1, 5, 5, 5, 5]
    assert measured.stop_reason == "converged" and measured.iters == 10  # the first look is tight already
    samples = harness.gather_to_rank0(session, measured)
    record = harness.to_record(session, row, IN_PLACE, samples, measured)
    assert isinstance(record, Record) and record.stop_reason == "converged" and record.warmup == 21


def test_scattered_times_run_until_the_budget_is_spent(one_rank_group, monkeypatch):
    rng = random.Random(1)
    scattered = [rng.choice([100.0, 300.0]) for _ in range(1000)]
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, scattered).times())
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, time_budget_ms=10.0)
    assert measured.stop_reason == "budget"
    timed = sum(clock.asked[5:])
    pace = min(scattered[:timed])
    assert (
        timed == measured.iters and 10_000 <= pace * timed < 10_000 + pace * timed / 2
    )  # spent at the fastest op's pace
    # --max-iters ends it first when the budget is larger
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, scattered).times())
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, time_budget_ms=1000.0, max_iters=30)
    assert measured.stop_reason == "budget" and measured.iters == 30


def test_a_heavy_tail_of_descheduled_ops_does_not_cut_the_row_short(one_rank_group, monkeypatch):
    rng = random.Random(2)
    tailed = [10_000.0 if rng.random() < 0.2 else rng.uniform(50.0, 150.0) for _ in range(1000)]  # 20% at 10 ms
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, tailed).times())
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, time_budget_ms=10.0)
    # the samples' sum passes 10 ms within a handful of ops; at the fastest op's pace, bounded by the
    # wall time / WALL_SLACK (~416 us an op here), it takes ~24
    assert measured.stop_reason == "budget" and measured.iters >= 20


def test_a_row_costs_two_barriers_and_one_agreement_a_window_or_chunk(one_rank_group, monkeypatch):
    """Control round trips cost milliseconds each on a loaded host (bench/RESULTS.md, the sweep's
    profile): a gloo world-scope row has one barrier before its first call and one before its first
    chunk (the group is the control group), later chunks start as the last agreement ends, and
    each warm-up window agrees on whether to go on and its pace at once."""
    rng = random.Random(3)
    scattered = [rng.choice([100.0, 300.0]) for _ in range(1000)]  # never converges: several chunks
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, scattered).times())
    calls = {"barrier": 0, "agreed": 0}
    barrier, agreed = dist.barrier, harness._agreed
    monkeypatch.setattr(
        dist, "barrier", lambda *a, **k: calls.__setitem__("barrier", calls["barrier"] + 1) or barrier(*a, **k)
    )
    monkeypatch.setattr(harness, "_agreed", lambda *a: calls.__setitem__("agreed", calls["agreed"] + 1) or agreed(*a))
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, time_budget_ms=10.0)
    windows, chunks = 4, len(clock.asked) - 5  # asked: the first call, four windows, then the chunks
    assert measured.stop_reason == "budget" and chunks >= 3
    assert calls == {"barrier": 2, "agreed": 1 + windows + chunks}


def test_warm_up_is_bounded_when_times_keep_falling(one_rank_group, monkeypatch):
    falling = [10_000.0 - 50 * i for i in range(WARMUP_LIMIT - 1)]  # never settles
    clock = ScriptedClock(Script(falling, [100.0] * 50).times())
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, time_budget_ms=1e6)
    assert measured.warmups == WARMUP_LIMIT and sum(clock.asked[:-1]) == WARMUP_LIMIT


def test_nccl_tests_overrides_are_honoured(one_rank_group, monkeypatch):
    clock = ScriptedClock(Script([500.0] * 2, [100.0, 900.0] * 10).times())  # scattered: would not converge
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, warmup=3, iters=7)
    assert clock.asked == [1, 2, 7]
    assert (measured.warmups, measured.iters, measured.stop_reason) == (3, 7, "fixed")


def test_a_latency_bound_size_reuses_the_warm_up_and_the_count(one_rank_group, monkeypatch):
    warm = WarmState()
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, [100.0] * 50).times())
    _measure(one_rank_group, clock, monkeypatch, warm=warm)
    assert warm.op_time_us == 200.0 and warm.iters == 10
    # the next size's first call (250 us) is within 1.5x of the warm op time: one window, count from before
    clock = ScriptedClock([250.0] + [200.0] * WARMUP_WINDOW + [100.0] * 50)
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, warm=warm)
    assert clock.asked == [1, WARMUP_WINDOW, 10] and measured.warmups == 1 + WARMUP_WINDOW
    # a bandwidth-bound size (first call 4x slower) warms up afresh
    clock = ScriptedClock([800.0] + FALLING_THEN_FLAT + [100.0] * 50)
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, warm=warm)
    assert clock.asked[:5] == [1, 5, 5, 5, 5] and measured.warmups == 21


def test_budget_goes_at_the_fastest_ops_pace_but_wall_time_stays_bounded():
    assert spent_budget([100.0] * 10, 10) == 1000.0
    assert spent_budget([100.0] + [10_000.0] * 9, 10) == 18_020.0  # wall time / 5 where the stalls dominate
    assert spent_budget([100.0, 120.0, 1000.0], 3) == 300.0  # one slow op: still the fastest's pace


def test_gloo_measures_all_ranks_on_the_world_group(one_rank_group):
    """A second gloo group over every rank sits idle while the world group carries the control
    traffic, and on a loaded host its threads come back slow (bench/RESULTS.md, harness overhead):
    on gloo a world-scope row runs on the world group itself."""
    session = Session(
        cfg=RunConfig(ops=("all_reduce",)).validate(),
        env=RankEnv(0, 1, 0, "127.0.0.1", one_rank_group, "test"),
        backend="gloo",
        device=torch.device("cpu"),
        nodes=[NodeInfo(hostname="h", node_id=0, ranks=[0], local_ranks=[0])],
    )
    assert session.group((0,)) is dist.group.WORLD


def test_a_cold_first_call_does_not_stop_the_warm_up_being_reused(one_rank_group, monkeypatch):
    """Fresh buffers make a latency-bound size's first call 2-3x the warm time; the first window
    at the last size's pace is what says the process is still warm."""
    warm = WarmState(key=("world", "all_reduce", IN_PLACE.label), op_time_us=200.0, iters=10)
    clock = ScriptedClock([600.0] + [210.0] * WARMUP_WINDOW + [100.0] * 50)
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, warm=warm)
    assert clock.asked == [1, WARMUP_WINDOW, 10] and measured.warmups == 1 + WARMUP_WINDOW
    # another op's state predicts nothing
    warm = WarmState(key=("world", "all_gather", IN_PLACE.label), op_time_us=200.0, iters=10)
    clock = ScriptedClock([600.0] + FALLING_THEN_FLAT + [100.0] * 50)
    measured, _, _ = _measure(one_rank_group, clock, monkeypatch, warm=warm)
    assert clock.asked[:5] == [1, 5, 5, 5, 5] and measured.warmups == 21


def test_the_first_call_starts_after_a_barrier(one_rank_group, monkeypatch):
    """Rank 0 writes the last row's records while the others wait: timed without a barrier, the
    first call measured that wait (tens of ms on a loaded host), not the op."""
    events = []
    clock = ScriptedClock(Script(FALLING_THEN_FLAT, [100.0] * 50).times())
    timed = clock.time
    monkeypatch.setattr(clock, "time", lambda op, iters: events.append(iters) or timed(op, iters))
    together = harness._start_together
    monkeypatch.setattr(harness, "_start_together", lambda *a: events.append("together") or together(*a))
    _measure(one_rank_group, clock, monkeypatch)
    assert events[:2] == ["together", 1]


def test_the_first_call_is_the_rows_first_check(one_rank_group, monkeypatch):
    """-c N checks N ops on known inputs, the first call being one: no op of its own for -c 1."""
    launched = []
    make_op = harness.op_callable

    def counted(*args):
        op = make_op(*args)
        return lambda: launched.append(1) or op()

    monkeypatch.setattr(harness, "op_callable", counted)
    cfg = dict(ops=("all_reduce",), warmup=3, iters=7)
    for checks, corrupt in ((1, False), (1, True), (3, True), (0, False)):
        launched.clear()
        if corrupt:
            monkeypatch.setenv("COMMBENCH_INJECT_CORRUPTION", "0:all_reduce")
        else:
            monkeypatch.delenv("COMMBENCH_INJECT_CORRUPTION", raising=False)
        measured = _real_measure(one_rank_group, check_iters=checks, **cfg)
        assert len(launched) == 3 + 7 + max(checks - 1, 0)
        assert measured.values[-1] == (checks if corrupt else 0 if checks else -1)


def _real_measure(port, **options):
    cfg = RunConfig(**options).validate()
    session = _one_rank_session(cfg, port)
    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0,),), 1024, collective.counts(256, 1, 4))
    return measure(session, row, IN_PLACE)
