"""Validate the step model: a small GPT trained for real on the emulated cluster, next to the planner's prediction.

On a 2-node emulated cluster (network namespaces joined by tc-shaped links, tests/cluster/emulated.py;
needs root), with one rank per node (the machine's 2 cores, one each):
  1. `commbench run` measures the bandwidth table between the nodes (all_reduce, all_gather,
     reduce_scatter, sendrecv, one intra-op thread per rank as in training), and `commbench
     overlap` how much a GEMM slows down while those collectives run beside it;
  2. bench/validation/train_gpt.py trains a small GPT (bench/validation/gpt.py) with DDP, FSDP2
     (ZeRO-3), tensor parallel and pipeline parallel (1F1B), with and without gradient
     accumulation (bench/validation/layouts.py), timing its steps, and measures this
     machine's compute rates (GEMMs of the model's shapes, attention, one block's elementwise
     work, memory copies) right before and right after each layout, under the same sharing of
     the cores;
  3. the planner (Planner.evaluate_layout, what `commbench plan --layout --processor FILE.json
     --precision fp32 --execution torch-eager` runs) predicts each layout's step time from that
     bandwidth table, the measured overlap slowdown and a processor built from those compute rates
     (bench/validation/predict.py);
     for comparison also with the default Megatron-style execution (overlapped TP backward
     all-reduces and ZeRO-3 reduce-scatters), which torch on CPU/gloo does not do;
  4. prints measured vs predicted step time per layout, the error and the mean absolute
     percentage error (MAPE) over the parallel layouts trained (per round too, and over the
     layouts this run is the first to measure: the work directory's machine.json names them),
     and writes them to --work.
A diagnostic "local" row (each rank trains alone, no communication) checks the compute side alone;
it is not part of the MAPE.

Every run repeats the layouts `--rounds` times, interleaved, and takes medians: other work on a
shared machine changes its speed from minute to minute.

Run (as root):  python bench/validate_planner.py [--rate 1gbit] [--rounds 2] [--work DIR]
Re-predict saved measurements without training again: --predict-only --work DIR

Memory (--memory): the same cluster trains each of MEMORY_LAYOUTS (bench/validation/layouts.py:
DDP, ZeRO-1, FSDP, TP, PP, full recompute on and off, gradient accumulation) for --memory-steps
steps in a fresh model, and every rank reads its peak of the bytes torch's CPU allocator holds
(torch.profiler's memory events, from before the model is built: what torch.cuda.max_memory_allocated
reads on a GPU); the memory ledger predicts each rank's allocator peak (a pipeline's rank r is its
stage r). Prints measured vs predicted per layout and rank and the MAPE over them, and writes
memory.json and memory.md to --work.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))  # this checkout's commbench, not whichever one is installed
sys.path.insert(0, str(REPO / "tests"))  # the emulated cluster: tests/cluster/emulated.py
sys.path.insert(0, str(BENCH / "validation"))

from cluster.emulated import EmulatedCluster, torchrun_command, wait_procs  # noqa: E402
from layouts import FIRST_VALIDATION_UNSEEN, MEMORY_LAYOUTS, PARALLEL_LAYOUTS, UNSEEN_LAYOUTS  # noqa: E402
from predict import ABLATIONS, predict, predict_memory  # noqa: E402

from commbench.data.slowdown import measured_slowdown  # noqa: E402

BANDWIDTH_OPS = "all_reduce,all_gather,reduce_scatter,sendrecv"
OVERLAP_OPS = "all_reduce,all_gather,reduce_scatter"  # the collectives the layouts overlap with compute
MASTER_PORT = 29655
GOAL_MAPE = 10.0
TRAINING_LINE = "layout "  # how train_gpt.py starts the line it prints per layout


def torchrun_per_node(cluster: EmulatedCluster, program: list[str], log: Path, timeout: float) -> str:
    """One torchrun per node (one rank each), c10d store on node 0, gloo over each node's eth0; node 0's output."""
    procs = []
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}  # one core's worth per rank
    for i in range(len(cluster.nodes)):
        cmd = torchrun_command(cluster, i, MASTER_PORT, program)
        procs.append(
            cluster.node(i).popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    results = wait_procs(procs, timeout)
    log_and_check(results, log, program[:3])
    return results[0][1]


def log_and_check(results: list, log: Path, label: list[str]) -> None:
    """Append every node's output to the log; stop with the first failed node's tail if any failed."""
    with open(log, "a", encoding="utf-8") as handle:
        for node, (code, out, _) in enumerate(results):
            handle.write(f"--- node {node}: {' '.join(label)} ... exit {code}\n{out}\n")
    failed = [node for node, (code, _, _) in enumerate(results) if code != 0]
    if failed:
        raise SystemExit(f"{label} failed on node(s) {failed}; see {log}\n{results[failed[0]][1][-3000:]}")


def on_every_node(cluster: EmulatedCluster, command_for, log: Path, timeout: float) -> None:
    """command_for(node index) on every node at once (sharing the cores as the training ranks do)."""
    commands = [command_for(i) for i in range(len(cluster.nodes))]
    command = commands[0]
    procs = [
        cluster.node(i).popen(
            commands[i],
            env={"OMP_NUM_THREADS": "1"},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(len(cluster.nodes))
    ]
    log_and_check(wait_procs(procs, timeout), log, command[1:4])


def machine_state(work: Path, moment: str) -> None:
    """Load and commit with the figures: the machine is shared, and the model may move."""
    state_file = work / "machine.json"
    state = json.loads(state_file.read_text()) if state_file.exists() else {}
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    state[moment] = {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "host": socket.gethostname(),
        "cores": os.cpu_count(),
    }
    state_file.write_text(json.dumps(state, indent=1))


def unseen_layouts(work: Path) -> tuple[str, ...]:
    """The layouts this work directory's measurements were the first of (see layouts.py)."""
    state_file = work / "machine.json"
    recorded = json.loads(state_file.read_text()).get("unseen_layouts") if state_file.exists() else None
    return FIRST_VALIDATION_UNSEEN if recorded is None else tuple(recorded)


