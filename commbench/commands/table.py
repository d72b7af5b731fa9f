"""Show a run's bandwidth table: measured points and a fitted latency-bandwidth model per group.

For each (op, scope, group size, dtype) of a run directory -- a commbench sweep or an imported
nccl-tests run -- the table holds the measured points (size, time, busbw) and the fit

    time_us(S) = alpha_us + S * busbw_factor / (busbw_gbps * 1e3)

(alpha: latency in us; busbw: asymptotic bus bandwidth in GB/s; busbw_factor: nccl-tests'
factor for the op and group size, 2(n-1)/n for all_reduce). The fit error is the RMS and the
largest relative miss of the model over the points. Out-of-place rows are used; in-place
rows only where an entry has no out-of-place row (the entry says which). Rows with wrong
elements are left out; several rows of one size count as their median.

--at SIZE answers "how long does a collective of SIZE bytes take on this group" per entry:
the model times the measured/model ratio interpolated log-log between the measured sizes,
so measured sizes answer their measurement and other sizes follow the curve (outside the
measured range the fitted model continues it, marked "extrapolated"). The planner
(commbench plan --bandwidth RUN) reads the same table.

--calculon FILE writes the table as Calculon network tiers (tier 0 inside a node, tier 1 one
rank per node) with a "commbench" section listing where each tier came from and what the
export loses: size dependence beyond latency + bandwidth, every group size but the largest,
hierarchical placements, per-op latency, all_to_all, dtype variants.

Examples:
  commbench table results/20250101-120000-host-abc123
  commbench table RUN --op all_reduce --scope intra --at 4M,64M
  commbench table RUN --format csv > table.csv
  commbench table RUN --calculon networks.json
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from pathlib import Path

from commbench.data.bandwidth_table import BandwidthTable, Entry, model_time_us
from commbench.errors import CommbenchError, UsageError
from commbench.scopes import SCOPES
from commbench.units import format_size, parse_size

HELP = "bandwidth table of a run: measured points, fitted latency + bandwidth, time at any size"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_DIR", help="a run directory (commbench run or commbench import)")
    parser.add_argument("--format", choices=("text", "json", "csv"), default="text", help="output form (default text)")
    parser.add_argument("--op", help="only this collective (all_reduce, all_gather, ...)")
    parser.add_argument("--scope", choices=SCOPES, help="only this scope")
    parser.add_argument(
        "--at",
        metavar="SIZE[,SIZE...]",
        help="print the time and busbw at these sizes (e.g. 4M or 1K,1M,1G) instead of the points",
    )
    parser.add_argument(
        "--calculon", metavar="FILE", help="also write the table as Calculon network tiers to FILE (JSON)"
    )


def main(args: argparse.Namespace) -> int:
    table = _load(args.run)
    table = _select(table, args.op, args.scope)
    sizes = _sizes(args.at) if args.at else None
    for warning in table.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.calculon:
        _write_calculon(table, args.calculon)
    if sizes is not None:
        _print_answers(table, sizes, args.format)
    elif args.format == "json":
        print(json.dumps(table.to_dict(), indent=2))
    elif args.format == "csv":
        _write_csv(table.to_rows())
    else:
        _print_text(table)
    return 0


def _load(path: str) -> BandwidthTable:
    if not Path(path).is_dir():
        raise UsageError(f"{path}: no such run directory")
    try:
        table = BandwidthTable.from_run(path)
    except CommbenchError as exc:
        raise UsageError(str(exc)) from None
    if not table.items:
        raise UsageError(f"{path}: no usable records (none with a positive time and no wrong elements)")
    return table


def _select(table: BandwidthTable, op: str | None, scope: str | None) -> BandwidthTable:
    items = table.entries(op=op, scope=scope)
    if not items:
        have = ", ".join(sorted({f"{e.op} ({e.scope})" for e in table.items}))
        wanted = " ".join(part for part in (op, scope and f"scope {scope}") if part)
        raise UsageError(f"{table.source}: nothing measured for {wanted}; the run has {have}")
    return dataclasses.replace(table, items=items)


def _sizes(text: str) -> list[int]:
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes or min(sizes) <= 0:
        raise UsageError(f"--at {text!r}: give one or more positive sizes, e.g. 4M or 1K,1M")
    return sizes


def _answers(table: BandwidthTable, sizes: list[int]) -> list[dict]:
    rows = []
    for entry in table.items:
        for size in sizes:
            rows.append(
                {
                    **_entry_columns(entry),
                    "size_bytes": size,
                    "time_us": entry.time_us(size),
                    "statistic": entry.time_stat,
                    "busbw_gbps": entry.busbw_gbps(size),
                    "how": _how(entry, size),
                }
            )
    return rows


def _how(entry: Entry, size: int) -> str:
    if size in entry.sizes:
        return "measured"
    return "interpolated" if entry.sizes[0] < size < entry.sizes[-1] else "extrapolated"


def _entry_columns(entry: Entry) -> dict:
    return {
        "op": entry.op,
        "scope": entry.scope,
        "group_size": entry.group_size,
        "dtype": entry.dtype,
        "in_place": entry.in_place,
        "direction": entry.direction or "",
    }


def _print_answers(table: BandwidthTable, sizes: list[int], form: str) -> None:
    rows = _answers(table, sizes)
    if form == "json":
        print(json.dumps({"source": table.source, "answers": rows}, indent=2))
        return
    if form == "csv":
        _write_csv(rows)
        return
    from rich.table import Table

    from commbench import terminal

    view = Table(title=f"Time per collective, {table.source}", title_justify="left")
    for name in ("op", "scope", "ranks", "dtype", "size", "time (us)", "statistic", "busbw (GB/s)", "how"):
        view.add_column(name, justify="right" if name in ("ranks", "size", "time (us)", "busbw (GB/s)") else "left")
    for row in rows:
        view.add_row(
            row["op"],
            row["scope"],
            str(row["group_size"]),
            row["dtype"],
            format_size(row["size_bytes"]),
            f"{row['time_us']:.1f}",
            row["statistic"],
            f"{row['busbw_gbps']:.3g}",
            row["how"],
        )
    console = terminal.console()
    console.print(view)
    console.print(STATISTIC_NOTE)


def _print_text(table: BandwidthTable) -> None:
    from rich.table import Table

    from commbench import terminal

    console = terminal.console()
    console.print(
        f"Bandwidth table of {table.source}: {len(table.items)} entries, "
        "model time_us = alpha_us + size x busbw_factor / (busbw_GB/s x 1e3)"
    )
    console.print(STATISTIC_NOTE)
    for entry in table.items:
        fit = entry.fit
        console.print(
            f"\n[bold]{entry.label}[/bold]: alpha {fit.alpha_us:.2f} us, busbw {fit.busbw_gbps:.3g} GB/s, "
            f"fit error {fit.rms_rel_error:.1%} rms / {fit.max_rel_error:.1%} max, {len(entry.sizes)} points"
        )
        view = Table()
        for name in ("size", f"time (us, {entry.time_stat})", "busbw (GB/s)", "model (us)", "model error"):
            view.add_column(name, justify="right")
        model = model_time_us(fit, entry.sizes, entry.busbw_factor)
        for size, time, busbw, fitted in zip(entry.sizes, entry.times_us, entry.measured_busbw_gbps, model):
            view.add_row(
                format_size(int(size)), f"{time:.2f}", f"{busbw:.3g}", f"{fitted:.2f}", f"{(fitted - time) / time:+.1%}"
            )
        console.print(view)


# why a sweep's printout and this table can disagree at the same size (4K: 453 us there, 1,165 here)
STATISTIC_NOTE = (
    "time: the statistic each entry names, the mean per op where the run recorded it (what a "
    "training step pays, and what the planner reads); `commbench run` prints the median of the "
    "slowest rank, which is lower when some iterations are slow"
)


def _write_csv(rows: list[dict]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def _write_calculon(table: BandwidthTable, path: str) -> None:
    from commbench.data.calculon import calculon_networks

    try:
        exported = calculon_networks(table)
    except ValueError as exc:
        raise UsageError(f"--calculon: {exc}") from None
    try:
        Path(path).write_text(json.dumps(exported, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--calculon: cannot write {path}: {exc.strerror or exc}") from None
    print(
        f"wrote {path}: {len(exported['networks'])} Calculon network tier(s); "
        f"lost in the export: {'; '.join(exported['commbench']['lost'][:3])} ...",
        file=sys.stderr,
    )
