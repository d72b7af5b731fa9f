"""The one entry point of a measuring rank, and where a command's choice of driver becomes a run.

`commbench run` picks the sweep or pairwise driver, `commbench overlap` the overlap driver; they
call `launch_driver`. Under torchrun or srun this process is one rank and runs the driver here.
Otherwise it starts N local ranks of `python -m commbench.measure.worker`, which read the run
options (JSON) and the driver's name from their environment.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from commbench.data.rundir import INTERRUPTED_PREFIX, load_run, new_run_id, prepare_output_folder
from commbench.errors import CommbenchError, Interrupted
from commbench.measure.launch import (
    WORKER_CONFIG_ENV,
    WORKER_DRIVER_ENV,
    RankEnv,
    Terminated,
    check_local_launch,
    detect_rank_env,
    require_launched,
    spawn_local,
)
from commbench.measure.options import OverlapConfig, RunConfig

DRIVERS = ("sweep", "pairwise", "overlap")


def driver_class(name: str):
    """The driver of that name (imports torch); each lives in its own module and knows no other."""
    if name == "sweep":
        from commbench.measure.sweep import SweepDriver

        return SweepDriver
    if name == "pairwise":
        from commbench.measure.pairwise import PairwiseDriver

        return PairwiseDriver
    if name == "overlap":
        from commbench.measure.overlap import OverlapDriver

        return OverlapDriver
    raise ValueError(f"unknown driver {name!r}; known: {', '.join(DRIVERS)}")


def run_driver(name: str, cfg: RunConfig, env: RankEnv) -> int:
    """What one rank runs: the driver through the runner."""
    from commbench.measure.runner import run_rank

    return run_rank(cfg, env, driver_class(name))


def launch_driver(name: str, cfg: RunConfig, nproc: int | None) -> int:
    """Run `name` on this rank under a launcher, else on `nproc` local ranks started here."""
    env = detect_rank_env()
    if env is not None:
        cfg.check_moe_ranks(env.world_size)
        prepare_output_folder(cfg.out_dir)
        return run_driver(name, cfg, env)
    nproc = check_local_launch(cfg, nproc)
    cfg.check_moe_ranks(nproc)
    prepare_output_folder(cfg.out_dir)  # the last check, so a refused run leaves no folder behind
    cfg.run_id = cfg.run_id or new_run_id()  # chosen here, so an interrupt can say where the rows are
    run_dir = Path(cfg.out_dir) / cfg.run_id
    try:
        return spawn_local(nproc, cfg.to_json(), name)
    except KeyboardInterrupt:
        raise Interrupted(stopped_line("interrupted", run_dir)) from None
    except Terminated as exc:
        raise Interrupted(stopped_line("terminated (SIGTERM)", run_dir), exit_code=exc.exit_code) from None


def stopped_line(how: str, run_dir: Path) -> str:
    """'interrupted: 12 of 40 rows kept in results/ID', read from what rank 0 left in the run directory."""
    try:
        run = load_run(run_dir)
    except CommbenchError:
        return f"{how} before the first row: nothing kept ({run_dir} was not written)"
    reason = run.info.reason or ""
    kept = (
        reason.removeprefix(INTERRUPTED_PREFIX) if reason.startswith(INTERRUPTED_PREFIX) else f"{len(run.records)} rows"
    )
    return f"{how}: {kept} kept in {run_dir}"


def main() -> int:
    name = os.environ[WORKER_DRIVER_ENV]
    if name == "diagnose":  # its own rank loop, without the runner's world group and watchdog
        from commbench.measure.diagnose import DiagnoseConfig, run_rank

        return run_rank(DiagnoseConfig.from_json(os.environ[WORKER_CONFIG_ENV]), require_launched())
    options = OverlapConfig if name == "overlap" else RunConfig
    try:
        return run_driver(name, options.from_json(os.environ[WORKER_CONFIG_ENV]), require_launched())
    except KeyboardInterrupt:  # rank 0 has recorded it; the launcher says it once, for every rank
        _leave_interrupted()
    return 130  # not reached: _leave_interrupted does not return


def _leave_interrupted() -> None:
    """Exit 130 without the interpreter's teardown. The run's files are closed by now (the
    exception unwound through the writer), but the collective the Ctrl-C cut short may still have
    gloo threads at work, and destroying the process group under them aborts the rank with
    "terminate called without an active exception" on the launcher's stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


if __name__ == "__main__":
    sys.exit(main())
