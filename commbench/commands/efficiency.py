"""How close a training job's collectives came to what the benchmark measured on the same nodes.

  commbench import nccl-inspector nccl-inspector-4711/ --out results/
  commbench efficiency results/inspector-4711-ab12cd --against results/20261201-...-sweep
  commbench efficiency inspector-4711-ab12cd --against baseline.json --json
  commbench efficiency inspector-4711-ab12cd            # the latest benchmark of the job's nodes (--db)

JOB is a run directory written by `commbench import nccl-inspector` (or its run id in the
database). --against is a benchmark run (directory or run id), or a baseline file from
`commbench baseline create`; without it, the newest complete commbench sweep in the database whose
nodes are exactly the job's.

Per communicator, op and size bucket: the job's busbw, the benchmark's at the same sizes (its
bandwidth table, read at each call's exact size, same op, scope and group size), their ratio
with a 95% bootstrap interval over the calls, and the communicators below --below named with
their hosts and slowest ranks. The method: commbench/analysis/efficiency.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from commbench.commands.store_options import add_db_argument, fraction_arg
from commbench.errors import UsageError

HELP = "a job's collectives (NCCL Inspector import) as a fraction of the benchmark on its nodes"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from commbench.analysis.efficiency import FAR_BELOW

    parser.add_argument("job", metavar="JOB", help="run directory (or run id) of `commbench import nccl-inspector`")
    parser.add_argument(
        "--against",
        metavar="RUN|BASELINE",
        help="benchmark run directory or run id, or a baseline "
        "file (default: the newest sweep of the job's nodes in the database)",
    )
    parser.add_argument(
        "--below",
        type=fraction_arg,
        default=FAR_BELOW,
        metavar="FRACTION",
        help=f"name communicators below this fraction of the benchmark (default {FAR_BELOW * 100:.0f}%%)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_db_argument(parser)


def main(args: argparse.Namespace) -> int:
    from commbench.analysis.efficiency import efficiency_of_runs
    from commbench.data.nccl_inspector import SOURCE
    from commbench.data.rundir import load_run
    from commbench.data.store_location import db_path

    db = db_path(args.db)
    job = load_run(_resolve(args.job, db))
    if job.info.source != SOURCE:
        raise UsageError(
            f"{args.job}: not an NCCL Inspector job (source {job.info.source!r}); "
            "import one with `commbench import nccl-inspector`"
        )
    tables, against = _benchmark(args.against, job, db)
    table = tables[False]
    result = efficiency_of_runs(job, tables, below=args.below)
    if not result.rows:
        reasons = "; ".join(sorted({s.why for s in result.skipped})) or "the job has no rows"
        raise UsageError(f"{args.job}: no row of the job can be compared with {against}: {reasons}")
    if args.json:
        print(json.dumps(_document(job, against, table, result), indent=1))
    else:
        _print_table(job, against, table, result)
    return 0


def _resolve(name: str, db: Path) -> Path:
    from commbench.analysis.runs import resolve_run

    return resolve_run(name, db)


def _benchmark(against: str | None, job, db: Path):
    """({in_place: BandwidthTable}, what it is in words) for --against, or for the newest sweep of the job's nodes."""
    if against is None:
        path = _latest_sweep_of(sorted(node.hostname for node in job.info.nodes), db)
        return _tables_of_run(path), f"{path} (newest sweep of the job's nodes in {db})"
    candidate = Path(against)
    if candidate.is_file():
        return {variant: _table_from_baseline(candidate, variant) for variant in (True, False)}, f"baseline {candidate}"
    return _tables_of_run(_resolve(against, db)), str(_resolve(against, db))


def _tables_of_run(path: Path) -> dict:
    from commbench.analysis.efficiency import tables_of_run
    from commbench.data.rundir import load_run

    return tables_of_run(load_run(path))


