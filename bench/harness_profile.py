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
Then, with --threads, two gloo ranks (8 B in-place all_reduce on the world group, as the harness
measures a world-scope row): per op, where each thread of rank 0 spent its time, from the
kernel's /proc/self/task/*/schedstat (time on a CPU, time runnable but waiting for one, times
scheduled), for the raw loop and for the harness's timed loop (HostTimer around
op_callable's closure), alternating, ROUNDS_2RANK rounds of 400 ops each, medians over rounds.

    python bench/harness_profile.py [--threads]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from commbench.collectives import get_collective
from commbench.collectives.base import IN_PLACE, Buffers, GroupContext
from commbench.measure.launch import free_port
from commbench.measure.timing import HostTimer

LOOPS, REPEATS = 2000, 7
ROUNDS_2RANK, OPS_2RANK = 7, 400


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


def one_rank_pieces() -> None:
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
    print(f"load average {os.getloadavg()[0]:.1f}; us per call, median of {REPEATS} x {LOOPS}")
    for name, value in rows:
        print(f"  {name:<52} {value:8.2f}")
    dist.destroy_process_group()


def thread_times() -> dict[str, tuple[int, int, int]]:
    """(ns on a CPU, ns runnable but waiting, times scheduled) summed per thread name."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            values = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
        except OSError:  # the thread ended meanwhile
            continue
        for i, value in enumerate(values[:3]):
            totals[name][i] += int(value)
    return {name: (run, wait, slices) for name, (run, wait, slices) in totals.items()}


def accounted(loop) -> dict[str, float]:
    """Run `loop` (OPS_2RANK ops) and say, per op, the wall time and each thread kind's share."""
    dist.barrier()
    before, start = thread_times(), time.perf_counter()
    loop()
    wall, after = time.perf_counter() - start, thread_times()
    out = {"wall us/op": wall / OPS_2RANK * 1e6}
    for name, (run, wait, slices) in after.items():
        run0, wait0, slices0 = before.get(name, (0, 0, 0))
        if slices - slices0:
            out[f"{name} on-CPU us/op"] = (run - run0) / OPS_2RANK / 1e3
            out[f"{name} waiting us/op"] = (wait - wait0) / OPS_2RANK / 1e3
            out[f"{name} switches/op"] = (slices - slices0) / OPS_2RANK
    return out


def two_rank_worker(rank: int, port: int) -> None:
    from commbench.measure.harness import op_callable

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    tensor = torch.ones(2)
    ctx = GroupContext(group=dist.group.WORLD, rank=rank, size=2, global_ranks=(0, 1))
    session = type("S", (), {"backend": "gloo"})()
    run_op = op_callable(session, get_collective("all_reduce"), Buffers(tensor, tensor), ctx, IN_PLACE)
    timer = HostTimer(None)

    def raw() -> None:
        for _ in range(OPS_2RANK):
            start = time.perf_counter()
            dist.all_reduce(tensor)
            time.perf_counter() - start

    ways = {"raw loop": raw, "harness loop": lambda: timer.time(run_op, OPS_2RANK)}
    for way in ways.values():
        way()  # warm both up
    figures: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in ways}
    for round_number in range(ROUNDS_2RANK):
        for name in list(ways)[:: 1 if round_number % 2 else -1]:
            for key, value in accounted(ways[name]).items():
                figures[name][key].append(value)
    if rank == 0:
        print(f"\ntwo ranks, 8 B in-place all_reduce, rank 0's threads; medians of {ROUNDS_2RANK} x {OPS_2RANK} ops")
        print(f"load average {os.getloadavg()[0]:.1f}")
        keys = sorted(set(figures["raw loop"]) | set(figures["harness loop"]), key=lambda k: (k != "wall us/op", k))
        print(f"  {'':<44} {'raw loop':>10} {'harness':>10}")
        for key in keys:
            cells = [statistics.median(figures[name][key]) if figures[name][key] else float("nan") for name in ways]
            print(f"  {key:<44} {cells[0]:10.1f} {cells[1]:10.1f}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", action="store_true", help="also account two ranks' threads per op")
    args = parser.parse_args()
    one_rank_pieces()
    if args.threads:
        import torch.multiprocessing as mp

        mp.spawn(two_rank_worker, args=(free_port(),), nprocs=2)


if __name__ == "__main__":
    main()
