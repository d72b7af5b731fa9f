"""Export the results database to Prometheus: over HTTP, or as a node_exporter textfile.

  commbench metrics serve --db results.duckdb --port 9464      # Prometheus scrapes http://HOST:9464/metrics
  commbench metrics textfile /var/lib/node_exporter/textfile   # writes commbench.prom there (cron/scrontab)
  commbench metrics show                                       # print the exposition once

Every scrape (or textfile write) reads the store afresh through a read-only connection. The
families, their units and labels and the bound on their cardinality are documented in
commbench/data/metrics.py and the README ("Prometheus and Grafana"). The server binds
127.0.0.1 unless --host says otherwise; it serves only /metrics, read-only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from commbench.commands.store_options import add_db_argument
from commbench.errors import UsageError

HELP = "export the results database as Prometheus metrics (HTTP /metrics, or a node_exporter textfile)"
TEXTFILE = "commbench.prom"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="metrics_command", metavar="ACTION", required=True)
    serve = actions.add_parser("serve", help="serve /metrics over HTTP for Prometheus to scrape")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=9464, help="port (default 9464)")
    textfile = actions.add_parser("textfile", help=f"write DIR/{TEXTFILE} for node_exporter's textfile collector")
    textfile.add_argument("directory", metavar="DIR", help="node_exporter's --collector.textfile.directory")
    show = actions.add_parser("show", help="print the exposition once")
    for action in (serve, textfile, show):
        add_db_argument(action)
        action.add_argument(
            "--max-node-sets",
            type=int,
            default=None,
            metavar="N",
            help="node sets exported per cluster, newest first (default 20)",
        )


def main(args: argparse.Namespace) -> int:
    from commbench.data.metrics import MAX_NODE_SETS, exposition, registry_for
    from commbench.data.store import open_read_only
    from commbench.data.store_location import db_path

    db = db_path(args.db)
    open_read_only(db).close()  # a missing or foreign database is refused here, in one line
    limit = args.max_node_sets if args.max_node_sets is not None else MAX_NODE_SETS
    if limit < 1:
        raise UsageError(f"--max-node-sets {limit}: must be at least 1")
    if args.metrics_command == "show":
        print(exposition(db, limit), end="")
    elif args.metrics_command == "textfile":
        _write_textfile(Path(args.directory), registry_for(db, limit))
    else:
        _serve(args.host, args.port, registry_for(db, limit), db)
    return 0


def _write_textfile(directory: Path, registry) -> None:
    from prometheus_client import write_to_textfile

    if not directory.is_dir():
        raise UsageError(f"{directory}: no such folder (node_exporter's --collector.textfile.directory)")
    target = directory / TEXTFILE
    write_to_textfile(str(target), registry)  # a temporary file renamed over the old one: never read half written
    print(f"commbench metrics: wrote {target}")


def _serve(host: str, port: int, registry, db: Path) -> None:
    from prometheus_client import start_http_server

    if not 1 <= port <= 65535:
        raise UsageError(f"--port {port}: must be between 1 and 65535")
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    print(f"commbench metrics: serving {db} at http://{host}:{port}/metrics (Ctrl-C stops)", flush=True)
    try:
        while thread.is_alive():
            time.sleep(1)
    finally:
        server.shutdown()
