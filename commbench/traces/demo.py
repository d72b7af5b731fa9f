"""A real profiler trace to try `commbench trace` on: a tiny model trained with DDP over gloo.

Two CPU ranks are spawned on this machine; each trains a few steps of a small MLP under
torch.profiler with a schedule (so the trace carries ProfilerStep#N annotations) and writes its own
chrome trace, ``rank<N>.json``, into the output directory. Runs in a few seconds on two cores.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

# Profiler schedule: one step to settle DDP's first-iteration bookkeeping, one warm-up step the
# profiler discards, then the recorded steps.
WAIT_STEPS = 1
WARMUP_STEPS = 1
ACTIVE_STEPS = 3
WORLD_SIZE = 2

# Sized so that each backward pass fills several DDP buckets (so all-reduces overlap with backward
# compute) while a step stays in the tens of milliseconds on a shared CPU.
HIDDEN = 512
LAYERS = 4
BATCH = 64
BUCKET_CAP_MB = 1


def trace_path(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank{rank}.json"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _train_one_rank(rank: int, port: int, out_dir: str) -> None:
    """Runs in each spawned process: join the gloo group, train under the profiler, export."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # One intra-op thread per rank: two ranks share two cores, more threads would only contend.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    try:
        torch.manual_seed(0)
        layers = []
        for _ in range(LAYERS):
            layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU()]
        model = DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=BUCKET_CAP_MB)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        inputs = torch.randn(BATCH, HIDDEN, generator=torch.Generator().manual_seed(rank))

        schedule = torch.profiler.schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=ACTIVE_STEPS)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=schedule,
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path(out_dir, rank))),
        ) as profiler:
            for _ in range(WAIT_STEPS + WARMUP_STEPS + ACTIVE_STEPS):
                optimizer.zero_grad(set_to_none=True)
                model(inputs).square().mean().backward()
                optimizer.step()
                profiler.step()
        # Neither rank may tear the group down while the other still works (its trace export, DDP's
        # last bucket): gloo aborts the process whose peer vanished mid-operation.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def generate_demo_traces(out_dir: str | Path) -> list[Path]:
    """Train the demo model on 2 gloo ranks and return the paths of the two chrome traces."""
    import torch.multiprocessing as mp

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mp.spawn(_train_one_rank, args=(_free_port(), str(out_dir)), nprocs=WORLD_SIZE, join=True)
    return [trace_path(out_dir, rank) for rank in range(WORLD_SIZE)]
