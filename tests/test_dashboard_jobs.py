"""The Jobs page: the synthetic Inspector job over a synthetic benchmark, drawn in-process."""

import pytest
from test_efficiency import benchmark_records
from test_import_nccl_inspector import JOB

from commbench.data.nccl_inspector import read_job, write_job
from commbench.data.rundir import RunWriter
from commbench.data.schema import NodeInfo, RunInfo

pytest.importorskip("dash")


@pytest.fixture
def app_with_job(tmp_path):
    from dashboard.app import create_app

    job_dir = write_job(read_job([JOB]), tmp_path)
    info = RunInfo(
        run_id="bench-synthetic",
        created="2026-12-01T00:00:00+00:00",
        backend="nccl",
        world_size=4,
        nodes=[
            NodeInfo(hostname=h, node_id=i, ranks=[2 * i, 2 * i + 1], local_ranks=[0, 1])
            for i, h in enumerate(["gpu-a01", "gpu-a02"])
        ],
        synthetic=True,
        note="generate.py's formula",
    )
    writer = RunWriter(tmp_path, info)
    writer.add_records(benchmark_records(rate_scale=2.0))  # twice the job's rates: every row near 50%
    writer.finish(complete=True)
    return create_app(tmp_path), job_dir.name, writer.path.name


def test_jobs_page_draws_the_job_over_the_benchmark_and_names_far_below(app_with_job):
    app, job_key, bench_key = app_with_job
    from dashboard.pages import jobs

    with app.server.app_context():
        page = jobs.layout()
        assert "jobs-figure" in str(page)
        figure, rows, _columns, far, messages = jobs.draw_job(job_key, bench_key)
    names = [trace.name for trace in figure.data]
    assert any(name.startswith("job: DP Group 0") for name in names)
    assert any(name.startswith("benchmark curve: all_reduce / world / 4 ranks") for name in names)
    assert (
        "imported from NCCL Inspector logs" in figure.layout.title.text
        and "measured by commbench" in figure.layout.title.text
    )
    assert len(rows) == 6 and all(0.3 < row["efficiency"] < 0.8 for row in rows)  # latency-bound rows nearer 1
    assert "DP Group 0" in str(far) and "SYNTHETIC" in str(messages)
    job_points = next(t for t in figure.data if t.name.startswith("job: DP Group 0") and len(t.x) >= 1)
    assert all(low <= y for low, y in zip(job_points.error_y.arrayminus, job_points.y))


def test_jobs_page_without_jobs_says_how_to_import(tmp_path):
    from dashboard.app import create_app
    from dashboard.pages import jobs

    app = create_app(tmp_path)
    with app.server.app_context():
        assert "commbench import nccl-inspector" in str(jobs.layout())
