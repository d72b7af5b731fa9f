"""Harness overhead: commbench's reported time vs a minimal, warmed torch.distributed loop.

The raw loop: RAW_WARMUP untimed ops, then RAW_ITERS ops each timed by perf_counter around
dist.all_reduce (out-of-place: recv.copy_(send) first, as torch has no out-of-place all_reduce and
commbench's out-of-place variant does the same); its figure is the slowest rank's median, the
statistic commbench reports. Sizes 8 B - 64 KiB, 2 gloo ranks.

Two ways to set them side by side:
  default   in one pair of processes: for each size and variant, the raw loop and the harness
            (commbench.measure.harness.measure at `commbench run`'s defaults: adaptive warm-up,
            iterations until the median's CI is within 2% or the budget is spent) alternate,
            ROUNDS times each, who goes first alternating, so drift and noise hit both alike.
  --cli     as a user sees it: `commbench run --nproc 2 -b 8 -e 64K --ops all_reduce` at its
            defaults against this script's raw loop in its own pair of processes, alternating
            ROUNDS times; the median over rounds per size and variant.
Goal (issue 31): commbench / raw <= 1.05 as a geometric mean over sizes, no size above 1.10.

    python bench/harness_overhead.py [--rounds 5] [--cli]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8 << k for k in range(14)]  # 8 B .. 64 KiB
VARIANTS = ("in-place", "out-of-place")
RAW_WARMUP, RAW_ITERS = 20, 200


def raw_loop(numel: int, in_place: bool) -> float:
    send, recv = torch.ones(numel), torch.zeros(numel)

    def op():
        if not in_place:
            recv.copy_(send)
        dist.all_reduce(recv)

    for _ in range(RAW_WARMUP):
        op()
    dist.barrier()
    samples = []
    for _ in range(RAW_ITERS):
        start = time.perf_counter()
        op()
        samples.append((time.perf_counter() - start) * 1e6)
    return slowest(statistics.median(samples))


def slowest(value: float) -> float:
    holder = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(holder, op=dist.ReduceOp.MAX)
    return holder.item()


def harness_row(session, size: int, in_place: bool) -> float:
    from commbench.collectives import get_collective
    from commbench.collectives.base import IN_PLACE, OUT_OF_PLACE
    from commbench.measure.harness import Row, gather_to_rank0, measure, to_record

    variant = IN_PLACE if in_place else OUT_OF_PLACE
    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0, 1),), size, collective.counts(size // 4, 2, 4))
    measured = measure(session, row, variant)
    samples = gather_to_rank0(session, measured)
    median = to_record(session, row, variant, samples, measured).time_us if samples is not None else 0.0
    return slowest(median)


def _init(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)  # two ranks on a 2-core machine, as commbench's session sets it


def side_by_side(rank: int, port: int, rounds: int, out: dict) -> None:
    from commbench.measure.launch import RankEnv
    from commbench.measure.options import RunConfig
    from commbench.measure.session import open_session

    cfg = RunConfig(ops=("all_reduce",), check_iters=0).validate()  # run's defaults, unchecked as the raw loop
    session = open_session(cfg, RankEnv(rank, 2, rank, "127.0.0.1", port, "bench"))
    torch.set_num_threads(1)
    results = {}
    for size in SIZES:
        for variant in VARIANTS:
            in_place = variant == "in-place"
            raw, ours = [], []
            for round_number in range(rounds):  # alternate who goes first: neither gets the warmer slot
                first_ours = round_number % 2 == 1
                if first_ours:
                    ours.append(harness_row(session, size, in_place))
                raw.append(raw_loop(size // 4, in_place))
                if not first_ours:
                    ours.append(harness_row(session, size, in_place))
            results[(size, variant)] = (statistics.median(raw), statistics.median(ours))
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def raw_only(rank: int, port: int, out: dict) -> None:
    _init(rank, port)
    results = {(size, variant): raw_loop(size // 4, variant == "in-place") for size in SIZES for variant in VARIANTS}
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def spawn(target, *args) -> dict:
    from commbench.measure.launch import free_port

    out = mp.Manager().dict()
    mp.spawn(target, args=(free_port(), *args, out), nprocs=2)
    return dict(out)


def cli_sweep() -> dict:
    """`commbench run` at its defaults; rank 0's records, keyed like the raw loop's."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "commbench",
                "run",
                "--nproc",
                "2",
                "-b",
                "8",
                "-e",
                "64K",
                "--ops",
                "all_reduce",
                "--out",
                tmp,
                "--no-progress",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (records_file,) = Path(tmp).glob("*/records.jsonl")
        records = [json.loads(line) for line in records_file.read_text().splitlines()]
    return {(r["size_bytes"], "in-place" if r["in_place"] else "out-of-place"): r["time_us"] for r in records}


def cli_rounds(rounds: int) -> dict:
    raw, ours = {}, {}
    for round_number in range(rounds):
        order = (cli_sweep, lambda: spawn(raw_only)) if round_number % 2 else (lambda: spawn(raw_only), cli_sweep)
        for which, measure in zip(("ours", "raw") if round_number % 2 else ("raw", "ours"), order):
            for key, value in measure().items():
                (ours if which == "ours" else raw).setdefault(key, []).append(value)
        print(f"round {round_number + 1} of {rounds} done", flush=True)
    return {key: (statistics.median(raw[key]), statistics.median(ours[key])) for key in raw}


def report(results: dict) -> None:
    for variant in VARIANTS:
        print(f"\n{variant}\n{'size (B)':>10}  {'raw (us)':>9}  {'commbench (us)':>14}  {'ratio':>6}")
        ratios = []
        for size in SIZES:
            raw, ours = results[(size, variant)]
            ratios.append(ours / raw)
            print(f"{size:>10}  {raw:9.1f}  {ours:14.1f}  {ours / raw:6.3f}")
        geo = statistics.geometric_mean(ratios)
        print(f"{variant}: geometric mean ratio {geo:.3f} (goal <= 1.05); worst {max(ratios):.3f} (goal <= 1.10)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cli", action="store_true", help="commbench run at its defaults against the raw loop")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, {'CLI' if args.cli else 'in-process'}, {args.rounds} rounds")
    report(cli_rounds(args.rounds) if args.cli else spawn(side_by_side, args.rounds))


if __name__ == "__main__":
    main()
