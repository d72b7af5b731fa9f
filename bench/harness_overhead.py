"""Harness overhead: commbench's reported time vs a minimal, warmed torch.distributed loop.

The raw loop: RAW_WARMUP untimed ops, then RAW_ITERS ops each timed by perf_counter around
dist.all_reduce (out-of-place: recv.copy_(send) first, as torch has no out-of-place all_reduce and
commbench's out-of-place variant does the same); its figure is the slowest rank's median, the
statistic commbench reports. Sizes 8 B - 64 KiB, 2 gloo ranks.

Two ways to set them side by side, both built to survive a noisy host:
  default   in one pair of processes: each round, for each size and variant, three contenders run
            back to back: the harness (commbench.measure.harness.measure at `commbench run`'s
            defaults: adaptive warm-up, iterations until the median's CI is within 2% or the
            budget is spent), the raw loop, and the raw loop again (the A/A control). Their order
            rotates with the round, so no contender keeps the warmer slot.
  --cli     as a user sees it: `commbench run --nproc 2 -b 8 -e 64K --ops all_reduce` at its
            defaults, the raw loop in a pair of processes of its own (started by commbench's
            launcher, so placed as its ranks are), and that raw pair again, in an order that
            rotates with the round. With --against DIR, `commbench run` from the
            checkout DIR joins the rotation (a before/after of a change under the same load), and
            its ratio to the raw loop, and this tree's to it, are printed beside the others.
Per round and size the ratio is harness / raw (and raw again / raw for the control); per size the
median over rounds. The control says how far two identical loops disagree on this machine now:
when its own figures break the goal, the run cannot tell whether the harness meets it, and the
verdict says so. Goal (issue 31): commbench / raw <= 1.05 as a geometric mean over sizes, no size
above 1.10, in-place and out-of-place. The last lines are one verdict per variant.

    python bench/harness_overhead.py [--rounds 9]            # about 40 s on a quiet machine
    python bench/harness_overhead.py --cli [--rounds 6]      # about 2 min on a quiet machine
    python bench/harness_overhead.py --cli --against /tmp/old  # /tmp/old: e.g. `git archive main | tar -x`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8 << k for k in range(14)]  # 8 B .. 64 KiB
VARIANTS = ("in-place", "out-of-place")
RAW_WARMUP, RAW_ITERS = 20, 200
CONTENDERS = ("commbench", "raw", "raw again")
AGAINST = "commbench at --against"
GOAL_GEO, GOAL_WORST = 1.05, 1.10
NOT_SHOWN = "NOT SHOWN (the A/A control breaks the goal itself)"


def raw_loop(numel: int, in_place: bool) -> float:
    send, recv = torch.ones(numel), torch.zeros(numel)

    def op():
        if not in_place:
            recv.copy_(send)
        dist.all_reduce(recv)

    for _ in range(RAW_WARMUP):
        op()
    dist.barrier()
    samples = []
    for _ in range(RAW_ITERS):
        start = time.perf_counter()
        op()
        samples.append((time.perf_counter() - start) * 1e6)
    return slowest(statistics.median(samples))


def slowest(value: float) -> float:
    holder = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(holder, op=dist.ReduceOp.MAX)
    return holder.item()


def harness_row(session, size: int, in_place: bool) -> float:
    from commbench.collectives import get_collective
    from commbench.collectives.base import IN_PLACE, OUT_OF_PLACE
    from commbench.measure.harness import Row, gather_to_rank0, measure, to_record

    variant = IN_PLACE if in_place else OUT_OF_PLACE
    collective = get_collective("all_reduce")
    row = Row("world", collective, ((0, 1),), size, collective.counts(size // 4, 2, 4))
    measured = measure(session, row, variant)
    samples = gather_to_rank0(session, measured)
    median = to_record(session, row, variant, samples, measured).time_us if samples is not None else 0.0
    return slowest(median)


def rotated(items: tuple, by: int) -> tuple:
    by %= len(items)
    return items[by:] + items[:by]


def one_figure(session, contender: str, size: int, variant: str) -> float:
    in_place = variant == "in-place"
    return harness_row(session, size, in_place) if contender == "commbench" else raw_loop(size // 4, in_place)


def side_by_side(rank: int, port: int, rounds: int, out: dict) -> None:
    """Every (size, variant): {contender: [its figure per round]}, the three alternating."""
    from commbench.measure.launch import RankEnv
    from commbench.measure.options import RunConfig
    from commbench.measure.session import open_session

    cfg = RunConfig(ops=("all_reduce",), check_iters=0).validate()  # run's defaults, unchecked as the raw loop
    session = open_session(cfg, RankEnv(rank, 2, rank, "127.0.0.1", port, "bench"))
    torch.set_num_threads(1)
    results: dict = {(size, variant): {c: [] for c in CONTENDERS} for size in SIZES for variant in VARIANTS}
    for round_number in range(rounds):
        for index, (size, variant) in enumerate(results):
            for contender in rotated(CONTENDERS, round_number + index):
                results[(size, variant)][contender].append(one_figure(session, contender, size, variant))
        if rank == 0:
            print(f"round {round_number + 1} of {rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def raw_only(rank: int, port: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.set_num_threads(1)  # two ranks on a 2-core machine, as commbench's session sets it
    results = {(size, variant): raw_loop(size // 4, variant == "in-place") for size in SIZES for variant in VARIANTS}
    if rank == 0:
        out.update(results)
    dist.destroy_process_group()


def raw_rank(out_file: str) -> None:
    """One rank of the raw loop's pair as commbench's launcher starts it (RANK etc. in the
    environment); rank 0 writes the figures to `out_file` as JSON."""
    rank, port = int(os.environ["RANK"]), int(os.environ["MASTER_PORT"])
    out: dict = {}
    raw_only(rank, port, out)
    if rank == 0:
        Path(out_file).write_text(json.dumps([[size, variant, value] for (size, variant), value in out.items()]))


def launched_raw() -> dict:
    """The raw loop in a pair of processes started by commbench's own launcher (spawn_local), so
    they are placed as `commbench run`'s ranks are: a session (and, where the kernel groups by
    session, a CPU-share autogroup) each, and the launcher's process waiting beside them. A pair
    that mp.spawn starts shares the bench's session instead, and on a busy host gets one share
    for both ranks where commbench's get one each (bench/RESULTS.md, harness overhead)."""
    from commbench.measure.launch import spawn_local

    with tempfile.TemporaryDirectory() as tmp:
        out_file = str(Path(tmp, "raw.json"))
        code = spawn_local(2, "{}", "raw", argv=[sys.executable, os.path.abspath(__file__), "--raw-rank", out_file])
        if code != 0:
            raise SystemExit(f"the raw loop's ranks failed (exit {code})")
        return {(size, variant): value for size, variant, value in json.loads(Path(out_file).read_text())}


