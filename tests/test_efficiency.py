"""`commbench efficiency` on the synthetic Inspector job against a synthetic benchmark built from
the same latency-bandwidth formula the fixture's generator used (tests/fixtures/nccl_inspector)."""

import json

import pytest
from test_import_nccl_inspector import JOB

from commbench import ops
from commbench.analysis.efficiency import job_efficiency
from commbench.data.bandwidth_table import BandwidthTable
from commbench.data.nccl_inspector import read_job, read_job_samples, write_job
from commbench.data.records import RowFacts, Stats, build_record
from commbench.data.rundir import RunWriter
from commbench.data.schema import NodeInfo, RunInfo
from tests.conftest import run_cli


def benchmark_records(rate_scale=1.0):
    """What generate.py's formula says a benchmark of these groups measures (no jitter, no slow rank)."""
    records = []
    for op, scope, n, rate in [
        ("all_reduce", "world", 4, 40e9),
        ("all_gather", "world", 4, 40e9),
        ("reduce_scatter", "world", 4, 40e9),
        ("all_reduce", "intra", 2, 300e9),
    ]:
        factor = ops.busbw_factor(op, n)
        for size in (1 << 20, 4 << 20, 16 << 20, 64 << 20):
            time_us = 25 + size * factor / (rate * rate_scale) * 1e6
            row = RowFacts(
                op=op,
                scope=scope,
                group_size=n,
                n_groups=1,
                size_bytes=size,
                count=size // 4,
                dtype="float",
                redop="sum",
                root=-1,
                in_place=op == "all_reduce",
                iters=20,
                warmup=5,
                timer="host",
                stop_reason="fixed",
            )
            records.append(
                build_record(
                    row,
                    Stats(time_us, time_us, time_us, time_us, time_us, time_us, 0.0),
                    factor,
                    time_us_mean_nccl=None,
                    wrong=0,
                )
            )
    return records


@pytest.fixture(scope="module")
def job():
    return read_job([JOB])


def _efficiency(job, tmp_path, rate_scale=1.0):
    directory = write_job(job, tmp_path)
    table = BandwidthTable.from_records(benchmark_records(rate_scale), world_size=4, nodes=2)
    tables = {True: table, False: table}
    return job_efficiency(
        [r.model_dump() for r in job.records], read_job_samples(directory), job.info.args["communicators"], tables
    )


def test_job_matching_its_benchmark_is_about_100_percent(job, tmp_path):
    result = _efficiency(job, tmp_path)
    rows = {(r.comm_name, r.op, r.size_bytes): r for r in result.rows}
    # the fixture's calls: +-5% jitter, the slowest of the ranks per call, rank 3 5% slower
    for key, row in rows.items():
        assert 0.85 <= row.efficiency <= 1.0, key
        assert row.ci_low <= row.efficiency <= row.ci_high
    assert {s.op for s in result.skipped} == {"send", "recv"}  # no p2p curve in the benchmark
    assert not result.far_below
    world = rows[("DP Group 0", "all_reduce", 64 << 20)]
    assert world.slow_ranks[0]["rank"] == 3 and world.slow_ranks[0]["host"] == "gpu-a02"


def test_benchmark_twice_as_fast_halves_efficiency_and_names_the_communicators(job, tmp_path):
    full = {(r.comm_id, r.op, r.size_bytes): r.efficiency for r in _efficiency(job, tmp_path / "a").rows}
    result = _efficiency(job, tmp_path / "b", rate_scale=2.0)
    for row in result.rows:
        if row.size_bytes >= 16 << 20 and row.scope == "world":  # bandwidth-bound: latency is <2% there
            assert row.efficiency / full[(row.comm_id, row.op, row.size_bytes)] == pytest.approx(0.5, abs=0.03)
    named = {c["comm_name"] for c in result.far_below_communicators()}
    assert "DP Group 0" in named


