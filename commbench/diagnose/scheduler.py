"""Acting on Slurm for `check`, `diagnose` and `health`: drain the nodes found bad, resume the nodes
that pass again, and never more than an operator can live with.

Safety, in this order:
  dry run       the default: the scontrol commands are printed, nothing is written to Slurm;
                `--drain` / `--resume` (or `health --slurm`) carry them out.
  ours only     a node is resumed only when its drain reason starts with REASON_PREFIX, the prefix
                every drain commbench makes writes; a node an admin drained (any other reason) stays
                drained whatever commbench measures.
  cap           one action drains at most `cap` of any partition a node to drain is in (default
                10%, rounded down, but at least one node while the cap is above 0: one bad node of
                a small partition can always go). Over it, nothing is drained, and the action
                fails naming the cap: many "bad" nodes at once more likely means a bad switch, a
                bad reference or a noisy night than a bad fleet, which a person should look at.
  last idle     a drain never takes one of the last `keep_idle` idle nodes of a partition (default
                1) unless asked (keep_idle 0).
Nodes already drained are left as they are (their reason, maybe an admin's, is not overwritten).
Every action carried out or refused is one row for the store's `actions` table (when, node, verb,
verdict, evidence run, command, result).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from commbench.data.rundir import utc_now
from commbench.errors import CommbenchError, UsageError

REASON_PREFIX = "commbench: "
DEFAULT_CAP = 0.10
DEFAULT_KEEP_IDLE = 1
_REASON_LIMIT = 200  # characters of the reason written to Slurm (sinfo -R shows them on one line)
_SCONTROL_TIMEOUT_S = 30
_DRAINED_STATES = ("drain",)  # sinfo %T: drained, draining, and "+drain" suffixed states


@dataclass(frozen=True)
class SlurmNode:
    """One node as sinfo shows it: state (sinfo %T, lower case), drain reason ('' when none) and the
    partitions it is in."""

    name: str
    state: str
    reason: str
    partitions: tuple[str, ...]

    @property
    def drained(self) -> bool:
        return any(word in self.state for word in _DRAINED_STATES)

    @property
    def drained_by_commbench(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)

    @property
    def idle(self) -> bool:
        return self.state.rstrip("*~#!%$@^-") == "idle"


@dataclass
class Action:
    """One scontrol write, planned or done; `result` says which ("dry run", "done", "refused: ...")."""

    node: str
    verb: str  # drain or resume
    verdict: str  # why, in words (the drain reason after the prefix)
    command: list[str]
    evidence_run: str | None = None
    result: str = "planned"
    when: str = field(default_factory=utc_now)

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)

    def row(self, source: str) -> dict[str, Any]:
        """The store's `actions` row (source: the commbench command that acted)."""
        return {
            "when": self.when,
            "node": self.node,
            "verb": self.verb,
            "verdict": self.verdict,
            "evidence_run": self.evidence_run,
            "command": self.command_line,
            "result": self.result,
            "source": source,
        }


@dataclass
class Plan:
    actions: list[Action]
    refusal: str | None = None  # set when the cap stopped the whole action
    notes: list[str] = field(default_factory=list)  # nodes left alone, and why


def drain_reason(why: str) -> str:
    text = " ".join(f"{REASON_PREFIX}{why}".split())
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


