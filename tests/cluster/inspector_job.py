"""A small gloo "training job" that logs its collectives the way NCCL Inspector does (test helper).

Run one process per rank with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE set (GLOO_SOCKET_IFNAME
for cross-node runs). It calls all_reduce and all_gather (single tensor) on the world group, --calls
times per op and size, back to back as a job would (no barrier between calls), times each call on
its own rank, and appends one line per call to
`$NCCL_INSPECTOR_DUMP_DIR/<hostname>-pid<pid>.log` in Inspector's JSON format (the keys of
NVIDIA/nccl plugins/profiler/inspector/inspector_json.cc at 5067397: header, metadata, coll_perf;
message size = one rank's send buffer; busbw by Inspector's formula; whole microseconds; timing
source "collective_cpu", since there is no GPU kernel to time). Gloo has no profiler plugin, so
this stands in for Inspector; the times are real measurements of this job.

    python inspector_job.py --sizes 1M,4M --calls 50
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
import zlib
from datetime import timedelta
from pathlib import Path


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def _line(comm: dict, rank: int, op: str, sn: int, msg_bytes: int, exec_us: int) -> str:
    n = comm["n_ranks"]
    traffic = msg_bytes * n if op == "AllGather" else msg_bytes
    factor = 2 * (n - 1) / n if op == "AllReduce" else (n - 1) / n
    algbw = traffic / 1e9 / (exec_us / 1e6) if exec_us else 0.0
    return json.dumps(
        {
            "header": {
                "id": comm["id"],
                "comm_name": comm["name"],
                "rank": rank,
                "n_ranks": n,
                "nnodes": comm["nnodes"],
            },
            "metadata": {
                "inspector_output_format_version": "v4.0",
                "git_rev": "",
                "rec_mechanism": "nccl_profiler_interface",
                "dump_timestamp_us": time.time_ns() // 1000,
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
            },
            "coll_perf": {
                "coll": op,
                "coll_sn": sn,
                "coll_msg_size_bytes": msg_bytes,
                "coll_exec_time_us": exec_us,
                "coll_timing_source": "collective_cpu",
                "coll_algobw_gbs": algbw,
                "coll_busbw_gbs": algbw * factor,
            },
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1M,4M", help="commbench sizes (all_gather: the gathered output)")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--comm-name", default="DP Group 0")
    args = parser.parse_args()

    import torch
    import torch.distributed as dist

    # the call commbench's all_gather times (commbench/collectives/all_gather.py): on gloo,
    # all_gather_into_tensor is several times slower than all_gather_single where torch has it
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, n = dist.get_rank(), dist.get_world_size()
    hosts: list = [None] * n
    dist.all_gather_object(hosts, socket.gethostname())
    key = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}:{args.comm_name}"
    comm = {
        "id": f"0x{zlib.crc32(key.encode()):x}{n:02x}",
        "name": args.comm_name,
        "n_ranks": n,
        "nnodes": len(set(hosts)),
    }
    out = Path(os.environ.get("NCCL_INSPECTOR_DUMP_DIR", "nccl-inspector-unknown-jobid"))
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    sn = {"AllReduce": 0, "AllGather": 0}
    for size in [_size(s) for s in args.sizes.split(",")]:
        whole = torch.ones(size // 4, dtype=torch.float32)
        share = torch.ones(size // 4 // n, dtype=torch.float32)
        calls = {
            "AllReduce": (lambda whole=whole: dist.all_reduce(whole), size),
            "AllGather": (lambda whole=whole, share=share: all_gather(whole, share), share.numel() * 4),
        }
        for op, (call, msg_bytes) in calls.items():
            for _ in range(args.warmup):
                call()
            for _ in range(args.calls):
                start = time.perf_counter()
                call()
                sn[op] += 1
                lines.append(_line(comm, rank, op, sn[op], msg_bytes, round((time.perf_counter() - start) * 1e6)))
    with open(out / f"{socket.gethostname()}-pid{os.getpid()}.log", "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