def _latest_sweep_of(hosts: list[str], db: Path) -> Path:
    from commbench.data.store import query

    if not db.is_file():
        raise UsageError(
            f"no --against and no database at {db}: name a benchmark run, or ingest one (commbench db ingest)"
        )
    _, rows = query(
        db,
        "SELECT path FROM runs WHERE kind = 'sweep' AND source = 'commbench' AND complete "
        "AND list_sort(nodes) = ?::VARCHAR[] ORDER BY created DESC NULLS LAST LIMIT 1",
        [hosts],
    )
    if not rows:
        raise UsageError(
            f"{db}: no complete commbench sweep of exactly the job's nodes ({', '.join(hosts)}); pass --against"
        )
    return Path(rows[0][0])


def _table_from_baseline(path: Path, in_place: bool):
    """A bandwidth table from a baseline's rows (their median time per row; no mean is kept there)."""
    from commbench.analysis.baseline import read_baseline
    from commbench.data.bandwidth_table import BandwidthTable
    from commbench.data.samples import KEY_FIELDS

    baseline = read_baseline(path)
    records = []
    for row in baseline["rows"]:
        record = dict(zip(KEY_FIELDS, row["key"]))
        size, time_us, busbw = int(record["size_bytes"]), float(row["time_us"]), float(row["busbw_gbps"])
        if record.get("scope") == "pair" or size <= 0 or time_us <= 0:
            continue
        records.append({**record, "time_us": time_us, "busbw_factor": busbw * time_us * 1e3 / size, "n_groups": 1})
    table = BandwidthTable.from_records(records, source=str(path), in_place=in_place)
    if not table.items:
        raise UsageError(f"{path}: the baseline has no collective rows to compare with")
    return table


def _document(job, against: str, table, result) -> dict:
    return {
        "job": {
            "run": str(job.path),
            "job_id": job.info.args.get("job_id"),
            "hosts": [n.hostname for n in job.info.nodes],
            "source": job.info.source,
            "note": job.info.note,
        },
        "against": {"benchmark": against, "synthetic": table.synthetic, "warnings": table.warnings},
        "below": result.below,
        "rows": [row.to_dict() for row in result.rows],
        "far_below": result.far_below_communicators(),
        "skipped": [vars(s) for s in result.skipped],
    }


def _print_table(job, against: str, table, result) -> None:
    from commbench.units import format_size

    print(f"# job {job.info.args.get('job_id')} ({job.path}) against {against}")
    if table.synthetic:
        print("# the benchmark is SYNTHETIC: " + table.warnings[0])
    print(
        f"# {'communicator':<28} {'op':<15} {'scope':<6} {'n':>3} {'size':>6} {'calls':>6} {'job GB/s':>9} "
        f"{'bench GB/s':>10} {'efficiency':>10}  95% interval"
    )
    for row in sorted(result.rows, key=lambda r: (r.comm_name, r.op, r.size_bytes)):
        mark = " *" if row.extrapolated else ""
        print(
            f"  {_comm_label(row):<28} {row.op:<15} {row.scope:<6} {row.group_size:>3} {format_size(row.size_bytes):>6} "
            f"{row.calls:>6} {row.job_busbw_gbps:>9.4g} {row.benchmark_busbw_gbps:>10.4g} {row.efficiency:>10.1%}  "
            f"{row.ci_low:.1%}-{row.ci_high:.1%}{mark}"
        )
    if any(row.extrapolated for row in result.rows):
        print("  * outside the benchmark's measured sizes: read from its fitted model")
    for skipped in result.skipped:
        print(f"  skipped {skipped.op} {format_size(skipped.size_bytes)} of {skipped.comm_id}: {skipped.why}")
    far = result.far_below_communicators()
    if not far:
        print(f"no communicator below {result.below:.0%} of the benchmark")
    for comm in far:
        ranks = ", ".join(
            f"rank {r['rank']} on {r['host']} ({r['vs_comm_median']:.2f}x the median rank)" for r in comm["slow_ranks"]
        )
        print(
            f"FAR BELOW: communicator {comm['comm_id']} ({comm['comm_name']}) on {', '.join(comm['hosts'])}: "
            f"{comm['rows']} row(s) under {result.below:.0%}, worst {comm['worst_efficiency']:.1%}"
            + (f"; slowest ranks: {ranks}" if ranks else "")
        )


def _comm_label(row) -> str:
    label = f"{row.comm_name} {row.comm_id}"
    return label if len(label) <= 28 else label[:27] + "~"
