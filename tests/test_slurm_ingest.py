"""Ingestion at the end of a real Slurm job: `commbench submit ... --db FILE --wait` on the emulated
2-node Slurm cluster (tests/cluster/slurm.py; root, slurm-wlm and munge) leaves the job's run in FILE.

The job's `commbench run` (rank 0, on an emulated node that shares this machine's filesystem) does
the ingest when the run ends; no `db ingest` is run here. Without --cluster the run records Slurm's
cluster name (SLURM_CLUSTER_NAME in the job).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.data import store
from commbench.data.rundir import list_runs, load_run

REPO = Path(__file__).resolve().parents[1]
CLI = "import sys; from commbench.cli import main; sys.exit(main(sys.argv[1:]))"
TINY_RUN = ["--ops", "all_reduce", "-b", "1K", "-e", "64K", "-f", "8"]


@pytest.mark.cluster
@pytest.mark.slurm
def test_submit_wait_with_db_ingests_the_job_run(slurm_cluster, tmp_path):
    env = {**slurm_cluster.env, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    results, db = tmp_path / "results", tmp_path / "fleet.duckdb"
    submitted = subprocess.run(
        [
            sys.executable,
            "-c",
            CLI,
            "submit",
            "--nodes",
            "2",
            "--ntasks-per-node",
            "2",
            "--out",
            str(results),
            "--env",
            "GLOO_SOCKET_IFNAME=eth0",
            "--db",
            str(db),
            "--wait",
            "--",
            *TINY_RUN,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    job = int(re.search(r"submitted job (\d+)", submitted.stdout).group(1))
    (run_dir,) = list_runs(results / f"slurm-{job}")
    run = load_run(run_dir)
    assert run.info.complete and len(run.info.nodes) == 2

    slurm_name = re.search(r"^ClusterName=(\S+)$", Path(env["SLURM_CONF"]).read_text(), re.M).group(1)
    ((run_id, kind, cluster, n_nodes, world_size, path),) = store.query(
        db, "SELECT run_id, kind, cluster, n_nodes, world_size, path FROM runs"
    )[1]
    assert (run_id, kind, cluster, n_nodes, world_size) == (run.run_id, "sweep", slurm_name, 2, 4)
    assert Path(path).resolve() == run_dir.resolve()
    assert run.info.cluster == slurm_name
    counts = store.query(db, "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM samples)")[1][0]
    assert counts == (len(run.records), len(run.records)) and counts[0] > 0