def measure(args, work: Path) -> None:
    """`commbench calibrate --quick` and the bandwidth table, then `--rounds` rounds of training, on one emulated cluster."""
    log = work / "measure.log"
    machine_state(work, "start")
    state = json.loads((work / "machine.json").read_text())
    (work / "machine.json").write_text(json.dumps({**state, "unseen_layouts": list(UNSEEN_LAYOUTS)}, indent=1))
    # node names in /etc/hosts while it runs: gloo and c10d look them up
    with EmulatedCluster(nodes=2, rate=args.rate, etc_hosts=True) as cluster:
        start = time.monotonic()
        on_every_node(
            cluster,
            lambda node: [
                sys.executable,
                "-m",
                "commbench",
                "calibrate",
                "--quick",
                "--threads",
                "1",
                "--no-progress",
                "--out",
                str(work / f"quick-node{node}.json"),
            ],
            log,
            timeout=300,
        )
        print(f"commbench calibrate --quick on every node in {time.monotonic() - start:.0f} s", flush=True)
        start = time.monotonic()
        # one rank per node: the inter-node scope is the only one; sizes x4 apart keep it to about a minute
        torchrun_per_node(
            cluster,
            [
                "-m",
                "commbench",
                "run",
                "--ops",
                BANDWIDTH_OPS,
                "--scopes",
                "inter",
                "-b",
                "2K",
                "-e",
                args.max_bytes,
                "-f",
                "4",
                "--warmup",
                "1",
                "--min-iters",
                "3",
                "--out",
                str(work),
                "--run-id",
                "bandwidth",
                "--no-progress",
            ],
            log,
            timeout=600,
        )
        print(f"bandwidth table measured in {time.monotonic() - start:.0f} s", flush=True)
        start = time.monotonic()
        torchrun_per_node(
            cluster,
            [
                "-m",
                "commbench",
                "overlap",
                "--ops",
                OVERLAP_OPS,
                "-b",
                "1M",
                "-e",
                args.max_bytes,
                "--iters",
                "5",
                "--out",
                str(work),
                "--run-id",
                "overlap",
                "--no-progress",
            ],
            log,
            timeout=600,
        )
        print(
            f"overlap slowdown measured in {time.monotonic() - start:.0f} s: "
            f"{measured_slowdown(work / 'overlap'):.1%} extra compute per overlapped second",
            flush=True,
        )
        for round_index in range(args.rounds):
            start = time.monotonic()
            output = torchrun_per_node(
                cluster,
                [
                    str(BENCH / "validation" / "train_gpt.py"),
                    *args.train_args,
                    "--out",
                    str(work / f"training-{round_index}.json"),
                ],
                log,
                timeout=900,
            )
            print("".join(f"  {line}\n" for line in output.splitlines() if line.startswith(TRAINING_LINE)), end="")
            print(f"training round {round_index + 1}/{args.rounds} in {time.monotonic() - start:.0f} s", flush=True)
    machine_state(work, "end")


