"""A node-local health check, for Slurm's HealthCheckProgram, a prolog or an epilog: this node alone,
in a few seconds (commbench/measure/health.py says what is measured).

  intra  GPU to GPU copies for every ordered pair (NVLink or PCIe, as the node has it); without two
         GPUs, the gloo equivalent: send/recv between two gloo ranks over loopback. GB/s.
  nic    with --nic-peer ADDR (a neighbour, the switch's or gateway's address: the traffic lands
         there, so it is never guessed; nothing needs to run there): each interface that is up
         with an IPv4 address (or --nic IF) sends UDP to it for --seconds, the rate read from the
         NIC's own transmit counter. Gbit/s. When the host could not offer more than the NIC
         carried (a busy node: the sender was the limit), the figure is a lower bound and is not
         failed for being low ("inconclusive" with -v); only a NIC that queued or dropped what
         it was given is graded.
Each figure is graded against a stored baseline (--baseline FILE, written on a healthy node of the
same kind with --write-baseline FILE) or a hardware preset (--expect SYSTEM: GPU pairs against the
preset's intra-node link rate and efficiency; figures the preset does not describe are not graded,
and say so with -v); NICs also against their line rate (--nic-rate, e.g. 400gbit, from the NIC's
specification). A figure fails when it is below (1 - --tolerance) of what was expected.

Output: one line per failure on stdout (nothing when all pass; -v adds the passes; --json all).
Exit 0: pass, 1: fail, 2: bad input. With --slurm the node acts on itself: a failing node drains
itself (Reason="commbench: health: <first failure>"), a passing node that commbench drained is
resumed (a drain an admin made is never undone), and what it did goes to the store's actions table
when a database is named (--db or $COMMBENCH_DB). The cap holds here too: a node does not drain
itself when that would make the commbench-drained nodes of its partition more than --max-drain of
it (default 10%, at least one node), so a bad reference or a noisy night cannot empty a partition.

  commbench health --write-baseline /shared/health-cpu.json --nic-peer 10.0.0.1   # on a healthy node
  commbench health --baseline /shared/health-cpu.json --nic-peer 10.0.0.1 --slurm # HealthCheckProgram
  commbench health --expect dgx-h100 --checks intra

slurm.conf: HealthCheckProgram=/etc/slurm/commbench-health.sh (a script running the line above),
HealthCheckInterval=300, HealthCheckNodeState=ANY (drained nodes are checked too, so they come back).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import socket
import sys
from dataclasses import asdict
from pathlib import Path

from commbench.commands.scheduler_options import _cap_arg
from commbench.commands.store_options import fraction_arg
from commbench.data.rundir import atomic_write_text, utc_now
from commbench.data.store_location import DB_ENV
from commbench.errors import UsageError

HELP = "node-local health check (HealthCheckProgram, prolog, epilog): intra-node and NIC bandwidth; exit 1 on failure"
CHECKS = ("intra", "nic")
BASELINE_FORMAT = "commbench-health-baseline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checks",
        default=None,
        help="which checks, comma-separated: intra, nic (default: intra, and nic when --nic-peer is given)",
    )
    against = parser.add_mutually_exclusive_group()
    against.add_argument("--baseline", metavar="FILE", help="grade against this file (from --write-baseline)")
    against.add_argument("--expect", metavar="SYSTEM", help="grade against a hardware preset (e.g. dgx-h100)")
    against.add_argument(
        "--write-baseline", metavar="FILE", help="measure and write the figures as a baseline; no grading"
    )
    parser.add_argument(
        "--tolerance",
        type=fraction_arg,
        default=0.30,
        help="a figure fails below (1 - this) of its expectation (default 30%%)",
    )
    parser.add_argument(
        "--nic", action="append", default=[], metavar="IF", help="interfaces to check (default: all up)"
    )
    parser.add_argument("--nic-peer", metavar="ADDR", help="where the NIC check sends (an address on the NIC's link)")
    parser.add_argument(
        "--nic-rate",
        type=rate_arg,
        metavar="RATE",
        help="every checked NIC's line rate, e.g. 1gbit, 25G, 400gbit (the NIC's specification): "
        "its expectation, over the baseline's",
    )
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds of traffic per NIC (default 1)")
    parser.add_argument("--size", type=int, default=8 << 20, help="bytes per intra-node transfer (default 8 MiB)")
    parser.add_argument("--iters", type=int, default=5, help="timed intra-node transfers (default 5)")
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="act on this node: drain it when it fails, resume it when it passes and commbench drained it",
    )
    parser.add_argument("--node-name", help="this node's Slurm name (default: $SLURMD_NODENAME, else the hostname)")
    parser.add_argument(
        "--max-drain",
        type=_cap_arg,
        default=0.10,
        metavar="SHARE",
        help="with --slurm: commbench-drained nodes may be at most this share of a partition (default 10%%)",
    )
    parser.add_argument(
        "--db", metavar="FILE", default=None, help=f"record --slurm actions here (default ${DB_ENV}; else none)"
    )
    parser.add_argument("--json", action="store_true", help="every figure and grade as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print the checks that pass")


def main(args: argparse.Namespace) -> int:
    checks = _checks(args)
    expected = _expectations(args)
    if args.slurm:
        from commbench.diagnose import scheduler

        scheduler.require_slurm()
    figures = measure(args, checks)
    if args.write_baseline:
        return _write(args, figures)
    grades = [_grade(figure, _expected_for(figure, expected), args.tolerance) for figure in figures]
    failures = [g for g in grades if g["status"] == "FAIL"]
    _print(args, grades)
    status = 1 if failures else 0
    if args.slurm:
        status = max(status, _act(args, failures))
    return status


def rate_arg(text: str) -> float:
    """'400gbit' / '400G' / '300mbit' -> Gbit/s."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([gGmMkK])(?:bit|b|bps)?(?:/s)?\s*", text)
    try:
        value = float(match.group(1)) * {"g": 1.0, "m": 1e-3, "k": 1e-6}[match.group(2).lower()] if match else -1
    except ValueError:
        value = -1
    if value <= 0:
        raise argparse.ArgumentTypeError(f"bad rate {text!r}: write e.g. 1gbit, 400G or 300mbit")
    return value