def test_cli_json_and_bad_input(job, tmp_path):
    job_dir = write_job(job, tmp_path / "jobs")
    info = RunInfo(
        run_id="bench",
        created="2026-12-01T00:00:00+00:00",
        backend="nccl",
        world_size=4,
        complete=False,
        nodes=[
            NodeInfo(hostname=h, node_id=i, ranks=[2 * i, 2 * i + 1], local_ranks=[0, 1])
            for i, h in enumerate(["gpu-a01", "gpu-a02"])
        ],
        synthetic=True,
        note="generate.py's formula",
    )
    writer = RunWriter(tmp_path / "bench", info)
    writer.add_records(benchmark_records())
    writer.finish(complete=True)
    result = run_cli(
        "efficiency", str(job_dir), "--against", str(writer.path), "--json", "--db", str(tmp_path / "none.duckdb")
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["job"]["job_id"] == "4711" and document["against"]["synthetic"] is True
    assert len(document["rows"]) == 6 and {row["op"] for row in document["rows"]} == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
    }
    text = run_cli("efficiency", str(job_dir), "--against", str(writer.path), "--db", str(tmp_path / "none.duckdb"))
    assert "SYNTHETIC" in text.stdout and "no communicator below 70%" in text.stdout
    for args, said in [
        ([str(writer.path), "--against", str(writer.path)], "not an NCCL Inspector job"),
        ([str(job_dir)], "no --against and no database"),
        ([str(job_dir), "--against", "/nonexistent"], "not a run directory"),
        ([str(job_dir), "--against", str(JOB / "gpu-a01-pid1101.log")], "not a readable baseline"),
        ([str(job_dir), "--against", str(writer.path), "--below", "7"], "bad fraction"),
    ]:
        bad = run_cli("efficiency", *args, "--db", str(tmp_path / "none.duckdb"))
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, (
            args,
            bad.stderr,
        )


def test_against_a_baseline_file_prices_like_the_run(job, tmp_path):
    """--against BASELINE: a baseline made from the benchmark run gives the run's efficiencies (the
    baseline keeps medians, the run's table its means: equal here, the synthetic rows have no spread)."""
    job_dir = write_job(job, tmp_path / "jobs")
    info = RunInfo(
        run_id="bench",
        created="2026-12-01T00:00:00+00:00",
        backend="nccl",
        world_size=4,
        complete=False,
        nodes=[
            NodeInfo(hostname=h, node_id=i, ranks=[2 * i, 2 * i + 1], local_ranks=[0, 1])
            for i, h in enumerate(["gpu-a01", "gpu-a02"])
        ],
        synthetic=True,
        note="generate.py's formula",
    )
    writer = RunWriter(tmp_path / "bench", info)
    writer.add_records(benchmark_records())
    writer.finish(complete=True)
    made = run_cli("baseline", "create", str(writer.path), "-o", str(tmp_path / "baseline.json"))
    assert made.returncode == 0, made.stderr
    db = str(tmp_path / "none.duckdb")
    by_run = json.loads(run_cli("efficiency", str(job_dir), "--against", str(writer.path), "--json", "--db", db).stdout)
    by_baseline = run_cli(
        "efficiency", str(job_dir), "--against", str(tmp_path / "baseline.json"), "--json", "--db", db
    )
    assert by_baseline.returncode == 0, by_baseline.stderr
    document = json.loads(by_baseline.stdout)
    assert document["against"]["benchmark"].startswith("baseline ")
    assert {(r["comm_id"], r["op"], r["size_bytes"]): round(r["efficiency"], 6) for r in document["rows"]} == {
        (r["comm_id"], r["op"], r["size_bytes"]): round(r["efficiency"], 6) for r in by_run["rows"]
    }


def test_all_reduce_is_priced_by_the_in_place_rows(job, tmp_path):
    """PyTorch's all_reduce works in place: with an out-of-place variant four times slower in the
    benchmark (as gloo's is, several-fold, on the emulated cluster), the job is priced by in-place."""
    records = benchmark_records()
    slow_copies = [
        r.model_copy(update={"in_place": not r.in_place, "time_us": r.time_us * 4, "time_us_mean": r.time_us_mean * 4})
        for r in records
    ]
    table_in = BandwidthTable.from_records(records + slow_copies, world_size=4, nodes=2, in_place=True)
    table_out = BandwidthTable.from_records(records + slow_copies, world_size=4, nodes=2, in_place=False)
    directory = write_job(job, tmp_path)
    result = job_efficiency(
        [r.model_dump() for r in job.records],
        read_job_samples(directory),
        job.info.args["communicators"],
        {True: table_in, False: table_out},
    )
    world = {(r.op, r.size_bytes): r.efficiency for r in result.rows if r.comm_name == "DP Group 0"}
    assert 0.85 <= world[("all_reduce", 64 << 20)] <= 1.0  # in-place rows (fast): ~100%
    assert 0.85 <= world[("all_gather", 64 << 20)] <= 1.0  # out-of-place rows: the fast ones for all_gather
