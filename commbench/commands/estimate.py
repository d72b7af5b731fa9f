"""Back-of-the-envelope training budget for a model size: memory ledger, C = 6PD, training time.

Memory is the static training state, before activations:
  parameters (bf16) 2 B + gradients (bf16) 2 B + Adam 12 B (fp32 master 4, m 4, v 4) = 16 B/param
with --bytes 12 for the variant without an fp32 master copy and --bytes 18 for fp32 main
gradients (Megatron), --bytes fp32 for plain fp32 training. 7e9 parameters -> 14 + 14 + 84 = 112 GB
(decimal GB). The seeds (the project's source documents on distributed training, in
../shared/seeds/: why it is needed, the memory ledger, communication, parallel strategies) quote
16-20 B/param; the GPU count is also given at their upper bound, 20 (175e9 -> 3.5 TB -> 44 x 80 GB).

Compute is C = 6 * P * D FLOPs (2 forward + 4 backward per parameter per token). The time on
one GPU is C / (peak * MFU), and on N GPUs that divided by N (ideal scaling). Without --gpu the
peak is the round 1e15 FLOP/s of an H100's dense BF16 tensor cores, at 50% MFU.

Examples:
  commbench estimate --params 70e9 --tokens 1e12
  commbench estimate --params 405e9 --gpu h200 --gpus 2048 --json
"""

from __future__ import annotations

import argparse
import json

from commbench.errors import UsageError
from commbench.modeling.job import PRECISIONS

HELP = "memory ledger (16 B/param), C = 6PD and training time for a model size"

SEED_PEAK_FLOPS = 1e15


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=float, required=True, help="parameter count, e.g. 7e9")
    parser.add_argument("--tokens", type=float, default=1e12, help="training tokens D (default 1e12)")
    from commbench.modeling.hardware import preset_names

    parser.add_argument(
        "--gpu",
        help=f"processor preset for peak FLOP/s and memory ({', '.join(preset_names('processor'))}) or a JSON file "
        "in its format; default: 1e15 FLOP/s, 80 GB",
    )
    parser.add_argument("--gpus", type=int, default=1024, help="N for the time on N GPUs (default 1024)")
    parser.add_argument("--mfu", type=float, default=0.5, help="model FLOPs utilisation (default 0.5)")
    parser.add_argument(
        "--bytes",
        choices=tuple(PRECISIONS),
        default="16",
        help="bytes per parameter variant: "
        + "; ".join(f"{name}: {p.name}" for name, p in PRECISIONS.items()).replace("%", "%%")
        + " (default 16)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def build_report(args) -> dict:
    from commbench.modeling.compute import SECONDS_PER_YEAR, training_flops, training_seconds
    from commbench.modeling.hardware import load_processor
    from commbench.modeling.limits import MAX_GPUS, MAX_PARAMS, MAX_TOKENS, MIN_MFU, finite_number, whole_number
    from commbench.modeling.memory import SEED_UPPER_BYTES_PER_PARAM, min_gpus_to_hold, static_ledger

    # argparse's float() takes "nan", "inf" and 1e308: bounded here so that every figure is finite
    finite_number("--params", args.params, 0, MAX_PARAMS)
    finite_number("--tokens", args.tokens, 0, MAX_TOKENS)
    whole_number("--gpus", args.gpus, 1, MAX_GPUS)
    if not MIN_MFU <= args.mfu <= 1:  # False for NaN too
        raise UsageError(f"--mfu must be between {MIN_MFU:g} and 1, not {args.mfu!r}")
    if args.gpu:
        proc = load_processor(args.gpu)
        peak, capacity, gpu_name = proc.peak_flops, proc.memory_bytes, proc.name
    else:
        peak, capacity, gpu_name = SEED_PEAK_FLOPS, 80e9, "80 GB GPU"
    ledger = static_ledger(args.params, PRECISIONS[args.bytes])
    flops = training_flops(args.params, args.tokens)
    one = training_seconds(flops, 1, peak, args.mfu)
    many = training_seconds(flops, args.gpus, peak, args.mfu)
    return {
        "params": args.params,
        "tokens": args.tokens,
        "memory": ledger,
        "gpu": {"name": gpu_name, "peak_flops": peak, "memory_bytes": capacity},
        "min_gpus_for_static_state": min_gpus_to_hold(ledger["total_bytes"], capacity),
        "seed_upper_bound": {
            "bytes_per_param": SEED_UPPER_BYTES_PER_PARAM,
            "min_gpus": min_gpus_to_hold(args.params * SEED_UPPER_BYTES_PER_PARAM, capacity),
        },
        "flops": flops,
        "mfu": args.mfu,
        "one_gpu": {"seconds": one, "years": one / SECONDS_PER_YEAR, "days": one / 86400},
        "n_gpus": {"gpus": args.gpus, "seconds": many, "days": many / 86400},
    }


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.4g}"


def _num(value: float) -> str:
    """7e9 rather than 7e+09."""
    return f"{value:.4g}".replace("e+0", "e").replace("e+", "e")


def _print(report: dict) -> None:
    from rich.table import Table

    from commbench import terminal

    mem = report["memory"]
    table = Table(title=f"Static training memory for {_num(report['params'])} parameters", title_justify="left")
    table.add_column("item")
    table.add_column("B/param", justify="right")
    table.add_column("GB", justify="right")
    for name, item in mem["items"].items():
        table.add_row(name, f"{item['bytes_per_param']:g}", _gb(item["bytes"]))
    for name, part in mem["optimizer_parts"].items():
        table.add_row(f"  optimizer: {name}", f"{part['bytes_per_param']:g}", _gb(part["bytes"]), style="dim")
    table.add_row("total", f"{mem['bytes_per_param']:g}", _gb(mem["total_bytes"]), style="bold")
    console = terminal.console()
    console.print(table)
    items = mem["items"]
    console.print(f"variant: {mem['variant']}")
    console.print(
        f"ledger: {' + '.join(_gb(i['bytes']) for i in items.values())} = {_gb(mem['total_bytes'])} GB; "
        f"at least {report['min_gpus_for_static_state']} x {report['gpu']['memory_bytes'] / 1e9:g} GB GPUs "
        f"just to hold it fully sharded, before activations"
    )
    upper = report["seed_upper_bound"]
    console.print(
        "at the mixed-precision Adam figure the seeds (commbench's source documents) give as the "
        f"upper bound of {upper['bytes_per_param']} B/param: "
        f"at least {upper['min_gpus']} GPUs"
    )
    one, many = report["one_gpu"], report["n_gpus"]
    console.print(
        f"\ncompute: C = 6 P D = 6 x {_num(report['params'])} x {_num(report['tokens'])} = {_num(report['flops'])} FLOPs"
    )
    console.print(
        f"one {report['gpu']['name']} at {_num(report['gpu']['peak_flops'])} FLOP/s x {report['mfu']:.0%} MFU: "
        f"{_num(one['seconds'])} s = {one['years']:.1f} years"
    )
    console.print(f"{many['gpus']} GPUs (ideal scaling): {_num(many['seconds'])} s = {many['days']:.1f} days")


def main(args) -> int:
    report = build_report(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0