def _checks(args: argparse.Namespace) -> list[str]:
    text = args.checks or ("intra,nic" if args.nic_peer else "intra")
    checks = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        raise UsageError(f"--checks {text!r}: choose from {', '.join(CHECKS)}")
    if "nic" in checks and not args.nic_peer:
        raise UsageError("--checks nic needs --nic-peer ADDR: an address on the NIC's link to send to")
    if args.seconds <= 0 or args.iters < 1 or args.size < 4:
        raise UsageError("--seconds must be positive, --iters at least 1, --size at least 4 bytes")
    if not (args.baseline or args.expect or args.write_baseline or args.nic_rate):
        raise UsageError(
            "give what to grade against: --baseline FILE, --expect SYSTEM or --nic-rate RATE (or --write-baseline FILE)"
        )
    return checks


def _expectations(args: argparse.Namespace) -> dict[str, tuple[float, str]]:
    """figure name -> (expected value, where it comes from); --nic-rate as the "nic" entry."""
    expected = _stored(args)
    if args.nic_rate:
        expected["nic"] = (args.nic_rate, f"line rate --nic-rate {args.nic_rate:g} Gbit/s")
    return expected


def _stored(args: argparse.Namespace) -> dict[str, tuple[float, str]]:
    if args.baseline:
        try:
            data = json.loads(Path(args.baseline).read_text())
            assert data["format"] == BASELINE_FORMAT
            return {
                name: (entry["value"], f"baseline {args.baseline} ({data['host']}, {data['created']})")
                for name, entry in data["figures"].items()
                if entry["value"] is not None
            }
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            raise UsageError(f"{args.baseline}: not a health baseline (write one with --write-baseline)") from None
    if args.expect:
        return _preset(args.expect)
    return {}


def _preset(name: str) -> dict[str, tuple[float, str]]:
    """GPU pairs at the preset's intra-node rate times its efficiency (GB/s); nothing else is described."""
    from commbench.modeling.hardware import load_system

    system = load_system(name)
    rate = system.intra.bandwidth * system.intra.efficiency / 1e9
    where = f"preset {system.name}: {system.intra.name} x efficiency {system.intra.efficiency}"
    return {
        f"intra gpu{a}->gpu{b}": (rate, where)
        for a in range(system.gpus_per_host)
        for b in range(system.gpus_per_host)
        if a != b
    }


