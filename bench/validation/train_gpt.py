"""Train the small GPT with each layout and time its steps; also measure this machine's compute rates.

Launched by torchrun, one rank per emulated node (gloo, CPU, one intra-op thread per rank: the
2 ranks share the machine's 2 cores, as they do while training). For every layout, in order:
  1. `--warmup` steps (forward, backward, AdamW step), untimed;
  2. calibration, on both ranks at once (so the cores are shared as in training), by `commbench
     calibrate`'s measuring code (commbench/measure/calibrate.py) on this layout's shapes: every
     GEMM the layout runs (forward, input and weight gradient of each Linear), its attention core
     (scaled_dot_product_attention, causal, each CPU backend), the elementwise kernels over its MLP
     activation, the tiny-kernel overhead and an AdamW step. Each figure is the median of
     `--repeats` runs; the slower rank's is kept, since synchronous training goes at the pace of
     its slower rank. bench/validation/predict.py turns them into the processor JSON
     `commbench calibrate` writes (commbench/measure/processor_json.py);
  3. `--steps` timed steps; a step's time is the slowest rank's, the layout's figure the median;
  4. the calibration again.
Calibrating right before and after each layout's steps means that load from other work on the
machine, which changes from minute to minute, hits the calibration and the steps alike.

Rank 0 writes everything as JSON to --out. Run by bench/validate_planner.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's commbench
from commbench import __version__
from commbench.data.rundir import utc_now
from commbench.measure.calibrate import Grid, measure
from commbench.measure.processor_json import combine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPT, GPTConfig, lm_loss
from layouts import LayoutRun, layout_runs

LEARNING_RATE = 1e-4
CALIBRATION_PARAMS = 4 << 20  # the optimizer step timed for its rate: 16 MiB of fp32 weights


# calibration: `commbench calibrate`'s own timing code, at this layout's shapes -------------------
def gemm_shapes(cfg: GPTConfig, run: LayoutRun) -> list[tuple[int, int, int]]:
    """(M, N, K) of every GEMM one rank runs per micro-batch: for each Linear (tokens n, in k, out o;
    each block's four and the head) the forward (n, o, k), the input gradient (n, k, o) and the
    weight gradient (o, k, n)."""
    n, h, t = run.mbs * cfg.seq_len, cfg.hidden, run.tp
    linears = [(h, 3 * h // t), (h // t, h), (h, cfg.ffn // t), (cfg.ffn // t, h), (h, cfg.vocab // t)]
    return list(dict.fromkeys(shape for k, o in linears for shape in ((n, o, k), (n, k, o), (o, k, n))))


def calibration_grid(cfg: GPTConfig, run: LayoutRun, repeats: int) -> Grid:
    """This layout's GEMMs and attention core (batch folded into heads: SDPA treats both alike), the
    elementwise kernels over its MLP activation, and the optimizer step over CALIBRATION_PARAMS."""
    activation = run.mbs * cfg.seq_len * cfg.ffn // run.tp
    return Grid(
        gemm_dims=(),
        attention=((cfg.seq_len, run.mbs * cfg.heads // run.tp, cfg.head_dim),),
        elementwise_elements=max(activation, 1 << 20),
        optimizer_params=CALIBRATION_PARAMS,
        repeats=repeats,
        gemm_shapes=tuple(gemm_shapes(cfg, run)),
    )


def calibrate(cfg: GPTConfig, run: LayoutRun, repeats: int) -> dict:
    """Every rank measures at once (the cores shared as in training); the slowest rank's timings."""
    dist.barrier()
    local = measure(torch.device("cpu"), ("fp32",), calibration_grid(cfg, run, repeats))
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, local)
    return {
        **combine(ranks, statistic=max),
        "measured_at": utc_now(),
        "host": socket.gethostname(),
        "commbench": __version__,
    }


# layouts -----------------------------------------------------------------------------------
def adamw(parameters) -> torch.optim.Optimizer:
    """The fused implementation: one pass over each parameter's weights, gradient and moments, the
    memory-bound step the step model prices (the default for-loop one makes a pass per operation).
    The fused kernel takes one kind of tensor per call, so tensor parallel's sharded DTensors and its
    replicated plain tensors go in separate parameter groups."""
    from torch.distributed.tensor import DTensor

    parameters = list(parameters)
    groups = [[p for p in parameters if isinstance(p, DTensor)], [p for p in parameters if not isinstance(p, DTensor)]]
    return torch.optim.AdamW([{"params": group} for group in groups if group], lr=LEARNING_RATE, fused=True)


