"""Slurm operations behind `commbench submit` and `commbench jobs`: render, submit, follow, remember.

Plain Slurm commands, not submitit or simple_slurm:
- the job is a shell script a user can read and run with `sbatch` unchanged (slurm/*.sbatch);
  submitit ships a pickled Python function to its own launcher on the nodes instead, and
  simple_slurm would build the #SBATCH lines in Python, a second copy of what the templates say;
- submitit learns job states from sacct, which a cluster without accounting (the test cluster,
  many small sites) does not have; here squeue, then `scontrol show job`, then sacct;
- four commands with stable output (sbatch --parsable, squeue -o, scontrol -o, sacct -P) are
  less to keep working than a dependency.

Rendering: the templates in slurm/ are the only source of the script text (the package reaches
them through the link commbench/slurm_templates -> ../slurm, which a wheel turns into copies). `render` copies a
template and fills in, line by line: the #SBATCH directives the options set (a directive the
options leave unset becomes `##SBATCH`, which sbatch ignores), the defaults of the settings
(`COMMBENCH_PYTHON=${COMMBENCH_PYTHON:-...}`), the default `commbench run` options
(`DEFAULT_RUN_ARGS=(...)`) and, at the end of the communication knobs block (up to its first
blank line), `export` lines for --env. A template that lacks a line the
options need is an error, so templates and options cannot drift apart silently.

States: a job is looked up with squeue (`-t all` also shows jobs that ended a moment ago), then
`scontrol show job` (ended jobs are remembered for MinJobAge, 300 s by default), then sacct (only
where accounting is on). Jobs Slurm no longer knows keep the last state seen.

Registry: every submission is one JSON line appended to ~/.cache/commbench/jobs.jsonl
($XDG_CACHE_HOME honoured, $COMMBENCH_JOBS_FILE overrides); end states seen later are appended
as further lines and the last line per job wins. It lives outside any results folder so that
`commbench jobs` lists every submission of the user whatever --out each one used; appending
short lines keeps concurrent submits from clobbering each other. Jobs are keyed by cluster name
and job id, since job ids restart on every cluster.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from commbench.data.rundir import utc_now
from commbench.errors import CommbenchError, UsageError

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "slurm_templates"
LAUNCHERS = ("srun", "torchrun")
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
UNKNOWN = "UNKNOWN"
# environment the templates read; removed from sbatch's environment so the rendered values hold
RENDERED_SETTINGS = (
    "COMMBENCH_PYTHON",
    "COMMBENCH_RESULTS",
    "COMMBENCH_RANKS_PER_NODE",
    "COMMBENCH_COMMAND",
    "COMMBENCH_EVERY",
)
JOB_COMMANDS = ("run", "calibrate", "diagnose")  # what a job may run

# every check below is fullmatch: `$` would let a trailing newline through (--time $'30\n')
_TIME_LIMIT = re.compile(r"\d+-\d+(:\d+){0,2}|\d+(:\d+){0,2}|infinite|unlimited", re.IGNORECASE)
_DIRECTIVE = re.compile(r"#{1,2}SBATCH --([a-z-]+)(?:=(\S+))?[ \t]*")
_SETTING = re.compile(r"(COMMBENCH_[A-Z_]+)=\$\{\1:-.*\}")
_DEFAULT_ARGS = re.compile(r"DEFAULT_RUN_ARGS=\(.*\)")
_KNOBS_HEADER = "# ---- communication knobs"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLURM_TIMEOUT_S = 30


# ---- the job: options and rendering ----------------------------------------------------------


@dataclass(frozen=True)
class JobOptions:
    """What `commbench submit` asks of Slurm. ranks_per_node is the number of benchmark ranks on
    each node whatever the launcher: srun tasks, or the processes each node's torchrun starts."""

    nodes: int
    ranks_per_node: int
    launcher: str = "srun"
    gpus_per_node: int | None = None
    cpus_per_rank: int = 1
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    exclusive: bool = False
    results_dir: str = "results"
    python: str = "python3"
    run_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    command: str = "run"  # the commbench command every task runs (JOB_COMMANDS)
    every_s: int | None = None  # a recurring sweep: seconds from one job's start to the next's

    def validate(self) -> JobOptions:
        for name, flag in (
            ("nodes", "--nodes"),
            ("ranks_per_node", "--ntasks-per-node"),
            ("cpus_per_rank", "--cpus-per-rank"),
        ):
            if getattr(self, name) < 1:
                raise UsageError(f"{flag} must be at least 1 (got {getattr(self, name)})")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more (got {self.gpus_per_node})")
        if self.command not in JOB_COMMANDS:
            raise UsageError(f"unknown job command {self.command!r}; choose from {', '.join(JOB_COMMANDS)}")
        if self.command == "calibrate" and self.ranks_per_node != 1:
            raise UsageError("calibrate runs one task per node (--ntasks-per-node 1): each measures its node's device")
        if self.command == "diagnose" and self.ranks_per_node != 1:
            raise UsageError(
                "diagnose runs one task per node (--ntasks-per-node 1): each node is one member of the diagnosis"
            )
        if self.command == "diagnose" and self.nodes < 2:
            raise UsageError(f"diagnose needs at least 2 nodes (--nodes {self.nodes})")
        if self.every_s is not None and self.every_s < 1:
            raise UsageError(f"--every must be at least one second (got {self.every_s} s)")
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"unknown launcher {self.launcher!r}; choose from {', '.join(LAUNCHERS)}")
        if self.time_limit is not None and not _TIME_LIMIT.fullmatch(self.time_limit):
            raise UsageError(
                f"--time {self.time_limit!r} is not a Slurm time limit "
                "(minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)"
            )
        for flag, value in (("--partition", self.partition), ("--account", self.account)):
            if value is not None and not re.fullmatch(r"[\w.,-]+", value):
                raise UsageError(f"{flag} {value!r}: only letters, digits and . , _ - are allowed")
        for name, _ in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise UsageError(f"--env {name!r}: not a valid environment variable name")
        return self

    @property
    def template(self) -> Path:
        return TEMPLATES_DIR / f"commbench-{self.launcher}.sbatch"

    def directives(self) -> dict[str, str | bool | None]:
        """sbatch long option -> value (True: a flag; None or False: switched off)."""
        torchrun = self.launcher == "torchrun"
        return {
            "nodes": str(self.nodes),
            # torchrun: one agent per node, which starts the ranks and needs their cores
            "ntasks-per-node": "1" if torchrun else str(self.ranks_per_node),
            "cpus-per-task": str(self.cpus_per_rank * (self.ranks_per_node if torchrun else 1)),
            "gpus-per-node": str(self.gpus_per_node) if self.gpus_per_node else None,
            "exclusive": self.exclusive,
            "time": self.time_limit,
            "partition": self.partition,
            "account": self.account,
        }

    def settings(self) -> dict[str, str]:
        values = {
            "COMMBENCH_PYTHON": self.python,
            "COMMBENCH_RESULTS": self.results_dir,
            "COMMBENCH_COMMAND": self.command,
            "COMMBENCH_EVERY": str(self.every_s or ""),
        }
        if self.launcher == "torchrun":
            values["COMMBENCH_RANKS_PER_NODE"] = str(self.ranks_per_node)
        return values


