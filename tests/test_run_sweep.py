"""End-to-end gloo sweeps: definitions, records, correctness checking, launchers."""

import csv
import json
import os
import subprocess
import sys

import pytest

from commbench.data.rundir import list_runs, load_run
from tests.conftest import REPO

FIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0,
}


def only_run(out):
    runs = list_runs(out)
    assert len(runs) == 1, runs
    return load_run(runs[0])


def test_two_rank_sweep_matches_nccl_tests_contract(cli, tmp_path):
    result = cli("run", "--nproc", "2", "--min-bytes", "1K", "--max-bytes", "4M", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    assert run.info.complete and run.info.world_size == 2 and run.info.backend == "gloo"
    assert [node.ranks for node in run.info.nodes] == [[0, 1]]
    sizes = [1 << k for k in range(10, 23)]
    for op in FIVE_OPS:
        for in_place in (False, True):
            rows = [r for r in run.records if r["op"] == op and r["in_place"] == in_place]
            assert sorted(r["size_bytes"] for r in rows) == sizes, (op, in_place)
            for r in rows:
                assert r["wrong"] == 0
                assert r["busbw_gbps"] / r["algbw_gbps"] == pytest.approx(FACTOR[op](2))
                assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3)
                assert r["time_us_min"] <= r["time_us_p10"] <= r["time_us"] <= r["time_us_p90"] <= r["time_us_max"]
                assert r["iters"] >= 5 and r["scope"] == "world" and r["group_size"] == 2
                assert r["stop_reason"] in ("converged", "budget") and r["warmup"] >= 1  # adaptive defaults
    # the table on stdout is nccl-tests' and names the run directory
    assert "# Out of bounds values : 0 OK" in result.stdout
    assert str(run.path) in result.stdout
    # the CSV carries the same rows as the JSONL
    with open(run.path / "records.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(run.records) == 5 * 2 * len(sizes)
    assert [row["stop_reason"] for row in rows] == [r["stop_reason"] for r in run.records]


def test_four_ranks_counts_and_factors(cli, tmp_path):
    result = cli(
        "run",
        "--nproc",
        "4",
        "-b",
        "1K",
        "-e",
        "16K",
        "--out",
        str(tmp_path),
        "--ops",
        ",".join(FIVE_OPS) + ",broadcast",
    )
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    for r in run.records:
        assert r["wrong"] == 0 and r["group_size"] == 4
        if r["op"] in FACTOR:
            assert r["busbw_factor"] == pytest.approx(FACTOR[r["op"]](4))
        elements = r["size_bytes"] // 4
        expected_count = {"all_gather": elements // 4, "reduce_scatter": elements // 4, "all_to_all": elements // 4}
        assert r["count"] == expected_count.get(r["op"], elements)


def test_pingpong_reports_uni_and_bi(cli, tmp_path):
    result = cli("run", "--nproc", "2", "-b", "4K", "-e", "64K", "--ops", "pingpong", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    directions = {r["direction"] for r in run.records}
    assert directions == {"uni", "bi"}
    for r in run.records:
        assert r["busbw_factor"] == (2.0 if r["direction"] == "bi" else 1.0) and r["wrong"] == 0


def test_corrupted_rank_is_caught(cli, tmp_path):
    env = {"COMMBENCH_INJECT_CORRUPTION": "1:all_gather"}
    result = cli(
        "run", "--nproc", "2", "-b", "1K", "-e", "4K", "--ops", "all_reduce,all_gather", "--out", str(tmp_path), env=env
    )
    assert result.returncode == 1
    assert "wrong elements" in result.stderr and "Traceback" not in result.stderr
    run = only_run(tmp_path)
    assert run.info.complete
    for r in run.records:
        assert (r["wrong"] > 0) == (r["op"] == "all_gather")
    assert "ERROR" in result.stdout


def test_torchrun_launch(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "commbench",
        "run",
        "-b",
        "1K",
        "-e",
        "2K",
        "--ops",
        "all_reduce",
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    run = only_run(tmp_path)
    assert run.info.args["launcher"] == "torchrun" and run.info.world_size == 2


def test_srun_style_environment(tmp_path):
    """What srun gives each task: SLURM_PROCID/NTASKS/LOCALID/NODEID (MASTER_ADDR from the job script)."""
    from commbench.measure.launch import free_port

    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            SLURM_NODEID="0",
            SLURM_JOB_ID="4242",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "commbench",
                    "run",
                    "-b",
                    "1K",
                    "-e",
                    "1K",
                    "--ops",
                    "sendrecv",
                    "--out",
                    str(tmp_path),
                ],
                env=env,
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    run = only_run(tmp_path)
    assert run.info.args["launcher"] == "srun" and run.info.env["SLURM_JOB_ID"] == "4242"


def test_half_precision_and_fixed_iterations(cli, tmp_path):
    result = cli(
        "run",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "2K",
        "-d",
        "half",
        "-n",
        "7",
        "-w",
        "3",
        "--ops",
        "all_reduce",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    assert {r["iters"] for r in run.records} == {7} and {r["dtype"] for r in run.records} == {"half"}
    assert {r["warmup"] for r in run.records} == {3} and {r["stop_reason"] for r in run.records} == {"fixed"}
    assert json.loads((run.path / "run.json").read_text())["args"]["iters"] == 7