# column -> how predict() is called for it (the first is the primary figure)
VARIANTS = {
    "predicted": {},  # torch-eager, each layout's own calibrations
    "predicted_pooled": {"processors": "pooled"},  # one processor from every calibration of the round
    "predicted_quick": {"processors": "quick"},  # the `commbench calibrate --quick` file of node 0
    "predicted_megatron": {"execution": "megatron"},
}
VARIANT_LABELS = {
    "predicted": "torch-eager execution, processor calibrated around each layout's steps",
    "predicted_pooled": "torch-eager execution, one processor from every calibration of the round",
    "predicted_quick": "torch-eager execution, the processor `commbench calibrate --quick` wrote before training",
    "predicted_megatron": "megatron execution, processor calibrated around each layout's steps",
}


def variants(work: Path, ablations: tuple[str, ...]) -> dict[str, dict]:
    chosen = {
        name: kwargs
        for name, kwargs in VARIANTS.items()
        if name != "predicted_quick" or (work / "quick-node0.json").exists()
    }
    chosen.update({f"without_{name}": {"ablate": (name,)} for name in ablations})
    return chosen


def compare(work: Path, ablations: tuple[str, ...] = (), processors: Path | None = None) -> dict:
    """Per layout: measured step time and predictions (medians over rounds, and each round's error);
    MAPE over the parallel layouts for every variant, and per round for the primary one. The
    processor files go to `processors` (default WORK/processors)."""
    processors = processors or work / "processors"
    rounds = [json.loads(path.read_text()) for path in sorted(work.glob("training-*.json"))]
    if not rounds:
        raise SystemExit(f"{work}: no training-*.json; run without --predict-only first")
    # work directories measured before the overlap step have none: the step model's default then
    slowdown = measured_slowdown(work / "overlap") if (work / "overlap").is_dir() else None
    quick_file = work / "quick-node0.json"
    quick = json.loads(quick_file.read_text()) if quick_file.exists() else None
    chosen = variants(work, ablations)
    rows, warnings = {}, {}
    for index, training in enumerate(rounds):
        for variant, kwargs in chosen.items():
            _, results, messages = predict(
                training, work / "bandwidth", processors / str(index), slowdown=slowdown, quick=quick, **kwargs
            )
            for name, result in results.items():
                row = rows.setdefault(
                    name,
                    {
                        "planner_layout": training["layouts"][name]["planner_layout"],
                        "measured_s": [],
                        "load_average": [],
                        "categories": [],
                    },
                )
                row.setdefault(f"{variant}_s", []).append(result.step_s)
                if variant == "predicted":
                    row["measured_s"].append(training["layouts"][name]["median_step_s"])
                    row["load_average"] += training["layouts"][name]["load_average"]
                    row["categories"].append(result.categories)
                    warnings.setdefault(name, set()).update(messages[name])
    for row in rows.values():
        row["measured"] = statistics.median(row["measured_s"])
        for variant in chosen:
            row[variant] = statistics.median(row[f"{variant}_s"])
            row[f"{variant}_error_pct"] = 100 * (row[variant] - row["measured"]) / row["measured"]
        row["round_errors_pct"] = [100 * (p - m) / m for p, m in zip(row["predicted_s"], row["measured_s"])]
        row["breakdown"] = {key: statistics.median(c[key] for c in row["categories"]) for key in row["categories"][0]}
        del row["categories"]
    in_mape = [name for name in PARALLEL_LAYOUTS if name in rows]

    def mape(variant: str, names=in_mape) -> float | None:
        return statistics.fmean(abs(rows[name][f"{variant}_error_pct"]) for name in names) if names else None

    per_round = (
        [statistics.fmean(abs(rows[name]["round_errors_pct"][r]) for name in in_mape) for r in range(len(rounds))]
        if in_mape
        else []
    )
    unseen = [name for name in in_mape if name in unseen_layouts(work)]
    return {
        "rows": rows,
        "mape_pct": {variant: mape(variant) for variant in chosen},
        "mape_unseen_layouts_pct": mape("predicted", unseen),
        "unseen_layouts": unseen,
        "mape_per_round_pct": per_round,
        "mape_round_spread_pct": [min(per_round), max(per_round)] if per_round else None,
        "mape_round_stdev_pct": statistics.stdev(per_round) if len(per_round) > 1 else None,
        "layouts_in_mape": in_mape,
        "rounds": len(rounds),
        "ablations": list(ablations),
        "overlap_slowdown": slowdown,
        "warnings": {name: sorted(messages) for name, messages in warnings.items() if messages},
        "config": {
            key: rounds[0][key]
            for key in (
                "model",
                "global_batch",
                "pp_micro_batches",
                "warmup",
                "steps",
                "world_size",
                "torch",
                "optimizer",
            )
        },
    }