def render(options: JobOptions) -> str:
    """The template for options.launcher with the options filled in (see the module docstring)."""
    try:
        lines = options.template.read_text().splitlines()
    except OSError:
        raise CommbenchError(
            f"sbatch template {options.template} not found or not readable: the install "
            "is missing commbench/slurm_templates (reinstall commbench)"
        ) from None
    directives = options.directives()
    settings = options.settings()
    seen: set[str] = set()
    out = [lines[0], f"# rendered by `commbench submit` from slurm/{options.template.name}"]
    in_knobs = False
    for line in lines[1:]:
        if line.startswith(_KNOBS_HEADER):
            in_knobs = True
            seen.add(_KNOBS_HEADER)
        elif in_knobs and not line.strip():  # the knobs block ends at a blank line: --env goes last, so it wins
            in_knobs = False
            out += [f"export {name}={shlex.quote(value)}" for name, value in options.env]
        out.append(_render_line(line, options, directives, settings, seen))
    missing = (set(directives) | set(settings) | {"DEFAULT_RUN_ARGS", _KNOBS_HEADER}) - seen
    if missing:
        raise CommbenchError(
            f"{options.template} lacks lines for {', '.join(sorted(missing))}; "
            "it no longer matches commbench/measure/slurm.py"
        )
    return "\n".join(out) + "\n"