def spawn(target, *args) -> dict:
    from commbench.measure.launch import free_port

    out = mp.Manager().dict()
    mp.spawn(target, args=(free_port(), *args, out), nprocs=2)
    return dict(out)


def cli_sweep(tree: str | None = None, attempts: int = 2) -> dict:
    """`commbench run` at its defaults (from the checkout `tree`, else as this process imports it);
    rank 0's records, keyed like the raw loop's. A run that fails is said so and run again once,
    so one failure does not cost the whole bench."""
    command = [sys.executable, "-m", "commbench", "run", "--nproc", "2", "-b", "8", "-e", "64K"]
    env = dict(os.environ, PYTHONPATH=tree) if tree else None
    for attempt in range(1, attempts + 1):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [*command, "--ops", "all_reduce", "--out", tmp, "--no-progress"], stdout=subprocess.DEVNULL, env=env
            )
            if done.returncode == 0:
                (records_file,) = Path(tmp).glob("*/records.jsonl")
                records = [json.loads(line) for line in records_file.read_text().splitlines()]
                return {
                    (r["size_bytes"], "in-place" if r["in_place"] else "out-of-place"): r["time_us"] for r in records
                }
        print(f"commbench run failed (exit {done.returncode}), attempt {attempt} of {attempts}", flush=True)
    raise SystemExit(f"commbench run failed {attempts} times; see its errors above")


def cli_rounds(rounds: int, against: str | None = None) -> dict:
    """As side_by_side's result, each contender a whole run of its own processes."""
    ways = {"commbench": cli_sweep, "raw": launched_raw, "raw again": launched_raw}
    if against:
        ways[AGAINST] = lambda: cli_sweep(against)
    contenders = tuple(ways)
    results: dict = {(size, variant): {c: [] for c in contenders} for size in SIZES for variant in VARIANTS}
    for round_number in range(rounds):
        for contender in rotated(contenders, round_number):
            for key, value in ways[contender]().items():
                results[key][contender].append(value)
        print(f"round {round_number + 1} of {rounds} done, load {os.getloadavg()[0]:.1f}", flush=True)
    return results


def per_size_ratios(figures: dict[str, list[float]]) -> tuple[float, float]:
    """(harness / raw, raw again / raw): each the median over rounds of that round's ratio."""
    raw = figures["raw"]
    return (
        statistics.median(h / r for h, r in zip(figures["commbench"], raw)),
        statistics.median(a / r for a, r in zip(figures["raw again"], raw)),
    )


