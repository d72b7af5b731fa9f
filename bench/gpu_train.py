"""gpu_check's training step: the validation GPT (bench/validation/gpt.py) trained a few steps at
each single-GPU layout of gpu_steps.LAYOUTS, beside the planner's prediction for it.

Measured per layout: the median step time over the timed steps (forward, backward and AdamW over
every micro-batch, synchronised) and torch.cuda.max_memory_allocated over those steps. Predicted:
Planner.evaluate_layout's step time and the memory ledger's allocator_peak (what
torch.cuda.max_memory_allocated reads: no CUDA context or NCCL buffers), from the processor JSON that gpu_check's
calibrate step wrote just before, execution torch-eager, precision "16" (bf16 autocast over fp32
weights and AdamW: 16 bytes a parameter). The model is frozen before its steps are measured: the
prediction is written first, from the calibration alone.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from pathlib import Path

from gpu_steps import GLOBAL_BATCH, LAYOUTS, device_and_facts, write

from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import System, load_network, load_processor
from commbench.modeling.job import EXECUTIONS, PRECISIONS, TrainingJob
from commbench.modeling.layout import parse_layout
from commbench.modeling.models import ModelSpec
from commbench.modeling.network import PresetNetwork
from commbench.modeling.planner import Planner

WARMUP_STEPS, TIMED_STEPS = 2, 5
DRY_RUN_STEPS = 1, 2  # the stand-in only shows the plumbing


def gpt_config(dry_run: bool):
    from gpt import GPTConfig

    if dry_run:
        return GPTConfig(hidden=64, layers=2, heads=4, vocab=256, seq_len=32)
    return GPTConfig(hidden=2048, layers=8, heads=16, vocab=32000, seq_len=2048)


def predictions(cfg, processor: Path, dry_run: bool) -> dict[str, dict]:
    spec = ModelSpec(
        name="validation GPT",
        hidden=cfg.hidden,
        layers=cfg.layers,
        heads=cfg.heads,
        kv_heads=cfg.heads,
        ffn_hidden=cfg.ffn,
        vocab=cfg.vocab,
        mlp="gelu",
        tied_embeddings=False,
        max_seq_len=cfg.seq_len,
    )
    network = load_network("nvlink4")  # one GPU: no collective is priced, any network will do
    system = System("this device, one GPU", load_processor(str(processor)), 1, network, network)
    # the validation GPT has no dropout; on the stand-in CPU no CUDA workspaces either
    job = TrainingJob(
        spec,
        seq_len=cfg.seq_len,
        global_batch=GLOBAL_BATCH,
        on_gpu=not dry_run,
        dropout=False,
        precision=PRECISIONS["fp32" if dry_run else "16"],
        execution=EXECUTIONS["torch-eager"],
    )
    planner = Planner(job, Cluster(1, system, PresetNetwork(system)))
    out = {}
    for name, text in LAYOUTS.items():
        result, reason = planner.evaluate_layout(parse_layout(text, 1))
        out[name] = {
            "layout": text,
            "predicted_step_s": result.step_s,
            "predicted_memory_bytes": result.memory["allocator_peak"],
            "does_not_fit": reason,
        }
    return out


def _model(cfg, device, recompute: bool):
    import torch
    from gpt import GPT
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    if recompute:  # full recomputation: each block's activations rebuilt in the backward pass
        for block in model.blocks:
            block.forward = (lambda forward: lambda x: checkpoint(forward, x, use_reentrant=False))(block.forward)
    return model


def measure_layout(cfg, device, text: str, steps: tuple[int, int]) -> dict:
    import torch
    from gpt import lm_loss

    layout = parse_layout(text, 1)
    model = _model(cfg, device, layout.recompute == "full")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    micro = GLOBAL_BATCH // layout.mbs
    tokens = torch.randint(0, cfg.vocab, (GLOBAL_BATCH, cfg.seq_len + 1), device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step():
        for chunk in tokens.split(layout.mbs):
            with autocast:
                loss = lm_loss(model(chunk[:, :-1]), chunk[:, 1:]) / micro
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    warmup, timed = steps
    for _ in range(warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    return {
        "measured_step_s": statistics.median(times),
        "step_s": times,
        "micro_batches": micro,
        "max_memory_allocated_bytes": peak,
    }


def step_train(out: Path, processor: Path, dry_run: bool) -> None:
    device, facts = device_and_facts(dry_run)
    cfg = gpt_config(dry_run)
    steps = DRY_RUN_STEPS if dry_run else (WARMUP_STEPS, TIMED_STEPS)
    layouts = predictions(cfg, processor, dry_run)  # written before any step is measured
    write(out, "train-predicted.json", {**facts, "model": cfg.to_dict(), "layouts": layouts})
    for entry in layouts.values():
        entry.update(measure_layout(cfg, device, entry["layout"], steps))
        entry["measured_over_predicted"] = entry["measured_step_s"] / entry["predicted_step_s"]
        if entry["max_memory_allocated_bytes"] and entry["predicted_memory_bytes"]:
            entry["memory_measured_over_predicted"] = (
                entry["max_memory_allocated_bytes"] / entry["predicted_memory_bytes"]
            )
    write(
        out,
        "train.json",
        {
            **facts,
            "model": cfg.to_dict(),
            "global_batch": GLOBAL_BATCH,
            "precision": "fp32 (stand-in)" if dry_run else "bf16 autocast, fp32 AdamW (planner '16')",
            "warmup_steps": steps[0],
            "timed_steps": steps[1],
            "layouts": layouts,
        },
    )