def batch(cfg: GPTConfig, sequences: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets; the step time does not depend on their values."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(cfg.vocab, (sequences, cfg.seq_len + 1), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def build_step(name: str, cfg: GPTConfig, run: LayoutRun):
    """A function that runs one training step of this layout on this rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same initial weights on every rank (tensor parallel splits them)

    if name in ("ddp", "local", "fsdp", "ddp-accum", "fsdp-accum", "zero1", "recompute"):
        model = GPT(cfg, recompute=name == "recompute")
        micro_batches = run.global_batch // (run.mbs * run.gpus)
        x, y = batch(cfg, run.mbs * micro_batches, seed=1 + rank)
        if name in ("ddp", "ddp-accum", "zero1", "recompute"):
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, bucket_cap_mb=25)  # PyTorch's default, as the job prices
        elif name in ("fsdp", "fsdp-accum"):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (world,))
            for block in model.blocks:
                fully_shard(block, mesh=mesh)
            fully_shard(model, mesh=mesh)
            # FSDP2 overlaps its all-gathers with compute through CUDA streams; on CPU it waits for
            # each one where it is issued unless the all-gathers are asynchronous and prefetched
            # explicitly (the next block forward, the previous one backward), as the step model's
            # ZeRO-3 assumes. Its reduce-scatters stay synchronous on CPU: FSDP2 gives no way around.
            model._set_unshard_async_op(True)
            blocks = list(model.blocks)
            for i, block in enumerate(blocks):
                block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 2])
                block.set_modules_to_backward_prefetch(blocks[i - 1 : i] if i else [])
        if name == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(
                model.parameters(), optimizer_class=torch.optim.AdamW, lr=LEARNING_RATE, fused=True
            )
        else:
            optimizer = adamw(model.parameters())

        def step():
            optimizer.zero_grad(set_to_none=True)
            for index in range(micro_batches):
                part = slice(index * run.mbs, (index + 1) * run.mbs)
                # DDP all-reduces the gradients in the last micro-batch's backward only
                last = index == micro_batches - 1 or name != "ddp-accum"
                with nullcontext() if last else model.no_sync():
                    lm_loss(model(x[part]), y[part]).backward()
            optimizer.step()

        return step

    if name in ("tp", "tp-accum"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            loss_parallel,
            parallelize_module,
        )

        mesh = init_device_mesh("cpu", (world,))
        model = GPT(cfg)
        for block in model.blocks:
            parallelize_module(
                block,
                mesh,
                {
                    "attn.qkv": ColwiseParallel(),
                    "attn.proj": RowwiseParallel(),
                    "mlp.fc1": ColwiseParallel(),
                    "mlp.fc2": RowwiseParallel(),
                },
            )
        parallelize_module(model, mesh, {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
        optimizer = adamw(model.parameters())
        x, y = batch(cfg, run.global_batch, seed=1)  # both ranks work on the same sequences

        def step():
            optimizer.zero_grad(set_to_none=True)
            for start in range(0, run.global_batch, run.mbs):
                with loss_parallel():
                    lm_loss(model(x[start : start + run.mbs]), y[start : start + run.mbs]).backward()
            optimizer.step()

        return step

    if name in ("pp", "pp-mb1", "pp-mb4"):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        stage_model = GPT(cfg, first=rank == 0, last=rank == world - 1, blocks=cfg.layers // world)
        stage = PipelineStage(stage_model, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, n_microbatches=run.global_batch // run.mbs, loss_fn=lm_loss)
        optimizer = adamw(stage_model.parameters())
        x, y = batch(cfg, run.global_batch, seed=1)

        def step():
            optimizer.zero_grad(set_to_none=True)
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y)
            optimizer.step()

        return step

    raise ValueError(f"unknown layout {name!r}")


def peak_memory(name: str, cfg: GPTConfig, run: LayoutRun, steps: int) -> dict:
    """This rank's CPU allocator from before the model is built through `steps` training steps (the
    first allocates the optimizer state), read from torch.profiler's memory events (every
    allocation and free the profiled thread makes through torch's allocator): the peak of the bytes
    allocated, which torch.cuda.max_memory_allocated would read on a GPU, and the bytes still
    allocated at the end (weights, gradients, optimizer state, buffers)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step = build_step(name, cfg, run)
        for _ in range(steps):
            step()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return {"peak_bytes": peak, "end_bytes": current, "allocations": sum(n > 0 for _, n in events)}


