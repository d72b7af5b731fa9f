"""The layouts the validation trains, as the planner writes them (no torch: the predictor imports this).

All of them run on 2 ranks, one per emulated node, and train the same global batch per step:
  ddp   dp=2, each rank one micro-batch of global_batch/2 sequences, plain DDP (zero=0)
  fsdp  the same split, ZeRO-3 (FSDP2 full sharding)
  tp    tp=2 without sequence parallelism, both ranks on the whole batch (one micro-batch)
  pp    pp=2, the batch cut into `pp_micro_batches` micro-batches, 1F1B
Added for the first out-of-sample validation (2026-12-01, runs 1 and 2; seen since: the step model
was changed after looking at them):
  ddp-accum  dp=2 with gradient accumulation: 2 micro-batches of global_batch/4 per rank, DDP's
             no_sync() on the first, the gradient all-reduce overlapping the second's backward
  pp-mb1     pp=2 with one sequence per micro-batch (global_batch micro-batches), 1F1B
Added for validation 3 (never trained before it, nor looked at while the model was changed):
  tp-accum   tp=2 with gradient accumulation: 2 micro-batches of global_batch/2 sequences
  fsdp-accum ZeRO-3 (FSDP2) with gradient accumulation: 2 micro-batches of global_batch/4 per
             rank, FSDP2's default (gathers and reduce-scatters in every micro-batch)
  pp-mb4     pp=2 with 2 micro-batches of global_batch/2 sequences (as many micro-batches as
             stages: the largest bubble 1F1B allows)
Added for the memory validation (peak allocator bytes per rank, validate_planner.py --memory):
  zero1      dp=2, ZeRO-1 (torch's ZeroRedundancyOptimizer over DDP)
  recompute  dp=2, DDP with every block checkpointed (full recompute)
  local diagnostic, not a parallel layout: each rank trains its own copy on global_batch/2
        sequences with no communication at all; the planner prices it as one rank (dp=1), which
        checks the compute side of the model alone, under the same sharing of the cores
"""

from __future__ import annotations

from dataclasses import dataclass

WORLD_SIZE = 2
PARALLEL_LAYOUTS = ("ddp", "fsdp", "tp", "pp", "ddp-accum", "pp-mb1", "tp-accum", "fsdp-accum", "pp-mb4")
# layouts no measurement of which the step model was developed on: validation 2's new ones, which
# validate_planner.py records in the work directory it measures (machine.json); the runs of the
# first out-of-sample validation recorded none, and theirs were FIRST_VALIDATION_UNSEEN
UNSEEN_LAYOUTS = ("tp-accum", "fsdp-accum", "pp-mb4")
FIRST_VALIDATION_UNSEEN = ("ddp-accum", "pp-mb1")
# the layouts whose peak memory the memory validation measures (DDP, ZeRO-1, FSDP, TP, PP, recompute
# on and off, gradient accumulation)
MEMORY_LAYOUTS = ("ddp", "zero1", "fsdp", "tp", "pp", "recompute", "ddp-accum", "pp-mb1")


@dataclass(frozen=True)
class LayoutRun:
    name: str
    planner: str  # what `commbench plan --layout` takes
    gpus: int  # ranks the planner prices it on
    global_batch: int  # sequences per step the planner prices
    mbs: int  # sequences per micro-batch on one rank
    tp: int


def layout_runs(global_batch: int, pp_micro_batches: int) -> dict[str, LayoutRun]:
    if global_batch % (2 * WORLD_SIZE) or global_batch % pp_micro_batches:
        raise ValueError(
            f"global batch {global_batch} must split over {WORLD_SIZE} ranks into 2 micro-batches "
            f"each and into {pp_micro_batches} micro-batches"
        )
    half, pp_mbs = global_batch // WORLD_SIZE, global_batch // pp_micro_batches
    runs = (
        LayoutRun("ddp", f"dp=2,mbs={half},zero=0", 2, global_batch, half, 1),
        LayoutRun("fsdp", f"dp=2,mbs={half},zero=3", 2, global_batch, half, 1),
        LayoutRun("tp", f"tp=2,dp=1,mbs={global_batch},sp=0", 2, global_batch, global_batch, 2),
        LayoutRun("pp", f"pp=2,dp=1,mbs={pp_mbs}", 2, global_batch, pp_mbs, 1),
        LayoutRun("ddp-accum", f"dp=2,mbs={half // 2},zero=0", 2, global_batch, half // 2, 1),
        LayoutRun("pp-mb1", "pp=2,dp=1,mbs=1", 2, global_batch, 1, 1),
        LayoutRun("tp-accum", f"tp=2,dp=1,mbs={half},sp=0", 2, global_batch, half, 2),
        LayoutRun("fsdp-accum", f"dp=2,mbs={half // 2},zero=3", 2, global_batch, half // 2, 1),
        LayoutRun("pp-mb4", f"pp=2,dp=1,mbs={half}", 2, global_batch, half, 1),
        LayoutRun("zero1", f"dp=2,mbs={half},zero=1", 2, global_batch, half, 1),
        LayoutRun("recompute", f"dp=2,mbs={half},zero=0,recompute=full", 2, global_batch, half, 1),
        LayoutRun("local", f"dp=1,mbs={half}", 1, half, half, 1),
    )
    return {run.name: run for run in runs}
