"""Where a rank learns who it is: torchrun, srun, or commbench's own local launcher.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and SLURM_NODEID; the rendezvous address
comes from MASTER_ADDR if the job script exported it, else the first host of the job.
Standalone, `commbench run --nproc N` starts N ranks on this machine itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

from commbench.dtypes import GLOO_DTYPES, check_gloo_supports
from commbench.errors import CommbenchError, UsageError

WORKER_CONFIG_ENV = "COMMBENCH_RUN_CONFIG"  # the run options, as JSON
WORKER_DRIVER_ENV = "COMMBENCH_DRIVER"  # which driver the worker runs
WORKER_MODULE = "commbench.measure.worker"  # the one entry point of a started rank


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    launcher: str  # torchrun, srun, or commbench
    node_index: int | None = None  # SLURM_NODEID, GROUP_RANK (torchrun) when known


def _int_env(name: str) -> int:
    try:
        return int(os.environ[name])
    except ValueError:
        raise UsageError(f"{name}={os.environ[name]!r} is not an integer") from None


def detect_rank_env() -> RankEnv | None:
    """The rank's identity from the environment, or None when nothing launched us."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return RankEnv(
            rank=_int_env("RANK"),
            world_size=_int_env("WORLD_SIZE"),
            local_rank=_int_env("LOCAL_RANK") if "LOCAL_RANK" in env else 0,
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int_env("MASTER_PORT") if "MASTER_PORT" in env else 29500,
            launcher=env.get("COMMBENCH_LAUNCHER", "torchrun"),
            node_index=_int_env("GROUP_RANK") if "GROUP_RANK" in env else None,
        )
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return RankEnv(
            rank=_int_env("SLURM_PROCID"),
            world_size=_int_env("SLURM_NTASKS"),
            local_rank=_int_env("SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
            master_addr=env.get("MASTER_ADDR") or _first_slurm_host(),
            master_port=_int_env("MASTER_PORT") if "MASTER_PORT" in env else _port_from_job(),
            launcher="srun",
            node_index=_int_env("SLURM_NODEID") if "SLURM_NODEID" in env else None,
        )
    return None


def _first_slurm_host() -> str:
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        raise UsageError("under srun but SLURM_JOB_NODELIST is unset; export MASTER_ADDR")
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=True
        )
        return out.stdout.split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        raise UsageError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with scontrol; export MASTER_ADDR") from None


def _port_from_job() -> int:
    """Ranks of one job agree on a port without talking: derive it from the job id."""
    job = os.environ.get("SLURM_JOB_ID", "0")
    return 20000 + int(job) % 20000 if job.isdigit() else 29500


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_nproc() -> int:
    """One rank per visible GPU, else two CPU ranks."""
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return torch.cuda.device_count()
    except ImportError:
        pass
    return 2


def spawn_local(
    nproc: int,
    config_json: str,
    driver: str,
    grace_s: float = 10.0,
    leader_decides: bool = False,
    argv: list[str] | None = None,
) -> int:
    """Start nproc ranks of the worker (WORKER_MODULE) running `driver` on this host and wait for them.

    When one rank fails, the others get `grace_s` to notice through their own timeouts, then
    are stopped, so the launcher never waits forever. Returns the first non-zero exit code.
    With `leader_decides` (diagnose: a rank that fails or hangs is what it reports on) rank 0's
    exit code is the answer, and the others get `grace_s` after rank 0 ends, then are stopped.
    `argv` replaces the worker's command line: bench/harness_overhead.py starts its raw loop's
    ranks here, so they sit in sessions, autogroups and a waiting parent like commbench's own.
    """
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1 (got {nproc})")
    port = free_port()
    procs = []
    for rank in range(nproc):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            COMMBENCH_LAUNCHER="commbench",
        )
        env[WORKER_CONFIG_ENV] = config_json
        env[WORKER_DRIVER_ENV] = driver
        procs.append(
            subprocess.Popen(
                argv or [sys.executable, "-m", WORKER_MODULE],
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        )
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _wait_leader(procs, grace_s) if leader_decides else _wait_all(procs, grace_s)
    except KeyboardInterrupt:  # the ranks record why and leave; what has not left by then is killed
        _stop(procs, signal.SIGINT)
        _wait_for_exit(procs, grace_s)
        raise
    except _Terminated:  # the ranks record why and leave; the launcher waits for that, briefly
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop(procs, signal.SIGTERM)
        _wait_for_exit(procs, grace_s)
        raise Terminated(
            "terminated (SIGTERM): ranks stopped, the run directory keeps the rows measured so far"
        ) from None
    finally:
        _stop(procs, signal.SIGKILL)
        signal.signal(signal.SIGTERM, previous)


class Terminated(CommbenchError):
    """The local launcher was sent SIGTERM and stopped its ranks (exit 143)."""

    exit_code = 128 + signal.SIGTERM


class _Terminated(Exception):
    """The launcher got SIGTERM (the default of kill, systemd, a batch system)."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent: int):
    """preexec_fn of a local rank: the kernel sends it SIGTERM when the launcher dies, SIGKILL
    included (ranks run in a session of their own, away from the terminal's Ctrl-C, so nothing else
    would stop them, and on a GPU node they would keep the GPUs)."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the launcher died before the line above took effect
            os._exit(128 + signal.SIGTERM)

    return arm


def _wait_all(procs: list[subprocess.Popen], grace_s: float) -> int:
    failed_at = None
    while True:
        codes = [proc.poll() for proc in procs]
        bad = [code for code in codes if code not in (None, 0)]
        if all(code is not None for code in codes):
            return bad[0] if bad else 0
        if bad and failed_at is None:
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            _stop(procs, signal.SIGTERM)
            time.sleep(1.0)
            _stop(procs, signal.SIGKILL)
            return bad[0]
        time.sleep(0.05)


def _wait_leader(procs: list[subprocess.Popen], grace_s: float) -> int:
    code = procs[0].wait()
    _wait_for_exit(procs[1:], grace_s)
    return code


def _wait_for_exit(procs: list[subprocess.Popen], grace_s: float) -> None:
    """Wait up to grace_s for every process to exit. Bounded: after a signal, a rank stuck in a
    collective with a peer that also stopped (or in teardown) would otherwise keep Ctrl-C waiting."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(proc.poll() is None for proc in procs):
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen], sig: int) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass


def check_local_launch(cfg, nproc: int | None) -> int:
    """The number of local ranks to start (default: one per GPU, else 2), or UsageError."""
    nproc = default_nproc() if nproc is None else nproc
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1 (got {nproc})")
    if getattr(cfg, "pairwise", False) and nproc < 2:  # known now: no need to start a rank to find out
        raise UsageError(
            "--pairwise measures pairs of ranks: it needs at least 2 (--nproc 2, or more under a launcher)"
        )
    if cfg.dtype not in GLOO_DTYPES and not _has_gpu():
        check_gloo_supports(cfg.dtype, "the only backend without a GPU")
    return nproc


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def require_launched() -> RankEnv:
    env = detect_rank_env()
    if env is None:
        raise CommbenchError("no rank environment (RANK/WORLD_SIZE or SLURM_PROCID/SLURM_NTASKS)")
    return env