def markdown_table(summary: dict) -> str:
    shown = [variant for variant in VARIANTS if variant in summary["mape_pct"] and variant != "predicted"]
    lines = [
        "| layout | planner layout | measured step (s) | predicted (s) | error | error per round | "
        + " | ".join(f"{variant.removeprefix('predicted_')} (s) | error" for variant in shown)
        + " | predicted breakdown (s) | load avg |",
        "|---|---|---:|---:|---:|---|" + "---:|---:|" * len(shown) + "---|---:|",
    ]
    for name, row in summary["rows"].items():
        parts = ", ".join(
            f"{key} {value:.3f}"
            for key, value in sorted(row["breakdown"].items(), key=lambda item: -item[1])
            if value >= 0.0005
        )
        load = f"{min(row['load_average']):.1f}-{max(row['load_average']):.1f}"
        label = name if name in PARALLEL_LAYOUTS else f"{name} (diagnostic)"
        label += " (unseen)" if name in summary["unseen_layouts"] else ""
        rounds = " / ".join(f"{error:+.1f}%" for error in row["round_errors_pct"])
        others = "".join(f" {row[v]:.3f} | {row[f'{v}_error_pct']:+.1f}% |" for v in shown)
        lines.append(
            f"| {label} | `{row['planner_layout']}` | {row['measured']:.3f} | {row['predicted']:.3f} | "
            f"{row['predicted_error_pct']:+.1f}% | {rounds} |{others} {parts} | {load} |"
        )
    layouts = ", ".join(summary["layouts_in_mape"])
    slowdown = summary.get("overlap_slowdown")
    lines.append(
        "\nCompute slowdown under overlapping communication: "
        + (
            f"{slowdown:.1%} (measured by `commbench overlap` on this cluster)"
            if slowdown is not None
            else "the step model's default (this work directory has no overlap run)"
        )
    )
    for variant, value in summary["mape_pct"].items():
        if value is None:  # only the diagnostic layout was trained
            continue
        label = VARIANT_LABELS.get(variant) or f"as the first, without {ABLATIONS[variant.removeprefix('without_')]}"
        verdict = "meets" if value <= GOAL_MAPE else "misses"
        lines.append(f"\nMAPE over {layouts} ({label}): **{value:.1f}%** ({verdict} the goal of <= {GOAL_MAPE:.0f}%)")
    if summary["mape_per_round_pct"]:
        per_round = ", ".join(f"{value:.1f}%" for value in summary["mape_per_round_pct"])
        low, high = summary["mape_round_spread_pct"]
        stdev = summary["mape_round_stdev_pct"]
        lines.append(
            f"\nMAPE per round (primary figure, each round's own measured and predicted steps): {per_round}; "
            f"spread {low:.1f}-{high:.1f}%" + (f", standard deviation {stdev:.1f} points" if stdev else "")
        )
    if summary["unseen_layouts"]:
        lines.append(
            f"\nMAPE over the unseen layouts ({', '.join(summary['unseen_layouts'])}): "
            f"{summary['mape_unseen_layouts_pct']:.1f}%"
        )
    return "\n".join(lines)