def measure_memory(args, cfg: GPTConfig, runs: dict[str, LayoutRun]) -> dict:
    """Every rank's peak for each layout, one layout after the other in fresh models."""
    results = {}
    for name in args.layouts.split(","):
        local = peak_memory(name, cfg, runs[name], args.memory_steps)
        ranks = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, local)
        results[name] = {"planner_layout": runs[name].planner, "ranks": ranks}
        if dist.get_rank() == 0:
            print(
                f"layout {name}: peak "
                + ", ".join(f"rank {r} {m['peak_bytes'] / 1e6:.1f} MB" for r, m in enumerate(ranks)),
                flush=True,
            )
        dist.barrier()
    return results


def time_steps(step, steps: int) -> list[float]:
    """Seconds of each timed step, the slowest rank's."""
    local = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        local.append(time.perf_counter() - start)
    ranks = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, local)
    return [max(per_rank) for per_rank in zip(*ranks)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--layouts",
        default="ddp,fsdp,tp,pp,local",
        help="comma-separated: ddp, fsdp, tp, pp, ddp-accum, pp-mb1, tp-accum, fsdp-accum, pp-mb4, "
        "zero1, recompute, local",
    )
    parser.add_argument("--hidden", type=int, default=GPTConfig.hidden)
    parser.add_argument("--layers", type=int, default=GPTConfig.layers)
    parser.add_argument("--heads", type=int, default=GPTConfig.heads)
    parser.add_argument("--vocab", type=int, default=GPTConfig.vocab)
    parser.add_argument("--seq-len", type=int, default=GPTConfig.seq_len)
    parser.add_argument("--global-batch", type=int, default=8, help="sequences per step")
    parser.add_argument("--pp-micro-batches", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each calibration kernel")
    parser.add_argument("--out", required=True, help="JSON file rank 0 writes")
    parser.add_argument(
        "--memory", action="store_true", help="measure each layout's peak allocator bytes per rank instead of timing it"
    )
    parser.add_argument("--memory-steps", type=int, default=2, help="training steps the memory is measured over")
    args = parser.parse_args()

    torch.set_num_threads(1)  # one core's worth per rank: 2 ranks on the 2 cores
    dist.init_process_group("gloo")
    cfg = GPTConfig(args.hidden, args.layers, args.heads, args.vocab, args.seq_len)
    runs = layout_runs(args.global_batch, args.pp_micro_batches)
    if args.memory:
        memory = measure_memory(args, cfg, runs)
        if dist.get_rank() == 0:
            Path(args.out).write_text(
                json.dumps(
                    {
                        "model": cfg.to_dict(),
                        "global_batch": args.global_batch,
                        "pp_micro_batches": args.pp_micro_batches,
                        "steps": args.memory_steps,
                        "world_size": dist.get_world_size(),
                        "torch": torch.__version__,
                        "optimizer": f"AdamW lr={LEARNING_RATE}, fused, fp32",
                        "measured_at": utc_now(),
                        "host": socket.gethostname(),
                        "layouts": memory,
                    },
                    indent=1,
                )
            )
        dist.destroy_process_group()
        return 0
    results = {}
    for name in args.layouts.split(","):
        run = runs[name]
        load_before = os.getloadavg()[0]
        step = build_step(name, cfg, run)
        for _ in range(args.warmup):
            step()
        before = calibrate(cfg, run, args.repeats)
        step_s = time_steps(step, args.steps)
        calibrations = [before, calibrate(cfg, run, args.repeats)]
        results[name] = {
            "planner_layout": run.planner,
            "step_s": step_s,
            "median_step_s": statistics.median(step_s),
            "calibrations": calibrations,
            "load_average": [load_before, os.getloadavg()[0]],
        }
        if dist.get_rank() == 0:
            print(
                f"layout {name}: median step {results[name]['median_step_s']:.3f} s over {len(step_s)} steps "
                f"(load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        dist.barrier()
    if dist.get_rank() == 0:
        Path(args.out).write_text(
            json.dumps(
                {
                    "model": cfg.to_dict(),
                    "global_batch": args.global_batch,
                    "pp_micro_batches": args.pp_micro_batches,
                    "warmup": args.warmup,
                    "steps": args.steps,
                    "world_size": dist.get_world_size(),
                    "torch": torch.__version__,
                    "optimizer": f"AdamW lr={LEARNING_RATE}, fused, fp32",
                    "layouts": results,
                },
                indent=1,
            )
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