def verdict(variant: str, ratios: list[float], control: list[float], label: str) -> str:
    geo, worst = statistics.geometric_mean(ratios), max(ratios)
    control_geo, control_worst = statistics.geometric_mean(control), max(control)
    met = geo <= GOAL_GEO and worst <= GOAL_WORST
    noisy = control_geo > GOAL_GEO or control_worst > GOAL_WORST or min(control) < 1 / GOAL_WORST
    outcome = "PASS" if met else (NOT_SHOWN if noisy else "FAIL")
    return (
        f"VERDICT harness_overhead {label} {variant}: geometric mean {geo:.3f} (goal <= {GOAL_GEO}), "
        f"worst {worst:.3f} (goal <= {GOAL_WORST}); A/A control {control_geo:.3f} / "
        f"{min(control):.3f}-{control_worst:.3f} -> {outcome}"
    )


def report(results: dict, label: str) -> list[str]:
    verdicts = []
    against = AGAINST in results[(SIZES[0], VARIANTS[0])]
    for variant in VARIANTS:
        print(f"\n{variant} ({label})")
        more = f"  {'--against':>9}  {'ratio':>6}  {'this/it':>7}" if against else ""
        print(f"{'size (B)':>10}  {'raw (us)':>9}  {'commbench (us)':>14}  {'ratio':>6}  {'A/A':>6}{more}")
        ratios, controls, theirs, ours_to_theirs = [], [], [], []
        for size in SIZES:
            figures = results[(size, variant)]
            ratio, control = per_size_ratios(figures)
            ratios.append(ratio)
            controls.append(control)
            raw, ours = statistics.median(figures["raw"]), statistics.median(figures["commbench"])
            line = f"{size:>10}  {raw:9.1f}  {ours:14.1f}  {ratio:6.3f}  {control:6.3f}"
            if against:
                theirs.append(statistics.median(t / r for t, r in zip(figures[AGAINST], figures["raw"])))
                ours_to_theirs.append(statistics.median(o / t for o, t in zip(figures["commbench"], figures[AGAINST])))
                line += f"  {statistics.median(figures[AGAINST]):9.1f}  {theirs[-1]:6.3f}  {ours_to_theirs[-1]:7.3f}"
            print(line)
        verdicts.append(verdict(variant, ratios, controls, label))
        if against:
            verdicts.append(
                f"AGAINST {variant}: --against / raw geometric mean {statistics.geometric_mean(theirs):.3f} "
                f"(worst {max(theirs):.3f}); this tree / --against {statistics.geometric_mean(ours_to_theirs):.3f}"
            )
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 9 in-process, 6 with --cli)")
    parser.add_argument("--cli", action="store_true", help="commbench run at its defaults against the raw loop")
    parser.add_argument(
        "--against", metavar="DIR", help="with --cli: also `commbench run` from the checkout DIR (a before/after)"
    )
    parser.add_argument("--raw-rank", metavar="FILE", help=argparse.SUPPRESS)  # one rank of launched_raw's pair
    args = parser.parse_args()
    if args.raw_rank:
        raw_rank(args.raw_rank)
        return
    rounds = args.rounds or (6 if args.cli else 9)
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.against and not (args.cli and Path(args.against, "commbench", "__init__.py").is_file()):
        parser.error("--against DIR needs --cli and a commbench checkout in DIR")
    label = "CLI" if args.cli else "in-process"
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    print(f"load average {load_before:.1f} on {os.cpu_count()} cores, {label}, {rounds} rounds", flush=True)
    verdicts = report(cli_rounds(rounds, args.against) if args.cli else spawn(side_by_side, rounds), label)
    load_after = os.getloadavg()[0]
    print(f"\n{time.perf_counter() - start:.0f} s; load average {load_before:.1f} before, {load_after:.1f} after")
    print("\n".join(verdicts))
    print(overall(verdicts, label, load_before, load_after))


def overall(verdicts: list[str], label: str, load_before: float, load_after: float) -> str:
    """The one line a run ends with: PASS only when every variant passed; a run whose control says
    the machine was too busy to tell is NOT SHOWN (take it again), never PASS or FAIL."""
    mine = [line for line in verdicts if line.startswith("VERDICT")]
    outcome = (
        "FAIL"
        if any(line.endswith("FAIL") for line in mine)
        else "PASS"
        if all(line.endswith("PASS") for line in mine)
        else "NOT SHOWN: too busy to tell, run it again when the load is lower"
    )
    return f"RESULT harness_overhead {label}: {outcome} (load average {load_before:.1f} -> {load_after:.1f})"


if __name__ == "__main__":
    main()