def measure_memory(args, work: Path) -> None:
    """train_gpt.py --memory on the 2-node emulated cluster: every rank's allocator peak per layout."""
    log = work / "measure.log"
    machine_state(work, "memory start")
    with EmulatedCluster(nodes=2, rate=args.rate, etc_hosts=True) as cluster:
        start = time.monotonic()
        output = torchrun_per_node(
            cluster,
            [
                str(BENCH / "validation" / "train_gpt.py"),
                "--memory",
                "--layouts",
                ",".join(MEMORY_LAYOUTS),
                "--memory-steps",
                str(args.memory_steps),
                *args.train_args,
                "--out",
                str(work / "memory-training.json"),
            ],
            log,
            timeout=900,
        )
        print("".join(f"  {line}\n" for line in output.splitlines() if line.startswith(TRAINING_LINE)), end="")
        print(f"memory measured in {time.monotonic() - start:.0f} s", flush=True)
    machine_state(work, "memory end")


def compare_memory(work: Path) -> dict:
    """Per layout and rank: measured and predicted allocator peak, the error, and the MAPE over them."""
    training = json.loads((work / "memory-training.json").read_text())
    predicted = predict_memory(training)
    rows = []
    for name, measured in training["layouts"].items():
        for rank, figures in enumerate(measured["ranks"]):
            guess = predicted[name]["ranks"][rank]
            rows.append(
                {
                    "layout": name,
                    "planner_layout": measured["planner_layout"],
                    "rank": rank,
                    "measured_bytes": figures["peak_bytes"],
                    "measured_end_bytes": figures["end_bytes"],
                    "predicted_bytes": guess,
                    "error_pct": 100 * (guess - figures["peak_bytes"]) / figures["peak_bytes"],
                    "predicted_moment": predicted[name]["moments"][rank],
                    "predicted_items": {k: v for k, v in predicted[name]["ledgers"][rank].items() if v},
                }
            )
    errors = [row["error_pct"] for row in rows]
    return {
        "rows": rows,
        "mape_pct": statistics.fmean(abs(e) for e in errors),
        "mean_signed_error_pct": statistics.fmean(errors),
        "layouts": list(training["layouts"]),
        "config": {
            key: training[key]
            for key in (
                "model",
                "global_batch",
                "pp_micro_batches",
                "steps",
                "world_size",
                "torch",
                "optimizer",
                "measured_at",
                "host",
            )
        },
    }


