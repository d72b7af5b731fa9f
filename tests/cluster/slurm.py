"""A real Slurm cluster (Debian 12's slurm-wlm 22.05 + munge) on an `EmulatedCluster`.

    with EmulatedCluster(nodes=2) as ec, SlurmCluster(ec) as sc:
        print(sc.run(["srun", "-N2", "--ntasks-per-node=2", "hostname"]).stdout)
        job = sc.submit("#!/bin/sh\\nsrun hostname\\n", ["-N2"])
        assert sc.wait(job, timeout=60) == "COMPLETED"
        print(sc.output(job))

What it starts (all private to the instance, nothing in /etc or /var is used):
- a temp dir (``sc.dir``) with slurm.conf, state, spool, logs and job outputs;
- its own munged on a private socket with a fresh key (``AuthInfo=socket=...`` in slurm.conf),
  so it never depends on, nor disturbs, a system munged or another instance;
- slurmctld on the host, listening on a free port, reached by the nodes at the bridge address;
- one ``slurmd -N <node name>`` per node, inside the node's namespace with its hostname (started
  with nsenter --net, which keeps /sys/fs/cgroup; `ip netns exec` would break slurmd). Job steps
  are forked by slurmd, so they run "on" that node too.
Node names are the emulated nodes' hostnames (``<tag>n<i>``) with NodeAddr set; they are also
added to /etc/hosts (marked lines, removed at teardown) so that things like
``torchrun --master-addr $(scontrol show hostnames | head -n1)`` resolve them.

Commands: `sc.run([...])` runs a Slurm client command with ``SLURM_CONF`` set (`sc.env` holds the
environment for your own subprocesses; sbatch jobs inherit it). No accounting (no slurmdbd):
a job's final state is read from ``scontrol show job`` (MinJobAge is 1 h so it is remembered);
``sacct`` does not work here. JobRequeue=0, so a job hit by a node failure stays NODE_FAIL instead
of going back to PENDING (Slurm's default requeues batch jobs). Faults: `expire(job)` (TIMEOUT
within ~30 s), `kill_node(i)` / `restart_node(i)` (NODE_FAIL after ~SlurmdTimeout).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from commbench.measure.slurm import TERMINAL_STATES  # the job states after which Slurm runs nothing more

from .emulated import EmulatedCluster, _killpg

SLURM_TOOLS = (
    "slurmctld",
    "slurmd",
    "slurmstepd",
    "munged",
    "munge",
    "sinfo",
    "srun",
    "sbatch",
    "squeue",
    "scontrol",
    "scancel",
)


class SlurmError(RuntimeError):
    pass


def slurm_missing() -> str | None:
    """None if the Slurm binaries are installed, else the reason (for pytest.skip)."""
    missing = [t for t in SLURM_TOOLS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    if missing:
        return f"Slurm test cluster needs {', '.join(missing)} (Debian: slurm-wlm munge)"
    return None


def _which(tool: str) -> str:
    return shutil.which(tool) or str(Path("/usr/sbin", tool))


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path.name}: missing)"
    return f"--- {path.name} (last {min(n, len(lines))} lines)\n" + "\n".join(lines[-n:])


class SlurmCluster:
    """Context manager: munged + slurmctld + one slurmd per emulated node; waits until idle."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        cpus_per_node: int = 4,
        real_memory_mb: int = 2000,
        partition: str = "debug",
        slurmd_timeout: int = 10,
        kill_wait: int = 2,
        min_job_age: int = 3600,
        extra_conf: str = "",
        etc_hosts: bool = True,
        start_timeout: float = 60,
    ):
        self.ec = cluster
        self.cpus = cpus_per_node
        self.mem = real_memory_mb
        self.partition = partition
        self.slurmd_timeout = slurmd_timeout
        self.kill_wait = kill_wait
        self.min_job_age = min_job_age
        self.extra_conf = extra_conf
        self.etc_hosts = etc_hosts
        self.start_timeout = start_timeout
        self.dir: Path | None = None
        self.conf: Path | None = None
        self.env: dict[str, str] = {}
        self.port = 0
        self._munged: subprocess.Popen | None = None
        self._ctld: subprocess.Popen | None = None
        self._slurmd: dict[str, subprocess.Popen] = {}
        self._started = False
        self._closed = False

    # ---- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> SlurmCluster:
        reason = slurm_missing()
        if reason:
            raise SlurmError(reason)
        if not self.ec.nodes:
            raise SlurmError("start the EmulatedCluster first")
        self._started = True
        _INSTANCES.add(self)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"slurm-{self.ec.tag}-"))
        self.dir.chmod(0o755)  # munge socket must be reachable; the key stays 0400
        self.ec.adopt(directory=self.dir)
        for sub in ("state", "log", "spool", "jobs"):
            (self.dir / sub).mkdir()
        if self.etc_hosts:
            self.ec.add_etc_hosts()
        # munge: private key + daemon on a private socket
        key = self.dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.munge_socket = self.dir / "munge.sock"
        self._munged = subprocess.Popen(
            [
                _which("munged"),
                "-F",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.dir / 'munged.pid'}",
                f"--log-file={self.dir / 'log' / 'munged.log'}",
                f"--seed-file={self.dir / 'munged.seed'}",
            ],
            stdout=open(self.dir / "log" / "munged.out", "w"),  # noqa: SIM115 (Popen keeps it)
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.ec.adopt(pid=self._munged.pid)
        self._wait_for(
            lambda: (
                subprocess.run(
                    [_which("munge"), "-S", str(self.munge_socket), "-n"], capture_output=True, timeout=5
                ).returncode
                == 0
            ),
            15,
            "munged did not come up",
        )

        self.port = _free_port(self.ec.bridge_addr)
        self.conf = self.dir / "slurm.conf"
        self.conf.write_text(self.render_conf())
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for var in list(self.env):  # a pytest run inside a Slurm job must not leak its job
            if var.startswith(("SLURM_JOB", "SLURM_STEP", "SLURM_NODELIST", "SBATCH_", "SRUN_")):
                del self.env[var]

        self._ctld = subprocess.Popen(
            [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)],
            env=self.env,
            stdout=open(self.dir / "log" / "slurmctld.out", "w"),  # noqa: SIM115 (Popen keeps it)
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.ec.adopt(pid=self._ctld.pid)
        for nd in self.ec.nodes:
            (self.dir / "spool" / nd.name).mkdir()
            self._start_slurmd(nd)
        self.wait_idle(self.start_timeout)

    def _start_slurmd(self, nd) -> None:
        self._slurmd[nd.name] = nd.popen(
            [_which("slurmd"), "-D", "-f", str(self.conf), "-N", nd.name],
            env={"SLURM_CONF": str(self.conf)},
            stdout=open(self.dir / "log" / f"slurmd-{nd.name}.out", "a"),  # noqa: SIM115 (Popen keeps it)
            stderr=subprocess.STDOUT,
        )

    def render_conf(self) -> str:
        d = self.dir
        host = socket.gethostname().split(".")[0]
        nodes = "\n".join(
            f"NodeName={nd.name} NodeAddr={nd.addr} NodeHostname={nd.name} CPUs={self.cpus} "
            f"RealMemory={self.mem} State=UNKNOWN"
            for nd in self.ec.nodes
        )
        return f"""\
# generated by tests/cluster/slurm.py for emulated cluster {self.ec.tag}
ClusterName=cb{self.ec.tag}
SlurmctldHost={host}({self.ec.bridge_addr})
SlurmctldPort={self.port}
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MinJobAge={self.min_job_age}
KillWait={self.kill_wait}
OverTimeLimit=0
JobRequeue=0
InactiveLimit=0
SlurmdTimeout={self.slurmd_timeout}
MessageTimeout=10
{self.extra_conf}
{nodes}
PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""

    def close(self) -> None:
        """Cancel all jobs, stop the daemons, remove the temp dir. Idempotent, never raises."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        if self._ctld is not None and self._ctld.poll() is None:
            with contextlib.suppress(Exception):
                ids = self.run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.split()
                if ids:
                    self.run(["scancel", *ids], timeout=10)
                    deadline = time.monotonic() + 5
                    while (
                        time.monotonic() < deadline
                        and self.run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.strip()
                    ):
                        time.sleep(0.3)
        for p in list(self._slurmd.values()) + [self._ctld, self._munged]:
            if p is not None:
                with contextlib.suppress(Exception):
                    _killpg(p, grace=3.0)
        # job steps left in the namespaces, the temp dir and the /etc/hosts lines go with the
        # EmulatedCluster's teardown (they are registered there, also for cleanup_stale)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        _INSTANCES.discard(self)

    # ---- commands ---------------------------------------------------------------------------

    def run(
        self,
        cmd: Sequence[str] | str,
        timeout: float = 60,
        check: bool = False,
        env: Mapping[str, str] | None = None,
        **kwargs,
    ) -> subprocess.CompletedProcess:
        """Run a Slurm client command (sbatch/srun/squeue/scontrol/...) on the host against this
        cluster. Text output captured; `check=True` raises SlurmError with stderr."""
        full_env = dict(self.env)
        full_env.update(env or {})
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("cwd", str(self.dir / "jobs"))
        p = subprocess.run(cmd, env=full_env, timeout=timeout, shell=isinstance(cmd, str), **kwargs)
        if check and p.returncode != 0:
            raise SlurmError(f"{cmd!r} failed ({p.returncode}): {p.stderr.strip()}")
        return p

    def submit(self, script_text: str, args: Sequence[str] = (), **kwargs) -> int:
        """sbatch a script (text); output goes to `output_path(job_id)` unless args say -o.
        Returns the job id."""
        n = len(list((self.dir / "jobs").glob("script-*.sh")))
        script = self.dir / "jobs" / f"script-{n}.sh"
        script.write_text(script_text)
        script.chmod(0o755)
        args = list(args)
        if not any(a == "-o" or a.startswith(("-o", "--output")) for a in args):
            args = ["-o", str(self.dir / "jobs" / "slurm-%j.out")] + args
        p = self.run(["sbatch", "--parsable", *args, str(script)], check=True, **kwargs)
        return int(p.stdout.strip().split(";")[0])

    def output_path(self, job_id: int) -> Path:
        return self.dir / "jobs" / f"slurm-{job_id}.out"

    def output(self, job_id: int) -> str:
        try:
            return self.output_path(job_id).read_text(errors="replace")
        except OSError:
            return ""

    def job_info(self, job_id: int) -> dict[str, str]:
        """`scontrol show job -o` as a dict ({} when Slurm no longer knows the job)."""
        p = self.run(["scontrol", "-o", "show", "job", str(job_id)], timeout=20)
        if p.returncode != 0:
            return {}
        info = {}
        for m in re.finditer(r"(\S+?)=(\S*)", p.stdout):
            info.setdefault(m.group(1), m.group(2))
        return info

    def state(self, job_id: int) -> str:
        return self.job_info(job_id).get("JobState", "UNKNOWN")

    def wait(self, job_id: int, timeout: float = 120, poll: float = 0.5) -> str:
        """Poll until the job reaches a final state; return it (e.g. 'COMPLETED', 'FAILED',
        'TIMEOUT'). Raises TimeoutError (with the job's record and log tails) after `timeout`."""
        deadline = time.monotonic() + timeout
        state = "UNKNOWN"
        while time.monotonic() < deadline:
            state = self.state(job_id)
            if state in TERMINAL_STATES:
                return state
            time.sleep(poll)
        raise TimeoutError(
            f"job {job_id} still {state} after {timeout}s\n"
            + self.run(["scontrol", "show", "job", str(job_id)]).stdout
            + self.logs_tail()
        )

    def expire(self, job_id: int) -> None:
        """Move a running job's end time to now: slurmctld then ends it as TIMEOUT at its next
        time-limit check (every 30 s), i.e. within ~30 s instead of the 60-90 s that the
        smallest --time=1 takes. Same code path in slurmctld as a real time limit."""
        from datetime import datetime

        now = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
        self.run(["scontrol", "update", f"JobId={job_id}", f"EndTime={now}"], check=True)

    def kill_node(self, i: int, cut_link: bool = True) -> None:
        """A node dies: SIGKILL its slurmd and every process in its namespace (job steps
        included) and, by default, cut its link. slurmctld marks it DOWN after SlurmdTimeout
        (``slurmd_timeout``, 10 s by default; ~10-20 s) and its jobs end as NODE_FAIL."""
        nd = self.ec.node(i)
        if cut_link:
            self.ec.set_link(i, up=False)
        p = self._slurmd.get(nd.name)
        if p is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for pid in nd.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)

    def restart_node(self, i: int, timeout: float = 60) -> None:
        """Bring a killed node back (link up, slurmd started); waits until it is idle again."""
        nd = self.ec.node(i)
        self.ec.set_link(i, up=True)
        p = self._slurmd.get(nd.name)
        if p is None or p.poll() is not None:
            self._start_slurmd(nd)
        self.wait_idle(timeout)

    # ---- readiness / diagnostics --------------------------------------------------------

    def node_states(self) -> dict[str, str]:
        p = self.run(["sinfo", "-N", "-h", "-o", "%N %T"], timeout=15)
        return dict(line.split(None, 1) for line in p.stdout.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 60) -> None:
        """Wait until every node is idle; raises SlurmError with the logs' tails if not."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        names = set(self.ec.names)
        while time.monotonic() < deadline:
            for name, p in [("slurmctld", self._ctld), *self._slurmd.items()]:
                if p is not None and p.poll() is not None:
                    raise SlurmError(f"{name} exited with {p.returncode}\n{self.logs_tail()}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                states = self.node_states()
                if set(states) == names and all(s == "idle" for s in states.values()):
                    return
            time.sleep(0.5)
        raise SlurmError(f"nodes not idle after {timeout}s: {states}\n{self.logs_tail()}")

    def logs_tail(self, n: int = 25) -> str:
        if self.dir is None:
            return ""
        files = [self.dir / "log" / f for f in ("slurmctld.log", "slurmctld.out", "munged.log")]
        for nd in self.ec.nodes:
            files += [self.dir / "log" / f"slurmd-{nd.name}.log", self.dir / "log" / f"slurmd-{nd.name}.out"]
        return "\n".join(_tail(f, n) for f in files if f.exists())

    def _wait_for(self, cond, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if cond():
                    return
            time.sleep(0.2)
        raise SlurmError(f"{what} within {timeout}s\n{self.logs_tail()}")

    def __repr__(self) -> str:
        return f"SlurmCluster(conf={self.conf}, nodes={self.ec.names})"


_INSTANCES: weakref.WeakSet[SlurmCluster] = weakref.WeakSet()


@atexit.register
def _close_all_at_exit() -> None:
    for c in list(_INSTANCES):
        with contextlib.suppress(BaseException):
            c.close()
