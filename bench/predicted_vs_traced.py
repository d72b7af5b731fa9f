"""The step model's prediction for the DDP demo beside what the demo's profiler traces show.

The demo (commbench/traces/demo.py) trains a 4 x Linear(512, 512) + GELU MLP on a batch of 64
with DDP over gloo on 2 CPU ranks (1 thread each, 1 MiB buckets, SGD) and traces 3 steps.
This script measures, on this machine:
  - the collectives of 2 gloo ranks (`commbench run`); all_reduce prices the gradient buckets, the
    others are measured so that no branch of the model falls back to a preset network;
  - the compute slowdown beside an all_reduce (`commbench overlap`, read by measured_slowdown);
  - the GEMM rate of the demo's own matmul shape (64x512 @ 512x512, 1 thread) and the copy
    bandwidth, which make up the processor;
then predicts the step with the step model and event schedule (commbench/modeling/step.py, schedule.py) and prints it
beside the traced figures (commbench/traces/analysis.py, per step, averaged over the traced steps).

The simulator prices transformers, so the MLP is described as one transformer-shaped layer with
the same GEMMs: hidden 512, one head, seq_len 64 tokens = the batch, mbs 1, dp 2. Its QKV and
output projections are 2*n*h*3h + 2*n*h*h FLOPs = the four Linear layers exactly; the MLP width
and vocabulary are 1, so they add nothing; what remains approximated:
  - attention core 2*n*n*h FLOPs (3% of the GEMMs) that the MLP does not have;
  - elementwise traffic of a transformer layer (norms, residuals, rotary: about 2x the MLP's GELUs
    and bias adds) at the measured copy bandwidth;
  - 5 gradient buckets of 0.84 MB (parameters / 1 MiB, rounded up) where DDP makes 4 of ~1 MiB;
  - SGD priced as 8 bytes of memory traffic per parameter (the optimizer model has no SGD);
  - no framework cost per operator (Python, autograd, DDP hooks, the profiler itself): on a model
    this small those dominate the traced compute, and the model does not try to price them.
Run: python bench/predicted_vs_traced.py [--work DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

import torch

from commbench.commands import overlap as overlap_command
from commbench.commands import run as run_command
from commbench.data.slowdown import measured_slowdown
from commbench.measure.calibrate import HostClock
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import Processor, System, load_network
from commbench.modeling.job import Precision, TrainingJob
from commbench.modeling.layout import Layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.models import ModelSpec
from commbench.modeling.network import PresetNetwork
from commbench.modeling.schedule import simulate
from commbench.modeling.step import StepModel
from commbench.traces import demo
from commbench.traces.analysis import analyse_traces
from commbench.traces.intervals import IntervalSet

PARAMS_PER_LAYER = demo.HIDDEN * demo.HIDDEN + demo.HIDDEN


@contextlib.contextmanager
def stdout_to(path: Path):
    """Send this process's and its children's stdout (file descriptor 1) to a log file."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "a", encoding="utf-8") as log:
            os.dup2(log.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_subcommand(module, *argv: str) -> None:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    if module.main(parser.parse_args(list(argv))) != 0:
        raise SystemExit(f"{module.__name__} {' '.join(argv)} failed")


def demo_gemm_rate() -> float:
    """FLOP/s of the demo's matmul shape on one thread, as each demo rank runs it."""
    torch.set_num_threads(1)
    inputs, weight = torch.randn(demo.BATCH, demo.HIDDEN), torch.randn(demo.HIDDEN, demo.HIDDEN)
    out = torch.empty(demo.BATCH, demo.HIDDEN)
    seconds = HostClock().seconds(lambda: torch.matmul(inputs, weight, out=out), 200)
    return 2.0 * demo.BATCH * demo.HIDDEN * demo.HIDDEN / seconds


def copy_bandwidth() -> float:
    """Bytes/s read plus written by one thread copying 16 MiB."""
    source = torch.ones(4 << 20)
    target = torch.empty_like(source)
    return 2 * source.numel() * 4 / HostClock().seconds(lambda: target.copy_(source), 20)


def demo_as_job(gemm_flops: float, bandwidth: float) -> tuple[TrainingJob, Processor]:
    processor = Processor(
        name="this CPU, 1 thread",
        peak_flops=gemm_flops,
        memory_bytes=1e12,
        memory_bandwidth=bandwidth,
        gemm_curve=((1.0, 1.0), (1e18, 1.0)),  # measured at the demo's own GEMM shape: flat
        attention_efficiency=1.0,
    )
    model = ModelSpec(
        name="demo MLP as one layer",
        hidden=demo.HIDDEN,
        layers=1,
        heads=1,
        kv_heads=1,
        ffn_hidden=1,
        vocab=1,
        mlp="gelu",
        tied_embeddings=True,
        max_seq_len=demo.BATCH,
    )
    sgd_fp32 = Precision("fp32 SGD", param_bytes=4, grad_bytes=4, master_bytes=0, moment_bytes=0)
    job = TrainingJob(
        model,
        seq_len=demo.BATCH,
        global_batch=demo.WORLD_SIZE,
        precision=sgd_fp32,
        bucket_bytes=demo.BUCKET_CAP_MB * 2**20,
        on_gpu=False,
        activation_bytes=4,
    )
    return job, processor


def predict(job: TrainingJob, processor: Processor, comm_run: Path, slowdown: float) -> tuple[dict, list[str]]:
    # the fallback prices nothing when the run measured all_reduce on 2 ranks; its warnings say if it did
    fallback_network = load_network("eth-25g")
    system = System("this machine", processor, demo.WORLD_SIZE, fallback_network, fallback_network)
    cost = MeasuredNetwork(comm_run, fallback=PresetNetwork(system))
    cluster = Cluster(demo.WORLD_SIZE, system, cost, slowdown_intra=slowdown, slowdown_inter=slowdown)
    result = simulate(StepModel(job, cluster), Layout(dp=demo.WORLD_SIZE), timeline=True)
    compute = [e for e in result.timeline if e["stream"] == "pp0.compute"]
    comm = [e for e in result.timeline if e["stream"] == "pp0.dp"]
    compute_set = IntervalSet.union_of([e["start_us"] for e in compute], [e["start_us"] + e["dur_us"] for e in compute])
    comm_set = IntervalSet.union_of([e["start_us"] for e in comm], [e["start_us"] + e["dur_us"] for e in comm])
    both = (compute_set & comm_set).length
    return {
        "step_ms": result.step_s * 1e3,
        "compute_ms": compute_set.length / 1e3 + result.categories["slowdown"] * 1e3,
        "communication_ms": comm_set.length / 1e3,
        "overlap_pct": 100 * both / comm_set.length if comm_set.length else None,
        "exposed_ms": (comm_set - compute_set).length / 1e3,
        "all_reduces": len(comm),
    }, cost.warnings


def traced(work: Path) -> list[dict]:
    analysis = analyse_traces(demo.generate_demo_traces(work / "traces")).to_dict()
    figures = []
    for rank in analysis["ranks"]:
        total, steps = rank["total"], len(rank["iterations"])
        calls = sum(c["count"] for c in rank["collectives"] if c["name"].startswith("gloo:all_reduce"))
        figures.append(
            {
                "step_ms": total["duration_us"] / steps / 1e3,
                "compute_ms": total["compute_us"] / steps / 1e3,
                "communication_ms": total["communication_us"] / steps / 1e3,
                "overlap_pct": total["overlap_pct"],
                "exposed_ms": total["exposed_communication_us"] / steps / 1e3,
                "all_reduces": calls / steps,
            }
        )
    return figures


def cell(value) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def print_table(predicted: dict, ranks: list[dict]) -> None:
    rows = (
        ("step time (ms)", "step_ms"),
        ("compute (ms)", "compute_ms"),
        ("communication (ms)", "communication_ms"),
        ("overlap % (comm. hidden by compute)", "overlap_pct"),
        ("exposed communication (ms)", "exposed_ms"),
        ("all-reduces per step", "all_reduces"),
    )
    header = ["figure per step", "predicted"] + [f"traced rank {i}" for i in range(len(ranks))]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for label, key in rows:
        print("| " + " | ".join([label, cell(predicted[key])] + [cell(r[key]) for r in ranks]) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", help="folder for the measured runs and traces (default: a new temporary one)")
    work = Path(parser.parse_args().work or tempfile.mkdtemp(prefix="commbench-pvt-"))
    work.mkdir(parents=True, exist_ok=True)
    # one intra-op thread per rank, as the demo's ranks run: with more, each gloo rank's tensor copies
    # spin OpenMP threads on the shared cores and out-of-place all_reduce reads several times slower
    os.environ["OMP_NUM_THREADS"] = "1"
    with stdout_to(work / "measurements.log"):
        # 30 iterations per size: medians that one burst of other work on a shared machine does not move
        run_subcommand(
            run_command,
            "--nproc",
            "2",
            "--ops",
            "all_reduce,reduce_scatter,sendrecv",
            "-b",
            "64K",
            "-e",
            "4M",
            "--iters",
            "30",
            "--out",
            str(work),
            "--run-id",
            "collectives",
            "--no-progress",
        )
        run_subcommand(
            overlap_command,
            "--nproc",
            "2",
            "--ops",
            "all_reduce",
            "-b",
            "1M",
            "-e",
            "1M",
            "--gemm-size",
            "512",
            "--iters",
            "10",
            "--out",
            str(work),
            "--run-id",
            "overlap",
        )
        ranks = traced(work)
    slowdown = measured_slowdown(work / "overlap")
    gemm_flops, bandwidth = demo_gemm_rate(), copy_bandwidth()
    job, processor = demo_as_job(gemm_flops, bandwidth)
    predicted, warnings = predict(job, processor, work / "collectives", slowdown)
    print(
        f"measured here: GEMM {gemm_flops / 1e9:.1f} GFLOP/s (64x512 @ 512x512, 1 thread), "
        f"copy {bandwidth / 1e9:.1f} GB/s, compute slowdown beside an all_reduce {slowdown:.1%}"
    )
    print(f"measurements and traces in {work}\n")
    print_table(predicted, ranks)
    for warning in warnings:
        print(f"warning: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
