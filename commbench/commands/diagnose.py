"""Find the bad nodes and links of a fleet in a few concurrent rounds: screen, localise by group testing,
confirm against known-good partners, report (see commbench/diagnose/strategy.py).

This version drives the strategy with the cluster model (--simulate): a synthetic fleet with the
faults you inject, noise as measured on the emulated cluster. Its output is the report a real run
gives: nodes to drain with reasons and evidence, links to inspect, rounds taken, a Slurm exclude
list in hostlist syntax and the good nodes. Every figure it prints is synthetic and says so.
A link fault is found only when a tested ring uses that link (ring neighbours in node order,
inside one screen group): a link between two nodes that never share a ring is not tested.

Examples:
  commbench diagnose --simulate 1024 --faults 4
  commbench diagnose --hosts 'node[01-08]' --slow node03 --lossy node06
  commbench diagnose --hosts 'node[01-08]' --link node03,node04 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from commbench.diagnose.fleet import FleetModel, inject_node_faults
from commbench.diagnose.hostlist import expand
from commbench.diagnose.report import save_run, text, to_dict
from commbench.diagnose.strategy import Thresholds, diagnose
from commbench.errors import UsageError

HELP = "find bad nodes and links in a few concurrent rounds (group testing); --simulate drives a cluster model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    fleet = parser.add_argument_group("the fleet (a cluster model: the real-rank driver is not built yet)")
    fleet.add_argument("--simulate", type=int, metavar="N", help="nodes of the model (default: as many as --hosts names)")
    fleet.add_argument("--hosts", metavar="HOSTLIST|@FILE", help="node names, Slurm hostlist syntax or @file (one list per line)")
    fleet.add_argument("--faults", type=int, default=0, metavar="D", help="random faulty nodes, alternately slow and lossy")
    fleet.add_argument("--slow", action="append", default=[], metavar="NODE", help="this node at 0.3 x line rate (repeatable)")
    fleet.add_argument("--lossy", action="append", default=[], metavar="NODE", help="this node loses 3%% of what it receives")
    fleet.add_argument("--link", action="append", default=[], metavar="A,B", help="the path A-B at 0.3 x line rate only")
    fleet.add_argument("--seed", type=int, default=0, help="random seed of the model (default 0)")
    parser.add_argument("--group-size", type=int, default=None, metavar="G",
                        help=f"screen group size (default {Thresholds.group_size}; smaller on small fleets)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", metavar="DIR", help="also write a run directory under DIR (the dashboard's Diagnose page shows it)")


def main(args: argparse.Namespace) -> int:
    names = node_names(args.hosts, args.simulate)
    check_sizes(args, len(names))
    model = FleetModel(len(names), np.random.default_rng(args.seed))
    inject_named_faults(model, names, args)
    if args.faults:
        inject_node_faults(model, args.faults)
    result = diagnose(model, len(names), Thresholds(group_size=args.group_size or Thresholds.group_size))
    source = f"synthetic: commbench.diagnose.fleet cluster model, seed {args.seed}, noise sigma {model.noise_sigma}"
    report = to_dict(result, names, source=source)
    print(json.dumps(report, indent=1) if args.json else text(report))
    if args.out:
        options = {k: v for k, v in vars(args).items() if k not in ("handler", "command")}
        path = save_run(report, args.out, options, synthetic=True, note=f"{source}; faults injected: see args")
        print(f"# Results: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def node_names(hosts: str | None, simulate: int | None) -> list[str]:
    if hosts is None:
        if simulate is None:
            raise UsageError("give the fleet: --simulate N or --hosts HOSTLIST (the real-rank driver is not built yet)")
        if simulate < 2:
            raise UsageError(f"--simulate {simulate}: a diagnosis needs at least 2 nodes")
        return [f"node{i:0{len(str(simulate - 1))}d}" for i in range(simulate)]
    try:
        listed = expand(Path(hosts[1:]).read_text().replace("\n", ",").strip(",") if hosts.startswith("@") else hosts)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"cannot read the host list {hosts!r}: {exc}") from None
    if len(set(listed)) != len(listed) or len(listed) < 2:
        raise UsageError(f"the host list {hosts!r} must name at least 2 different nodes, each once")
    if simulate is not None and simulate != len(listed):
        raise UsageError(f"--simulate {simulate} but the host list names {len(listed)} nodes")
    return listed


def check_sizes(args: argparse.Namespace, n_nodes: int) -> None:
    if args.group_size is not None and not 2 <= args.group_size <= n_nodes:
        raise UsageError(f"--group-size {args.group_size}: must be between 2 and the fleet's {n_nodes} nodes")
    if args.faults < 0 or args.faults > n_nodes:
        raise UsageError(f"--faults {args.faults}: must be between 0 and the fleet's {n_nodes} nodes")


def inject_named_faults(model: FleetModel, names: list[str], args: argparse.Namespace) -> None:
    index = {name: i for i, name in enumerate(names)}

    def node(name: str) -> int:
        if name not in index:
            raise UsageError(f"{name!r} is not in the fleet ({names[0]} ... {names[-1]})")
        return index[name]

    for name in args.slow:
        model.node_rate[node(name)] = 0.3
    for name in args.lossy:
        model.node_loss_pct[node(name)], model.node_rate[node(name)] = 3.0, 0.95
    for pair in args.link:
        ends = pair.split(",")
        if len(ends) != 2 or ends[0] == ends[1]:
            raise UsageError(f"--link {pair!r}: give two different nodes, A,B")
        model.link_rate[tuple(sorted(node(e) for e in ends))] = 0.3
