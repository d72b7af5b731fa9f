"""Find the bad nodes and links of a fleet in a few concurrent rounds: screen, localise by group testing,
confirm against known-good partners, report (see commbench/diagnose/strategy.py).

Two modes, one strategy and one report:
  real (default)   measures live ranks, one rank per node, launched like `commbench run`: --nproc N
                   on this machine (each local rank is a "node" of its own: a smoke test), or one
                   rank per node under torchrun or srun. With several ranks on a node, the node's
                   lowest rank represents it and the others wait idle until the end. First a
                   straggler screen: one ring over every node names the nodes the others wait for
                   (reported, not drained; --no-straggler-screen skips it). Then each round,
                   disjoint groups run send/recv rings at once (gloo, or NCCL where every rank has
                   a GPU: that path has not run on a GPU yet), each over its own communicator, so a
                   node that stops answering costs only its group: it is named after --timeout and
                   the diagnosis goes on. Rank 0 prints the report; its figures are MEASURED (source:
                   backend, size, iterations, nodes, date and command). Exit 0 when the diagnosis
                   completes (bad nodes found or not), 1 when it cannot, 2 on bad input.
  --simulate/--hosts  drives the cluster model instead: a synthetic fleet with the faults you inject,
                   noise as measured on the emulated cluster. Every figure it prints is synthetic
                   and says so.

The report: nodes to drain with reasons and evidence, links to inspect, rounds taken, the good
nodes, and the line `# exclude: <hostlist>` (Slurm hostlist syntax, for sbatch --exclude).

On Slurm (real mode), rank 0 can act on the verdicts: --slurm-plan prints the scontrol commands (a
dry run), --drain drains the nodes to drain with Reason="commbench: diagnose: <why>", --resume
resumes the good nodes that commbench drained earlier (never a node an admin drained). A cap on the
share of a partition one action drains (--max-drain, default 10%, at least one node) and the last
idle nodes (--keep-idle) hold: over the cap nothing is drained and diagnose exits 1. What is done
goes to the store's actions table (--db) and into the report; see commbench/diagnose/scheduler.py.
  commbench submit --diagnose --nodes 64 --wait -- --drain --db /shared/commbench.duckdb

A link fault is found only when a tested ring uses that link (ring neighbours in node order,
inside one screen group): a link between two nodes that never share a ring is not tested.

Examples:
  commbench diagnose --nproc 4                                   # 4 local "nodes", a smoke test
  torchrun --nnodes 8 --nproc-per-node 1 ... -m commbench diagnose --timeout 60
  srun --nodes 64 --ntasks-per-node 1 commbench diagnose --json
  commbench diagnose --simulate 1024 --faults 4
  commbench diagnose --hosts 'node[01-08]' --slow node03 --lossy node06
  commbench diagnose --hosts 'node[01-08]' --link node03,node04 --json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from commbench.commands.scheduler_options import (
    add_scheduler_arguments,
    choice_from_args,
)
from commbench.commands.store_options import add_db_argument
from commbench.config_options import add_config_arguments, config_values
from commbench.data.rundir import prepare_output_folder
from commbench.diagnose.config import REAL, DiagnoseConfig, FleetOptions
from commbench.diagnose.fleet import FleetModel, inject_node_faults
from commbench.diagnose.hostlist import expand
from commbench.diagnose.report import json_ready, save_run, text, to_dict
from commbench.diagnose.strategy import Thresholds, diagnose
from commbench.errors import UsageError

HELP = "find bad nodes and links in a few concurrent rounds (group testing) on live ranks; --simulate: a cluster model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, DiagnoseConfig, only=lambda f: f.metadata["group"] == REAL)
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help='real mode: ranks ("nodes") to start on this machine when not under torchrun/srun (default 2)',
    )
    add_config_arguments(parser, FleetOptions)
    add_config_arguments(parser, DiagnoseConfig, only=lambda f: f.metadata["group"] != REAL)
    add_scheduler_arguments(parser, "the nodes to drain (real mode)")
    add_db_argument(parser)


def main(args: argparse.Namespace) -> int:
    if args.simulate is None and args.hosts is None:
        return measure(args)
    return simulate(args)


def measure(args: argparse.Namespace) -> int:
    """Real mode: this process is one rank under a launcher, or starts --nproc local ranks."""
    from commbench.measure.launch import detect_rank_env, spawn_local

    check_real_options(args)
    if args.out_dir:
        prepare_output_folder(args.out_dir)
    choice = choice_from_args(args)
    values = config_values(args, DiagnoseConfig)
    values["out_dir"] = str(Path(args.out_dir).resolve()) if args.out_dir else None
    cfg = DiagnoseConfig(
        **values,
        slurm=choice.to_dict() if choice.wanted else None,
        command="commbench " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
    )
    env = detect_rank_env()
    if env is not None:
        from commbench.measure.diagnose import run_rank

        return run_rank(cfg, env)
    nproc = 2 if args.nproc is None else args.nproc
    if nproc < 2:
        raise UsageError(f"--nproc {nproc}: a diagnosis needs at least 2 ranks")
    return spawn_local(nproc, cfg.to_json(), "diagnose", grace_s=2.0, leader_decides=True)


def check_real_options(args: argparse.Namespace) -> None:
    """Real mode's own values, refused before any rank starts (and by `submit --diagnose` before sbatch)."""
    model_only = [
        flag
        for flag, value in (
            ("--faults", args.faults),
            ("--slow", args.slow),
            ("--lossy", args.lossy),
            ("--link", args.link),
        )
        if value
    ]
    if model_only:
        raise UsageError(f"{model_only[0]} injects a fault into the cluster model: give --simulate N or --hosts too")
    for flag, value, low in (("--iters", args.iters, 1), ("--warmup", args.warmup, 0), ("--size", args.size, 4)):
        if value < low:
            raise UsageError(f"{flag} {value}: must be at least {low}")
    if args.timeout_s <= 0:
        raise UsageError(f"--timeout {args.timeout_s:g}: must be positive (seconds per round)")
    if args.group_size is not None and args.group_size < 2:
        raise UsageError(f"--group-size {args.group_size}: must be at least 2")


def simulate(args: argparse.Namespace) -> int:
    if args.slurm_plan or args.drain or args.resume:
        raise UsageError(
            "--slurm-plan, --drain and --resume act on a real diagnosis, not on the cluster model's "
            "synthetic one (leave out --simulate and --hosts)"
        )
    names = node_names(args.hosts, args.simulate)
    check_sizes(args, len(names))
    model = FleetModel(len(names), np.random.default_rng(args.seed))
    inject_named_faults(model, names, args)
    if args.faults:
        inject_node_faults(model, args.faults)
    result = diagnose(model, len(names), Thresholds(group_size=args.group_size or Thresholds.group_size))
    source = f"synthetic: commbench.diagnose.fleet cluster model, seed {args.seed}, noise sigma {model.noise_sigma}"
    report = to_dict(result, names, source=source)
    print(json.dumps(json_ready(report), indent=1) if args.json else text(report))
    if args.out_dir:
        prepare_output_folder(args.out_dir)
        options = {k: v for k, v in vars(args).items() if k not in ("handler", "command")}
        path = save_run(report, args.out_dir, options, synthetic=True, note=f"{source}; faults injected: see args")
        print(f"# Results: {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def node_names(hosts: str | None, simulate: int | None) -> list[str]:
    if hosts is None:
        if simulate is None:
            raise UsageError("give the fleet: --simulate N or --hosts HOSTLIST")
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
