"""Diagnose: a `commbench diagnose` run's verdicts, nodes coloured by verdict, the straggler screen, and
each round's groups; then the scheduler actions of the fleet (drains and resumes from the store)."""

import dash
from dash import Input, Output, callback, dcc, html

from dashboard.app import results
from dashboard.figures.diagnose import node_map, rounds_chart, straggler_chart, straggler_verdict, verdict_rows
from dashboard.fleet import scheduler_actions
from dashboard.ui import HIDDEN, SHOWN, columns_of, control, data_table, empty_state, notices, run_options

dash.register_page(__name__, path="/diagnose", name="Diagnose", order=7, title="commbench · diagnose")

NO_REPORT = (
    "No diagnose report in this results folder yet: `commbench diagnose ... --out DIR` writes one, and it "
    "appears here on the next page load."
)


def layout(**_query):
    entries = results().usable(("diagnose",))
    return html.Div(
        [
            html.H2("Diagnose"),
            html.P(
                "Which nodes to drain and which links to inspect: every node coloured by its verdict, the straggler "
                "screen (nodes slow themselves or late to the others: reported, not drained), then every round's "
                "groups (one row per round) with the outcome of the group each node was in.",
                className="lead",
            ),
            *(_report_section(entries) if entries else [empty_state(NO_REPORT, "dg-empty")]),
            *actions_section(),
        ]
    )


def _report_section(entries) -> list:
    """The picker (newest diagnosis first), the verdicts and the three figures of the chosen report."""
    return [
        html.Div(
            [
                control(
                    "diagnosis",
                    dcc.Dropdown(id="dg-run", options=run_options(entries), clearable=False, value=entries[0].key),
                    wide=True,
                )
            ],
            className="controls",
        ),
        html.Div(id="dg-summary"),
        data_table("dg-verdicts"),
        html.Div([dcc.Graph(id="dg-nodes"), dcc.Graph(id="dg-stragglers"), dcc.Graph(id="dg-rounds")], id="dg-figures"),
    ]


def actions_section() -> list:
    """Every drain and resume commbench carried out or refused (check, diagnose, health --slurm)."""
    rows, where = scheduler_actions(results().root)
    return [
        html.H3("Scheduler actions"),
        html.P(where, id="dg-actions-source"),
        data_table("dg-actions", columns=columns_of(rows), data=rows),
    ]


@callback(
    Output("dg-summary", "children"),
    Output("dg-verdicts", "columns"),
    Output("dg-verdicts", "data"),
    Output("dg-nodes", "figure"),
    Output("dg-stragglers", "figure"),
    Output("dg-rounds", "figure"),
    Output("dg-figures", "style"),
    Input("dg-run", "value"),
)
def draw(key):
    """The chosen report's summary, verdicts and figures; without a readable report, one sentence and no figure."""
    entry = results().entry(key) if key else None
    if entry is None or entry.diagnosis is None:
        problem = notices([entry.error], "error") if entry and entry.error else empty_state(NO_REPORT, "dg-empty")
        return problem, [], [], {}, {}, {}, HIDDEN
    report = entry.diagnosis
    rows = verdict_rows(report)
    summary = html.Div(
        [
            html.P(
                f"{entry.label}: {report['nodes']} nodes, {report['rounds']} rounds, {report['group_tests']} group tests. "
                f"Source: {report['source']}."
            ),
            html.P(f"sbatch --exclude={report['exclude']}" if report["exclude"] else "nothing to exclude"),
            html.P(straggler_verdict(report), id="dg-straggler-verdict"),
        ]
    )
    return (summary, columns_of(rows), rows, node_map(report), straggler_chart(report), rounds_chart(report), SHOWN)
