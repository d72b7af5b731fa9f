"""The Python steps of bench/gpu_check.sh that no commbench command covers: an FP8 GEMM, a small
GPT trained at four single-GPU layouts against the planner's prediction, host-timer vs CUDA-event
agreement, and the folder's summary. Each writes one JSON file into --out.

On a CUDA device they measure; with --dry-run they run the same code on the CPU (a stand-in
device, tiny shapes) so that CI exercises every step's plumbing, and every file they write says
`"dry_run": true` and names the stand-in, so no CPU figure can pass for a GPU one.

    python bench/gpu_steps.py fp8     --out DIR [--dry-run]
    python bench/gpu_steps.py train   --out DIR --processor DIR/processor.json [--dry-run]
    python bench/gpu_steps.py timers  --out DIR [--dry-run]
    python bench/gpu_steps.py summary --out DIR [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench" / "validation"))

from commbench.data.rundir import utc_now  # noqa: E402

# The single-GPU layouts trained: gradient accumulation and full recomputation change the step's
# time and its activation memory, which is what the planner must get right on one GPU.
LAYOUTS = {
    "mbs8": "dp=1,mbs=8",
    "mbs4-accum2": "dp=1,mbs=4",
    "mbs2-accum4": "dp=1,mbs=2",
    "mbs8-recompute": "dp=1,mbs=8,recompute=full",
}
GLOBAL_BATCH = 8


def device_and_facts(dry_run: bool):
    import torch

    if dry_run or not torch.cuda.is_available():
        if not dry_run:
            raise SystemExit("no CUDA device: run with --dry-run to exercise the plumbing on the CPU")
        return torch.device("cpu"), {"device": "stand-in: CPU (--dry-run)", "dry_run": True}
    return torch.device("cuda"), {
        "device": torch.cuda.get_device_name(0),
        "dry_run": False,
        "capability": list(torch.cuda.get_device_capability(0)),
    }


def write(out: Path, name: str, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps({"measured_at": utc_now(), "host": platform.node(), **data}, indent=1) + "\n")
    print(f"{name}: {json.dumps(data)[:300]}")


def host_seconds(work, sync, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        sync()
        times.append(time.perf_counter() - start)
    return times


def step_fp8(out: Path, dry_run: bool) -> None:
    """An FP8 (e4m3) GEMM through torch._scaled_mm where the device has FP8 (compute capability >= 8.9)."""
    import torch

    device, facts = device_and_facts(dry_run)
    if facts.get("capability", [0, 0]) < [8, 9] or not hasattr(torch, "float8_e4m3fn"):
        write(out, "fp8.json", {**facts, "available": False, "why": "no FP8 GEMM on this device"})
        return
    results = []
    for n in (4096, 8192):
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device=device)

        def gemm(a=a, b=b, one=one):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        gemm()
        seconds = statistics.median(_event_seconds(gemm, 10))
        results.append({"m": n, "n": n, "k": n, "seconds": seconds, "tflops": 2 * n**3 / seconds / 1e12})
    write(
        out,
        "fp8.json",
        {
            **facts,
            "available": True,
            "gemms": results,
            "how": "torch._scaled_mm e4m3 x e4m3 -> bf16, unit scales, median of 10 CUDA-event timings",
        },
    )


def _event_seconds(work, repeats: int) -> list[float]:
    import torch

    marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in marks:
        start.record()
        work()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in marks]


def step_timers(out: Path, dry_run: bool) -> None:
    """The same op timed by the host clock (synchronising after each) and by CUDA events."""
    import torch

    device, facts = device_and_facts(dry_run)
    n = 256 if dry_run else 8192
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)

    def gemm():
        torch.matmul(a, b)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gemm()
    sync()
    host = statistics.median(host_seconds(gemm, sync, 20))
    if device.type == "cuda":
        event, how = statistics.median(_event_seconds(gemm, 20)), "CUDA events around each op"
    else:  # the stand-in has no events: a second host timing, so only the plumbing is shown
        event, how = (
            statistics.median(host_seconds(gemm, sync, 20)),
            "stand-in: host clock again (no CUDA events on CPU)",
        )
    write(
        out,
        "timers.json",
        {
            **facts,
            "op": f"fp32 matmul {n}x{n}x{n}",
            "host_s": host,
            "event_s": event,
            "host_over_event": host / event,
            "event_how": how,
            "host_how": "perf_counter around each op, synchronising after it, median of 20",
        },
    )


def step_summary(out: Path, dry_run: bool) -> None:
    """summary.json: every step's status, time and budget (steps.tsv), and what each file holds."""
    steps = []
    for line in (out / "steps.tsv").read_text().splitlines():
        name, status, seconds, budget = line.split("\t")
        steps.append({"step": name, "status": status, "seconds": float(seconds), "budget_s": float(budget)})
    files = sorted(str(path.relative_to(out)) for path in out.rglob("*") if path.is_file())
    write(
        out,
        "summary.json",
        {
            "dry_run": dry_run,
            "steps": steps,
            "files": files,
            "all_ok": all(s["status"] == "ok" for s in steps),
            "total_s": sum(s["seconds"] for s in steps),
        },
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fp8", "train", "timers", "summary"))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--processor", type=Path, help="train: the processor JSON calibrate wrote")
    parser.add_argument("--dry-run", action="store_true", help="run on the CPU as a stand-in device, tiny shapes")
    args = parser.parse_args()
    if args.step == "train":
        from gpu_train import step_train

        if args.processor is None:
            parser.error("train needs --processor")
        step_train(args.out, args.processor, args.dry_run)
    else:
        {"fp8": step_fp8, "timers": step_timers, "summary": step_summary}[args.step](args.out, args.dry_run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