def drain_command(node: str, why: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={drain_reason(why)}"]


def resume_command(node: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={node}", "State=RESUME"]


def allowed_drains(partition_size: int, cap: float) -> int:
    """How many nodes of a partition one action may drain: the cap's share rounded down, at least one."""
    if cap <= 0:
        return 0
    return max(1, int(cap * partition_size + 1e-9))


# ---- asking Slurm ---------------------------------------------------------------------------------


def require_slurm() -> None:
    """UsageError (exit 2) when Slurm's client commands are not on PATH."""
    missing = [tool for tool in ("sinfo", "scontrol") if shutil.which(tool) is None]
    if missing:
        raise UsageError(f"{' and '.join(missing)} not found on PATH: acting on Slurm needs its client commands")


def read_fleet() -> dict[str, SlurmNode]:
    """Every node Slurm knows: `sinfo -N` (one line per node and partition), merged per node."""
    require_slurm()
    proc = _run(["sinfo", "-N", "-h", "-o", "%N|%T|%P|%E"])
    if proc.returncode != 0:
        raise CommbenchError(f"sinfo failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    return parse_sinfo(proc.stdout)


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) != 4 or not parts[0]:
            continue
        name, state, partition, reason = parts
        reason = "" if reason.strip() == "none" else reason.strip()
        partition = partition.rstrip("*")
        known = nodes.get(name)
        partitions = (known.partitions if known else ()) + ((partition,) if partition else ())
        nodes[name] = SlurmNode(name, state.strip().lower(), reason, partitions)
    return nodes


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=_SCONTROL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise CommbenchError(f"{cmd[0]} did not answer within {_SCONTROL_TIMEOUT_S} s (is slurmctld up?)") from None


# ---- planning -------------------------------------------------------------------------------------


def known(fleet: dict[str, SlurmNode], names: Iterable[str]) -> None:
    unknown = [name for name in names if name not in fleet]
    if unknown:
        raise UsageError(f"{unknown[0]}: Slurm knows no such node (sinfo -N lists {len(fleet)} nodes)")


def plan_drain(
    bad: dict[str, str],
    fleet: dict[str, SlurmNode],
    cap: float = DEFAULT_CAP,
    keep_idle: int = DEFAULT_KEEP_IDLE,
    evidence_run: str | None = None,
) -> Plan:
    """Drain commands for the nodes in `bad` (node -> why), after the safety rules above."""
    known(fleet, bad)
    plan = Plan([])
    todo = []
    for name in bad:
        if fleet[name].drained:
            plan.notes.append(
                f"{name}: already {fleet[name].state} ({fleet[name].reason or 'no reason'}): left as it is"
            )
        else:
            todo.append(name)
    for partition, members in _partitions(fleet).items():
        draining = [name for name in todo if name in members]
        limit = allowed_drains(len(members), cap)
        if len(draining) > limit:
            plan.refusal = (
                f"refused: draining {len(draining)} of the {len(members)} nodes of partition {partition} "
                f"in one action is over the cap --max-drain {cap:.0%} (at most {limit} node"
                f"{'s' if limit != 1 else ''}); nothing drained"
            )
            plan.actions = [
                Action(name, "drain", bad[name], drain_command(name, bad[name]), evidence_run, result=plan.refusal)
                for name in todo
            ]
            return plan
    for name in todo:
        result = "planned"
        if fleet[name].idle and keep_idle > 0:
            short = _last_idle_partition(name, todo, fleet, keep_idle)
            if short:
                result = (
                    f"refused: {name} is one of the last {keep_idle} idle node(s) of partition {short} "
                    "(--keep-idle 0 drains it)"
                )
        plan.actions.append(
            Action(name, "drain", bad[name], drain_command(name, bad[name]), evidence_run, result=result)
        )
    return plan


def _partitions(fleet: dict[str, SlurmNode]) -> dict[str, set[str]]:
    members: dict[str, set[str]] = {}
    for node in fleet.values():
        for partition in node.partitions:
            members.setdefault(partition, set()).add(node.name)
    return members


def _last_idle_partition(name: str, todo: list[str], fleet: dict[str, SlurmNode], keep_idle: int) -> str | None:
    """The partition of `name` that would keep fewer than keep_idle idle nodes if it were drained."""
    members = _partitions(fleet)
    for partition in fleet[name].partitions:
        idle_left = [n for n in members[partition] if fleet[n].idle and n not in todo]
        if len(idle_left) < keep_idle:
            return partition
    return None


def plan_resume(passed: list[str], fleet: dict[str, SlurmNode], verdict: str, evidence_run: str | None = None) -> Plan:
    """Resume commands for the nodes in `passed` that commbench drained; the others are left alone."""
    known(fleet, passed)
    plan = Plan([])
    for name in passed:
        node = fleet[name]
        if node.drained_by_commbench:
            plan.actions.append(Action(name, "resume", verdict, resume_command(name), evidence_run))
        elif node.drained:
            plan.notes.append(f"{name}: drained by someone else ({node.reason or 'no reason'}): not resumed")
    return plan


# ---- carrying out -----------------------------------------------------------------------------------


def carry_out(plan: Plan, act: bool) -> None:
    """Run the plan's planned actions (act) or mark them as a dry run; results in place."""
    for action in plan.actions:
        if action.result != "planned":
            continue
        if not act:
            action.result = "dry run"
            continue
        proc = _run(action.command)
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        action.result = "done" if proc.returncode == 0 else f"failed: {message[-1] if message else proc.returncode}"


def lines(plan: Plan) -> list[str]:
    """What the user reads: one line per action (the command, then its result) and per note."""
    out = [
        f"{'dry run' if action.result == 'dry run' else action.verb}: {action.command_line}"
        + ("" if action.result in ("dry run", "done") else f"  [{action.result}]")
        for action in plan.actions
    ]
    out += [f"left alone: {note}" for note in plan.notes]
    if plan.refusal:
        out.append(plan.refusal)
    return out


def failed(plan: Plan) -> bool:
    """Whether the action did not do all it was asked (refused by a rule, or scontrol failed)."""
    return plan.refusal is not None or any(a.result.startswith(("refused", "failed")) for a in plan.actions)


def recorded(plan: Plan) -> list[Action]:
    """The actions that go to the store: everything but dry runs."""
    return [action for action in plan.actions if action.result != "dry run"]


# ---- one action, start to end ------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """What the user asked of the scheduler: plan only (a dry run), drain, resume; the safety knobs; the store."""

    plan: bool = False
    drain: bool = False
    resume: bool = False
    cap: float = DEFAULT_CAP
    keep_idle: int = DEFAULT_KEEP_IDLE
    db: str | None = None

    @property
    def wanted(self) -> bool:
        return self.plan or self.drain or self.resume

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def act(
    choice: Choice,
    bad: dict[str, str],
    passed: list[str],
    evidence_run: str | None,
    source: str,
    out: TextIO | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Plan drains for `bad` (node -> why) and resumes for `passed`; carry out the drains with
    choice.drain and the resumes with choice.resume (the rest is printed as a dry run); record what
    was carried out or refused in the store at choice.db. Returns (1 when a rule refused or scontrol
    failed, else 0; every planned action as a row)."""
    out = out or sys.stdout
    fleet = read_fleet()
    plans: list[tuple[Plan, bool]] = []
    if choice.drain or choice.plan:
        plans.append((plan_drain(bad, fleet, choice.cap, choice.keep_idle, evidence_run), choice.drain))
    if choice.resume or choice.plan:
        plans.append(
            (plan_resume([n for n in passed if n not in bad], fleet, "passes again", evidence_run), choice.resume)
        )
    return _run_plans(plans, choice, source, out or sys.stdout)


def _run_plans(
    plans: list[tuple[Plan, bool]], choice: Choice, source: str, out: TextIO
) -> tuple[int, list[dict[str, Any]]]:
    """Carry out (or dry-run) each plan, print its lines, record what was carried out or refused."""
    rows, done = [], []
    for plan, carry in plans:
        carry_out(plan, act=carry)
        for line in lines(plan):
            print(f"# slurm {line}", file=out, flush=True)
        rows += [action.row(source) for action in plan.actions]
        done += [action.row(source) for action in recorded(plan)] if carry else []
    if done and choice.db:
        from commbench.data.store import record_actions

        record_actions(choice.db, done)
    return (1 if any(failed(plan) for plan, _ in plans) else 0), rows


def plan_self_drain(node: str, why: str, fleet: dict[str, SlurmNode], cap: float) -> Plan:
    """A node draining itself (health --slurm): the cap counts the partition's nodes commbench has
    drained already, since every node decides alone and many at once must not empty a partition."""
    known(fleet, [node])
    if fleet[node].drained:
        return Plan(
            [], notes=[f"{node}: already {fleet[node].state} ({fleet[node].reason or 'no reason'}): left as it is"]
        )
    plan = Plan([Action(node, "drain", why, drain_command(node, why))])
    members = _partitions(fleet)
    for partition in fleet[node].partitions:
        ours = sorted(n for n in members[partition] if fleet[n].drained_by_commbench)
        limit = allowed_drains(len(members[partition]), cap)
        if len(ours) + 1 > limit:
            plan.refusal = (
                f"refused: {len(ours)} of the {len(members[partition])} nodes of partition {partition} are "
                f"drained by commbench already ({', '.join(ours) or 'none'}); draining {node} too is over "
                f"the cap --max-drain {cap:.0%} (at most {limit}); not drained"
            )
            plan.actions[0].result = plan.refusal
    return plan


def act_self_drain(choice: Choice, node: str, why: str, source: str, out: TextIO | None = None) -> int:
    plan = plan_self_drain(node, why, read_fleet(), choice.cap)
    return _run_plans([(plan, True)], choice, source, out or sys.stdout)[0]