def memory_table(summary: dict) -> str:
    lines = [
        "| layout | planner layout | rank | measured peak (MB) | predicted (MB) | error | predicted peak at | "
        "largest predicted items (MB) |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for row in summary["rows"]:
        items = sorted(
            (
                (v, k)
                for k, v in row["predicted_items"].items()
                if k not in ("allocator_peak", "total", "outside_allocator")
            ),
            reverse=True,
        )[:4]
        lines.append(
            f"| {row['layout']} | `{row['planner_layout']}` | {row['rank']} | {row['measured_bytes'] / 1e6:.1f} | "
            f"{row['predicted_bytes'] / 1e6:.1f} | {row['error_pct']:+.1f}% | {row['predicted_moment']} | "
            + ", ".join(f"{k} {v / 1e6:.1f}" for v, k in items)
            + " |"
        )
    verdict = "meets" if summary["mape_pct"] <= GOAL_MAPE else "misses"
    lines.append(
        f"\nPeak memory MAPE over {len(summary['rows'])} layout-ranks: **{summary['mape_pct']:.1f}%** "
        f"({verdict} the goal of <= {GOAL_MAPE:.0f}%); mean signed error {summary['mean_signed_error_pct']:+.1f}%"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="1gbit", help="emulated link rate per node (tc units, default 1gbit)")
    parser.add_argument("--rounds", type=int, default=2, help="times the layouts are trained, interleaved (default 2)")
    training = parser.add_argument_group("passed to bench/validation/train_gpt.py (its defaults: the recorded run)")
    for flag in (
        "--layouts",
        "--steps",
        "--warmup",
        "--repeats",
        "--hidden",
        "--layers",
        "--heads",
        "--vocab",
        "--seq-len",
        "--global-batch",
        "--pp-micro-batches",
    ):
        training.add_argument(flag)
    parser.add_argument("--max-bytes", default="32M", help="largest collective size measured (default 32M)")
    parser.add_argument("--work", help="folder for measurements and results (default: a new temporary one)")
    parser.add_argument("--predict-only", action="store_true", help="reuse the measurements already in --work")
    parser.add_argument("--memory", action="store_true", help="validate the memory ledger instead (see above)")
    parser.add_argument(
        "--memory-steps", type=int, default=2, help="with --memory: training steps measured (default 2)"
    )
    parser.add_argument(
        "--ablate",
        default="",
        metavar="LIST",
        help="also predict without each of these measured inputs (comma-separated, or 'all'): "
        + "; ".join(f"{name}: {what}" for name, what in ABLATIONS.items()),
    )
    args = parser.parse_args()
    args.train_args = [
        item
        for flag in (
            "layouts",
            "steps",
            "warmup",
            "repeats",
            "hidden",
            "layers",
            "heads",
            "vocab",
            "seq_len",
            "global_batch",
            "pp_micro_batches",
        )
        if getattr(args, flag) is not None
        for item in (f"--{flag.replace('_', '-')}", getattr(args, flag))
    ]
    if args.predict_only and not args.work:
        parser.error("--predict-only needs --work")
    ablations = tuple(ABLATIONS) if args.ablate == "all" else tuple(a for a in args.ablate.split(",") if a)
    if unknown := [name for name in ablations if name not in ABLATIONS]:
        parser.error(f"--ablate {unknown[0]!r}: choose from {', '.join(ABLATIONS)} or all")
    work = Path(args.work or tempfile.mkdtemp(prefix="commbench-validation-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.memory:
        return validate_memory(args, work)
    if not args.predict_only:
        if os.geteuid() != 0:
            raise SystemExit("the emulated cluster needs root (network namespaces and tc)")
        measure(args, work)
    summary = compare(work, ablations)
    (work / "validation.json").write_text(json.dumps(summary, indent=1))
    table = markdown_table(summary)
    (work / "validation.md").write_text(table + "\n")
    print(table)
    for name, messages in summary["warnings"].items():
        for message in messages:
            print(f"warning ({name}): {message}")
    print(f"\nmeasurements and results in {work}")
    return 0


def validate_memory(args, work: Path) -> int:
    if not args.predict_only:
        if os.geteuid() != 0:
            raise SystemExit("the emulated cluster needs root (network namespaces and tc)")
        measure_memory(args, work)
    summary = compare_memory(work)
    (work / "memory.json").write_text(json.dumps(summary, indent=1))
    table = memory_table(summary)
    (work / "memory.md").write_text(table + "\n")
    print(table)
    print(f"\nmeasurements and results in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