def measure(args: argparse.Namespace, checks: list[str]) -> list:
    from commbench.measure import health

    figures = []
    if "nic" in checks:
        names = health.interfaces(args.nic or None)
        if not names:
            raise UsageError(
                "no network interface is up with an IPv4 address here (besides loopback): nothing for --checks nic"
            )
        figures += [health.nic_egress(name, args.nic_peer, args.seconds) for name in names]
    if "intra" in checks:
        figures += health.intra(args.size, args.iters)
    return figures


def _expected_for(figure, expected: dict) -> tuple[float, str] | None:
    if figure.name.startswith("nic ") and "nic" in expected:
        return expected["nic"]
    return expected.get(figure.name)


def _grade(figure, expected: tuple[float, str] | None, tolerance: float) -> dict:
    row = {**asdict(figure), "expected": None, "source": None}
    if figure.value is None:
        return {**row, "status": "FAIL", "line": f"FAIL {figure.name}: not measured ({figure.note})"}
    if expected is None:
        return {
            **row,
            "status": "ungraded",
            "line": f"ungraded {figure.name}: {figure.value:.4g} {figure.unit} (nothing to grade it against)",
        }
    value, source = expected
    share = figure.value / value if value else float("inf")
    status = "pass" if share >= 1 - tolerance else "FAIL"
    if status == "FAIL" and figure.bound == "sender":
        return {
            **row,
            "expected": value,
            "source": source,
            "status": "inconclusive",
            "line": f"inconclusive {figure.name}: at least {figure.value:.4g} {figure.unit} (this host, not the NIC, "
            f"was the limit; expected {value:.4g}, {source})",
        }
    return {
        **row,
        "expected": value,
        "source": source,
        "status": status,
        "line": f"{status} {figure.name}: {figure.value:.4g} {figure.unit}, {share:.0%} of the expected "
        f"{value:.4g} (limit {1 - tolerance:.0%}; {source})",
    }


def _print(args: argparse.Namespace, grades: list[dict]) -> None:
    if args.json:
        print(json.dumps({"host": _node(args), "created": utc_now(), "grades": grades}, indent=1))
        return
    for grade in grades:
        if grade["status"] == "FAIL" or args.verbose:
            print(grade["line"], flush=True)


def _write(args: argparse.Namespace, figures: list) -> int:
    missing = [f for f in figures if f.value is None]
    for figure in missing:
        print(f"FAIL {figure.name}: not measured ({figure.note})", file=sys.stderr)
    if missing:
        raise UsageError(f"{len(missing)} figure(s) not measured: no baseline written to {args.write_baseline}")
    data = {
        "format": BASELINE_FORMAT,
        "host": _node(args),
        "created": utc_now(),
        "command": "commbench " + shlex.join(sys.argv[1:]),
        "figures": {f.name: {"value": f.value, "unit": f.unit, "note": f.note} for f in figures},
    }
    atomic_write_text(Path(args.write_baseline), json.dumps(data, indent=1) + "\n")
    for figure in figures:
        print(f"baseline {figure.name}: {figure.value:.4g} {figure.unit} ({figure.note})")
    print(f"# written: {args.write_baseline}")
    return 0


def _node(args: argparse.Namespace) -> str:
    return args.node_name or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _act(args: argparse.Namespace, failures: list[dict]) -> int:
    """Drain this node (under the cap) when it failed; resume it when it passed and commbench drained it."""
    from commbench.diagnose import scheduler

    node = _node(args)
    db = args.db or os.environ.get(DB_ENV)
    choice = scheduler.Choice(drain=bool(failures), resume=not failures, cap=args.max_drain, keep_idle=0, db=db)
    if not failures:
        return scheduler.act(choice, {}, [node], None, "health")[0]
    why = "health: " + failures[0]["line"].removeprefix("FAIL ")
    return scheduler.act_self_drain(choice, node, why, "health")
