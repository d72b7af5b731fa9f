"""Jobs: a training job's collectives (an NCCL Inspector import) over the benchmark of its nodes."""

import dash
from dash import Input, Output, callback, dcc, html

from commbench.analysis.efficiency import FAR_BELOW, efficiency_of_runs, tables_of_run
from dashboard.app import results
from dashboard.figures.jobs import jobs_figure
from dashboard.ui import columns_of, control, data_table, notices, page_heading, run_options

dash.register_page(__name__, path="/jobs", name="Jobs", order=8, title="commbench · jobs")


def _jobs():
    return [e for e in results().usable(("import",)) if e.info.get("source") == "nccl-inspector"]


def _benchmarks():
    return results().usable(("sweep",))


def layout(job: str | None = None, against: str | None = None, **_query):
    jobs, benchmarks = _jobs(), _benchmarks()
    job_keys, bench_keys = [e.key for e in jobs], [e.key for e in benchmarks]
    heading = page_heading(
        "Jobs",
        "A training job's collectives, imported from NCCL Inspector logs (`commbench import "
        "nccl-inspector`), over the benchmark curve of a sweep: per communicator, op and size bucket "
        "the busbw the job reached, with a 95% bootstrap interval over its calls, against the "
        "benchmark's bandwidth table at the same sizes and group size (`commbench efficiency`). "
        f"Communicators under {FAR_BELOW:.0%} are named below the figure.",
    )
    if not jobs:
        return html.Div(
            heading
            + [
                notices(
                    ["no imported job in this results folder: `commbench import nccl-inspector LOGS --out RESULTS`"]
                )
            ]
        )
    return html.Div(
        heading
        + [
            html.Div(
                [
                    control(
                        "job",
                        dcc.Dropdown(
                            id="jobs-job", options=run_options(jobs), value=job if job in job_keys else job_keys[0]
                        ),
                        wide=True,
                    ),
                    control(
                        "benchmark",
                        dcc.Dropdown(
                            id="jobs-against",
                            options=run_options(benchmarks),
                            value=against if against in bench_keys else _same_nodes(jobs[0], benchmarks),
                        ),
                        wide=True,
                    ),
                ],
                className="controls",
            ),
            html.Div(id="jobs-notices"),
            dcc.Graph(id="jobs-figure"),
            html.Div(id="jobs-far-below"),
            data_table(
                "jobs-table",
                style_data_conditional=[
                    {"if": {"filter_query": f"{{efficiency}} < {FAR_BELOW}"}, "backgroundColor": "#fde0dd"}
                ],
            ),
        ]
    )


def _same_nodes(job, benchmarks):
    """The newest sweep of exactly the job's nodes, else the newest sweep."""
    hosts = sorted(node["hostname"] for node in job.info.get("nodes", []))
    matching = [e for e in benchmarks if sorted(node["hostname"] for node in e.info.get("nodes", [])) == hosts]
    chosen = matching or benchmarks
    return chosen[0].key if chosen else None


@callback(
    Output("jobs-figure", "figure"),
    Output("jobs-table", "data"),
    Output("jobs-table", "columns"),
    Output("jobs-far-below", "children"),
    Output("jobs-notices", "children"),
    Input("jobs-job", "value"),
    Input("jobs-against", "value"),
)
def draw_job(job_key, bench_key):
    if not job_key or not bench_key:
        return jobs_figure(None, None, "Jobs"), [], [], None, notices(["pick a job and a benchmark run"])
    job, bench = results().entry(job_key), results().entry(bench_key)
    tables = tables_of_run(bench.run)
    result = efficiency_of_runs(job.run, tables)
    title = (
        f"job {job.info['args'].get('job_id')}: imported from NCCL Inspector logs ({job.info.get('note')})<br>"
        f"against {bench.label}: measured by commbench on {', '.join(n['hostname'] for n in bench.info['nodes'])}, "
        f"{bench.info.get('created')}"
    )
    rows = [_table_row(row) for row in result.rows]
    messages = [f"{bench.key} is SYNTHETIC, not a measurement: {bench.info.get('note')}"] if bench.synthetic else []
    messages += [f"skipped {s.op} of {s.comm_id}: {s.why}" for s in result.skipped]
    far = [
        html.P(
            [
                html.B("far below: "),
                f"communicator {c['comm_id']} ({c['comm_name']}) on {', '.join(c['hosts'])}: "
                f"{c['rows']} row(s), worst {c['worst_efficiency']:.1%}",
            ],
            className="far-below",
        )
        for c in result.far_below_communicators()
    ]
    return (
        jobs_figure(result, tables, title),
        rows,
        columns_of(rows),
        far or html.P(f"no communicator under {FAR_BELOW:.0%} of the benchmark"),
        notices(messages),
    )


def _table_row(row) -> dict:
    return {
        "communicator": f"{row.comm_name} ({row.comm_id})",
        "op": row.op,
        "scope": row.scope,
        "ranks": row.group_size,
        "size_bytes": row.size_bytes,
        "calls": row.calls,
        "job_busbw_gbps": round(row.job_busbw_gbps, 4),
        "benchmark_busbw_gbps": round(row.benchmark_busbw_gbps, 4),
        "efficiency": round(row.efficiency, 4),
        "ci_low": round(row.ci_low, 4),
        "ci_high": round(row.ci_high, 4),
        "hosts": ", ".join(row.hosts),
    }
