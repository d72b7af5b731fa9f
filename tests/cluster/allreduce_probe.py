"""A plain gloo all_reduce timing, used to check the emulated cluster itself (not the benchmark).

Run one process per rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE set (and
GLOO_SOCKET_IFNAME for cross-node runs). Rank 0 prints one JSON line per size:
{"bytes", "median_s", "busbw_GBps", "host"}; busbw = bytes/time x 2(n-1)/n (GB = 1e9 B).

    python allreduce_probe.py --sizes 16M,64M --iters 3
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from datetime import timedelta


def _size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16M,64M")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=a.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    for size in [_size(s) for s in a.sizes.split(",")]:
        t = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(a.warmup):
            dist.all_reduce(t)
        times = []
        for _ in range(a.iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        # the slowest rank defines the collective's time
        tt = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        med = statistics.median(tt.tolist())
        if rank == 0:
            print(
                json.dumps(
                    {
                        "bytes": size,
                        "median_s": med,
                        "busbw_GBps": size / med * 2 * (n - 1) / n / 1e9,
                        "host": socket.gethostname(),
                        "world": n,
                    }
                ),
                flush=True,
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