def _render_line(line: str, options: JobOptions, directives: dict, settings: dict, seen: set[str]) -> str:
    if match := _DIRECTIVE.fullmatch(line):
        key, example = match.groups()
        if key not in directives:
            return line
        seen.add(key)
        value = directives[key]
        if value is True:
            return f"#SBATCH --{key}"
        if value in (None, False):
            return f"##SBATCH --{key}" + (f"={example}" if example else "")
        return f"#SBATCH --{key}={value}"
    if (match := _SETTING.fullmatch(line)) and match.group(1) in settings:
        name = match.group(1)
        seen.add(name)
        return f"{name}=${{{name}:-{shlex.quote(settings[name])}}}"
    if _DEFAULT_ARGS.fullmatch(line):
        seen.add("DEFAULT_RUN_ARGS")
        return f"DEFAULT_RUN_ARGS=({shlex.join(options.run_args)})"
    return line


def job_dir(results_dir: str | Path, job_id: int) -> Path:
    """Where a job's results and job.log land (the templates' $COMMBENCH_RESULTS/slurm-<id>)."""
    return Path(results_dir) / f"slurm-{job_id}"


# ---- talking to Slurm ------------------------------------------------------------------------


def _slurm(cmd: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    if shutil.which(cmd[0]) is None:
        raise CommbenchError(
            f"{cmd[0]} not found: Slurm's client commands are not installed here; run on a "
            "login node (commbench submit --dry-run prints the script without them)"
        )
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=_SLURM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CommbenchError(f"{cmd[0]} did not answer within {_SLURM_TIMEOUT_S} s (is slurmctld up?)") from None


def sbatch(script: str) -> int:
    """Submit a script text; returns the job id. The settings the script reads from the
    environment are dropped from sbatch's, so the rendered defaults are what the job uses."""
    env = {key: value for key, value in os.environ.items() if key not in RENDERED_SETTINGS}
    proc = _slurm(["sbatch", "--parsable"], env=env, stdin=script)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
        raise CommbenchError(f"sbatch refused the job: {lines[-1]}")
    try:
        return int(proc.stdout.strip().split(";")[0])
    except ValueError:
        raise CommbenchError(f"sbatch answered {proc.stdout.strip()!r}, not a job id") from None


def cluster_name() -> str:
    """ClusterName from slurmctld's configuration ('' when it cannot be asked)."""
    proc = _slurm(["scontrol", "show", "config"])
    match = re.search(r"^ClusterName\s*=\s*(\S+)", proc.stdout, re.MULTILINE)
    return match.group(1) if match else ""


@dataclass
class JobStatus:
    job_id: int
    state: str  # a Slurm job state (PENDING, RUNNING, COMPLETED, TIMEOUT, ...) or UNKNOWN
    source: str  # squeue, scontrol, sacct, or registry (last state seen)
    elapsed: str = ""
    nodes: str = ""
    reason: str = ""
    exit_code: str = ""
    stdout_path: str = ""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "COMPLETED"


def parse_state(text: str) -> str:
    """'CANCELLED by 0' (sacct), 'CANCELLED+' (truncated) -> 'CANCELLED'."""
    words = text.strip().split()
    return words[0].rstrip("+") if words else UNKNOWN


def parse_squeue(text: str) -> dict[int, JobStatus]:
    """Lines of `squeue -h -o %i|%T|%M|%N|%r`; array tasks and steps (ids with _ or .) are skipped."""
    found = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 5 and parts[0].isdigit():
            job_id = int(parts[0])
            found[job_id] = JobStatus(
                job_id, parse_state(parts[1]), "squeue", elapsed=parts[2], nodes=parts[3], reason=parts[4]
            )
    return found


def parse_scontrol(text: str) -> dict[str, str]:
    """`scontrol -o show job` as a dict (the first value of each key)."""
    fields: dict[str, str] = {}
    for match in re.finditer(r"(\S+?)=(\S*)", text):
        fields.setdefault(match.group(1), match.group(2))
    return fields


def status_from_scontrol(fields: dict[str, str]) -> JobStatus:
    return JobStatus(
        int(fields["JobId"]),
        parse_state(fields.get("JobState", "")),
        "scontrol",
        elapsed=fields.get("RunTime", ""),
        nodes=fields.get("NodeList", "").replace("(null)", ""),
        reason=fields.get("Reason", ""),
        exit_code=fields.get("ExitCode", ""),
        stdout_path=fields.get("StdOut", ""),
    )


def parse_sacct(text: str) -> JobStatus | None:
    """The first line of `sacct -X -n -P -o JobID,State,Elapsed,NodeList,ExitCode`."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 5 and parts[0].isdigit():
            return JobStatus(
                int(parts[0]), parse_state(parts[1]), "sacct", elapsed=parts[2], nodes=parts[3], exit_code=parts[4]
            )
    return None


def query_squeue(job_ids: list[int]) -> dict[int, JobStatus]:
    if not job_ids:
        return {}
    proc = _slurm(["squeue", "-h", "-t", "all", "-o", "%i|%T|%M|%N|%r", "-j", ",".join(map(str, job_ids))])
    # exit 1 with "Invalid job id" when Slurm knows none of them: nothing queued
    return parse_squeue(proc.stdout) if proc.returncode == 0 else {}


def query_scontrol(job_id: int) -> JobStatus | None:
    proc = _slurm(["scontrol", "-o", "show", "job", str(job_id)])
    if proc.returncode != 0 or "JobId=" not in proc.stdout:
        return None
    return status_from_scontrol(parse_scontrol(proc.stdout))


def query_sacct(job_id: int) -> JobStatus | None:
    """None where sacct is missing or accounting is off ("Slurm accounting storage is disabled")."""
    if shutil.which("sacct") is None:
        return None
    proc = _slurm(["sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID,State,Elapsed,NodeList,ExitCode"])
    return parse_sacct(proc.stdout) if proc.returncode == 0 else None


def job_status(job_id: int, detailed: bool = False) -> JobStatus:
    """squeue, then scontrol, then sacct. detailed: ask scontrol even when squeue knows the job
    (for the exit code and the output file)."""
    status = query_squeue([job_id]).get(job_id)
    if status is None or detailed:
        status = query_scontrol(job_id) or status
    return status or query_sacct(job_id) or JobStatus(job_id, UNKNOWN, "none")


def statuses(job_ids: list[int]) -> dict[int, JobStatus]:
    """States of many jobs: one squeue call, then scontrol/sacct for the ones it does not show."""
    found = query_squeue(job_ids)
    for job_id in job_ids:
        if job_id not in found:
            status = query_scontrol(job_id) or query_sacct(job_id)
            if status:
                found[job_id] = status
    return found


def log_tail(paths: list[Path], lines: int = 20) -> tuple[Path | None, list[str]]:
    """The last lines of the first of paths that exists and is not empty."""
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if text.strip():
            return path, text.rstrip("\n").splitlines()[-lines:]
    return None, []


# ---- the registry of submissions -----------------------------------------------------------------


@dataclass
class Submission:
    job_id: int
    cluster: str
    submitted: str
    launcher: str
    nodes: int
    ranks_per_node: int
    job_dir: str
    run_args: list[str] = field(default_factory=list)
    state: str = ""  # last end state seen, when one was
    state_seen: str = ""
    elapsed: str = ""  # run time at that end state
    command: str = "run"  # what the tasks ran (JOB_COMMANDS); registries written before it: run

    @property
    def key(self) -> tuple[str, int]:
        return self.cluster, self.job_id


def registry_path() -> Path:
    if os.environ.get("COMMBENCH_JOBS_FILE"):
        return Path(os.environ["COMMBENCH_JOBS_FILE"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "commbench" / "jobs.jsonl"


def _append(entry: dict) -> None:
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:  # one short write per line: appends do not interleave
        handle.write(json.dumps(entry) + "\n")


def remember_submission(sub: Submission) -> None:
    _append({"event": "submitted", **asdict(sub)})


def remember_state(sub: Submission, status: JobStatus) -> None:
    if status.state != sub.state:
        sub.state, sub.state_seen, sub.elapsed = status.state, utc_now(), status.elapsed
        _append(
            {
                "event": "state",
                "cluster": sub.cluster,
                "job_id": sub.job_id,
                "state": sub.state,
                "at": sub.state_seen,
                "elapsed": sub.elapsed,
            }
        )


def submissions(limit: int | None = None) -> list[Submission]:
    """Recorded submissions, oldest first, with the last state recorded for each."""
    try:
        lines = registry_path().read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    subs: dict[tuple[str, int], Submission] = {}
    for line in lines:
        try:
            entry = json.loads(line)
            key = (entry["cluster"], entry["job_id"])
            if entry.get("event") == "submitted":
                entry.pop("event")
                subs[key] = Submission(**entry)
            elif key in subs:
                sub = subs[key]
                sub.state, sub.state_seen, sub.elapsed = entry["state"], entry["at"], entry.get("elapsed", "")
        except (ValueError, KeyError, TypeError):
            continue  # a torn or foreign line: the rest of the registry still counts
    ordered = list(subs.values())
    return ordered[-limit:] if limit else ordered
