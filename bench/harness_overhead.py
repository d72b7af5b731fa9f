"""Harness overhead: commbench's reported time vs a minimal torch.distributed loop, same ranks, same run.

For each size (8 B - 64 KiB all_reduce, 2 gloo ranks) the raw loop and commbench's harness are
measured alternately, ROUNDS times each (who goes first alternates too), so drift and noise hit
both alike. The raw loop times
each iteration with perf_counter around dist.all_reduce; its figure is the median of the slowest
rank, the same aggregation commbench reports. Goal: commbench / raw <= 1.05.

    python bench/harness_overhead.py [--rounds 5] [--iters 200]
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8 << k for k in range(14)]  # 8 B .. 64 KiB


def raw_loop(numel: int, iters: int) -> float:
    buf = torch.ones(numel)
    for _ in range(2):
        dist.all_reduce(buf)
    dist.barrier()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        dist.all_reduce(buf)
        samples.append((time.perf_counter() - start) * 1e6)
    return slowest_median(statistics.median(samples))


def slowest_median(value: float) -> float:
    holder = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(holder, op=dist.ReduceOp.MAX)
    return holder.item()


def commbench_row(session, size: int, iters: int) -> float:
    from commbench.collectives import get_collective
    from commbench.collectives.base import IN_PLACE
    from commbench.measure.harness import Row, gather_to_rank0, measure, to_record

    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0, 1),), size, collective.counts(size // 4, 2, 4))
    measured = measure(session, row, IN_PLACE)  # in-place: torch's all_reduce, no extra copy
    samples = gather_to_rank0(session, measured)
    median = to_record(session, row, IN_PLACE, samples, measured).time_us if samples is not None else 0.0
    return slowest_median(median)


def worker(rank: int, port: int, rounds: int, iters: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from commbench.measure.launch import RankEnv
    from commbench.measure.options import RunConfig
    from commbench.measure.session import open_session

    cfg = RunConfig(ops=("all_reduce",), iters=iters, warmup=2, check_iters=0).validate()
    session = open_session(cfg, RankEnv(rank, 2, rank, "127.0.0.1", port, "bench"))
    results = {}
    for size in SIZES:
        raw, ours = [], []
        for round_number in range(rounds):  # alternate who goes first: neither gets the warmer slot
            if round_number % 2:
                ours.append(commbench_row(session, size, iters))
                raw.append(raw_loop(size // 4, iters))
            else:
                raw.append(raw_loop(size // 4, iters))
                ours.append(commbench_row(session, size, iters))
        results[size] = (statistics.median(raw), statistics.median(ours))
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    from commbench.measure.launch import free_port

    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(worker, args=(free_port(), args.rounds, args.iters, out), nprocs=2)
    print(f"{'size (B)':>10}  {'raw (us)':>9}  {'commbench (us)':>14}  {'ratio':>6}")
    ratios = []
    for size in SIZES:
        raw, ours = out[size]
        ratios.append(ours / raw)
        print(f"{size:>10}  {raw:9.1f}  {ours:14.1f}  {ours / raw:6.3f}")
    geo = statistics.geometric_mean(ratios)
    print(f"geometric mean ratio {geo:.3f} (goal <= 1.05); worst {max(ratios):.3f}")


if __name__ == "__main__":
    main()
