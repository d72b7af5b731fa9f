"""Where the harness's per-iteration microseconds go: each piece of its timed loop, timed alone.

One process, a one-rank gloo group (so a collective call costs its dispatch, not a transfer);
every figure is the median over REPEATS runs of LOOPS calls, in microseconds per call:
  - the raw loop's own cost per iteration (two perf_counter reads and a store) around a no-op;
  - the harness's HostTimer around the same no-op: as it was (a no-op sync call per iteration)
    and as it is (no sync call on CPU);
  - the closures: op_callable's lambda -> Collective.launch -> dist.all_reduce, against calling
    dist.all_reduce directly, on the default group and on a new_group (the harness's);
  - the out-of-place variant's recv.copy_(send) at 8 B and 64 KiB;
  - the control-group round trip the adaptive loop adds per chunk (an all_reduce of two float64s).
    python bench/harness_profile.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commbench.collectives import get_collective
from commbench.collectives.base import IN_PLACE, Buffers, GroupContext
from commbench.measure.launch import free_port
from commbench.measure.timing import HostTimer

LOOPS, REPEATS = 2000, 7


def per_call_us(fn) -> float:
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(LOOPS):
            fn()
        runs.append((time.perf_counter() - start) / LOOPS * 1e6)
    return statistics.median(runs)


def raw_timing_overhead() -> float:
    samples = []

    def one():
        start = time.perf_counter()
        samples.append(time.perf_counter() - start)

    return per_call_us(one)


def timer_overhead(sync) -> float:
    timer = HostTimer(sync)
    return per_call_us(lambda: timer.time(lambda: None, 1)) - per_call_us(lambda: None)


def main() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    group = dist.new_group([0])
    collective = get_collective("all_reduce")
    small, large = torch.ones(2), torch.ones(16384)
    ctx = GroupContext(group=group, rank=0, size=1, global_ranks=(0,))
    via_harness = (lambda buffers: lambda: collective.launch(buffers, ctx, IN_PLACE))(Buffers(small, small))
    send, recv = torch.ones(16384), torch.zeros(16384)
    control = torch.zeros(2, dtype=torch.float64)
    rows = [
        ("raw loop: perf_counter x2 + store, per iteration", raw_timing_overhead()),
        ("HostTimer with a no-op sync call (before)", timer_overhead(lambda: None)),
        ("HostTimer without it (now, CPU)", timer_overhead(None)),
        ("dist.all_reduce(8 B), default group, direct", per_call_us(lambda: dist.all_reduce(small))),
        ("dist.all_reduce(8 B), new_group, direct", per_call_us(lambda: dist.all_reduce(small, group=group))),
        ("harness closure -> launch -> all_reduce(8 B)", per_call_us(via_harness)),
        ("all_reduce(64 KiB), new_group, direct", per_call_us(lambda: dist.all_reduce(large, group=group))),
        ("out-of-place copy_ 8 B", per_call_us(lambda: small.copy_(small))),
        ("out-of-place copy_ 64 KiB", per_call_us(lambda: recv.copy_(send))),
        ("control all_reduce of 2 float64 (once per chunk)", per_call_us(lambda: dist.all_reduce(control))),
    ]
    print(f"load average {__import__('os').getloadavg()[0]:.1f}; us per call, median of {REPEATS} x {LOOPS}")
    for name, value in rows:
        print(f"  {name:<52} {value:8.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
