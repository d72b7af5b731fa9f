"""Browse the results folder in a web dashboard (Dash): runs, topology, bandwidth, overlap, planner.

Pages:
  Runs       every run directory with its date, backend, nodes, ranks, scopes and state; tick
             runs to compare them on the other pages
  Topology   nodes, GPUs, NICs and switches as a network picture, links coloured by type or by
             the bandwidth a run measured; the GPU matrix in nvidia-smi words; pairwise heatmap
  Bandwidth  busbw / algbw against message size per op and scope, runs overlaid, the fitted
             latency-bandwidth model, the nominal link rate, latency at small sizes, a table
             and CSV download
  Overlap    compute and communication timelines per rank from analysed traces, overlap % and
             exposed communication per iteration; `commbench overlap` runs
  Planner    ranked training layouts with step-time breakdown, memory per GPU and the simulated
             step, priced from a hardware preset or a measured run
Runs written while the dashboard is up appear without a restart. It listens on 127.0.0.1 only
unless --host says otherwise: it has no login, so expose it with care. Needs the dashboard extra
(pip install 'commbench[dashboard]').

Examples:
  commbench dashboard
  commbench dashboard --results /shared/results --port 8080
"""

from __future__ import annotations

import argparse
from pathlib import Path

from commbench.errors import UsageError

HELP = "browse results in a web dashboard: runs, topology, bandwidth, overlap, planner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", metavar="DIR", help="results folder to browse (default: results/)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8050, help="port to listen on (default 8050)")
    parser.add_argument("--debug", action="store_true", help="Dash debug mode: reloader and in-page error details")


def main(args: argparse.Namespace) -> int:
    results_dir = Path(args.results)
    if not results_dir.is_dir():
        raise UsageError(f"--results {args.results}: no such folder")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: must be between 1 and 65535")
    try:
        from dashboard.app import create_app
    except ImportError as exc:
        raise UsageError(f"the dashboard needs its extra ({exc.name} is missing): pip install 'commbench[dashboard]'") from None
    app = create_app(results_dir)
    print(f"commbench dashboard: serving {results_dir.resolve()} at http://{args.host}:{args.port}/ (Ctrl-C stops)")
    app.run(host=args.host, port=args.port, debug=args.debug)
    return 0
