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
Runs written while the dashboard is up appear without a restart. Needs the dashboard extra
(pip install 'commbench[dashboard]').

Serving: under waitress, a production WSGI server (Flask's development server only with --debug).
It listens on 127.0.0.1 unless --host says otherwise; beyond this machine it requires a login and
refuses to start without one (or --no-auth). Credentials never go on the command line: put one
line in a file (--auth-file, chmod 600) or in $COMMBENCH_DASHBOARD_AUTH:
  user:password   HTTP basic auth (the browser asks for them)
  TOKEN           a token of 16+ characters: `Authorization: Bearer TOKEN`, or basic auth with
                  any user name and the token as password
The app only reads the results folder and the database; no page writes to either.

Examples:
  commbench dashboard
  commbench dashboard --results /shared/results --port 8080
  openssl rand -hex 16 > ~/.commbench-token && chmod 600 ~/.commbench-token
  commbench dashboard --host 0.0.0.0 --auth-file ~/.commbench-token
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from commbench.errors import UsageError

HELP = "browse results in a web dashboard: runs, topology, bandwidth, overlap, planner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results", default="results", metavar="DIR", help="results folder to browse (default: results/)"
    )
    parser.add_argument(
        "--models",
        default=None,
        metavar="DIR",
        help="a folder of model config.json and processor JSON files the Planner may offer, besides "
        "the presets and those inside --results (the browser only ever picks among them)",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    parser.add_argument("--port", type=int, default=8050, help="port to listen on (default 8050)")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="Dash debug mode on Flask's development server: reloader "
        "and in-page error details (never for a shared dashboard)",
    )
    parser.add_argument(
        "--auth-file",
        metavar="FILE",
        help="file holding 'user:password' (basic auth) or a token "
        "(default: $COMMBENCH_DASHBOARD_AUTH; required beyond 127.0.0.1 unless --no-auth)",
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="serve beyond this machine without a login: anyone who can reach the port reads every result",
    )


def main(args: argparse.Namespace) -> int:
    results_dir = Path(args.results)
    if not results_dir.is_dir():
        raise UsageError(f"--results {args.results}: no such folder")
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: must be between 1 and 65535")
    try:
        from dashboard.app import create_app
        from dashboard.server import AUTH_ENV, is_loopback, load_credentials, protect, serve, warm_up
    except ImportError as exc:
        raise UsageError(
            f"the dashboard needs its extra ({exc.name} is missing): pip install 'commbench[dashboard]'"
        ) from None

    credentials, warnings = load_credentials(args.auth_file)
    if credentials and args.no_auth:
        raise UsageError("--no-auth and credentials (--auth-file or $" + AUTH_ENV + "): choose one")
    if credentials is None and not is_loopback(args.host) and not args.no_auth:
        raise UsageError(
            f"--host {args.host} serves beyond this machine and needs a login: --auth-file FILE or "
            f"${AUTH_ENV} ('user:password' or a token), or --no-auth to serve without one"
        )
    if args.models is not None and not Path(args.models).is_dir():
        raise UsageError(f"--models {args.models}: no such folder")
    app = create_app(results_dir, args.models)
    warm_up(app)  # before the login is in front of it, and before the first burst of requests
    protect(app.server, credentials)
    for warning in warnings:
        print(f"commbench dashboard: warning: {warning}", file=sys.stderr)
    login = f"login required ({credentials.source})" if credentials else "no login"
    if args.no_auth:
        print(
            f"commbench dashboard: --no-auth: anyone who can reach {args.host}:{args.port} can read every result "
            f"in {results_dir.resolve()} and its database, with no login",
            file=sys.stderr,
        )
    server = "Flask development server (--debug)" if args.debug else "waitress"
    print(
        f"commbench dashboard: serving {results_dir.resolve()} at http://{args.host}:{args.port}/ with {server}, "
        f"{login} (Ctrl-C stops)",
        flush=True,
    )
    if args.debug:
        app.run(host=args.host, port=args.port, debug=True)
    else:
        serve(app.server, args.host, args.port)
    return 0
