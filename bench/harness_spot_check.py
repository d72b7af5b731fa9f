"""Spot check of one size: the harness at run's defaults, at -n 200 -w 20, and at -w 20 alone,
against the raw loop of bench/harness_overhead.py, alternating in one pair of gloo ranks (64 B
in-place all_reduce, ROUNDS rounds). Each line: median (us) and timed count per way.

A shorter look than harness_overhead.py (seconds, not minutes), so that a loaded machine's
bursts of load are less likely to land on one side than the other.

    python bench/harness_spot_check.py
"""

import statistics
import sys
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness_overhead as ho

ROUNDS = 4


def worker(rank: int, port: int) -> None:
    from commbench.collectives import get_collective
    from commbench.collectives.base import IN_PLACE
    from commbench.measure.harness import Row, measure
    from commbench.measure.launch import RankEnv
    from commbench.measure.options import RunConfig
    from commbench.measure.session import open_session

    session = open_session(
        RunConfig(ops=("all_reduce",), check_iters=0).validate(), RankEnv(rank, 2, rank, "127.0.0.1", port, "b")
    )
    c = get_collective("all_reduce")
    row = Row("world", c, ((0, 1),), 64, c.counts(16, 2, 4))
    adaptive = session.cfg
    fixed = RunConfig(ops=("all_reduce",), check_iters=0, iters=200, warmup=20).validate()
    fixed_w = RunConfig(ops=("all_reduce",), check_iters=0, warmup=20).validate()
    for _ in range(ROUNDS):
        out = {}
        for name, cfg in (("adaptive", adaptive), ("n200w20", fixed), ("adaptive-w20", fixed_w)):
            session.cfg = cfg
            m = measure(session, row, IN_PLACE)
            out[name] = (round(statistics.median(m.values[:-1])), m.iters)
        out["raw"] = round(ho.raw_loop(16, True))
        if rank == 0:
            print(out, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    from commbench.measure.launch import free_port

    mp.spawn(worker, args=(free_port(),), nprocs=2)
