"""Runs: every run directory under the results folder, and the selection the other pages start from."""

import dash
from dash import Input, Output, State, callback, dcc, html

from dashboard.app import SELECTION_STORE, results
from dashboard.ui import data_table, notices

dash.register_page(__name__, path="/", name="Runs", order=0, title="commbench · runs")

REFRESH_MS = 5000
COLUMNS = [
    "run",
    "synthetic",
    "kind",
    "source",
    "created",
    "backend",
    "nodes",
    "ranks",
    "scopes",
    "ops",
    "records",
    "state",
]


def layout(**_query):
    return html.Div(
        [
            html.H2("Runs"),
            html.P(
                "Every run under the results folder, newest first; new runs appear as they are written. Tick runs "
                "to compare them on the Bandwidth page (and to start the Topology and Overlap pages from them).",
                className="lead",
            ),
            dcc.Interval(id="runs-refresh", interval=REFRESH_MS),
            html.Div(id="runs-problems"),
            data_table(
                "runs-table",
                columns=[{"name": c, "id": c} for c in COLUMNS],
                row_selectable="multi",
                page_size=25,
                style_data_conditional=[
                    {"if": {"filter_query": '{state} contains "error"'}, "backgroundColor": "#fdecea"},
                    {"if": {"filter_query": '{state} contains "incomplete"'}, "backgroundColor": "#fff8e1"},
                    {
                        "if": {"column_id": "synthetic", "filter_query": '{synthetic} contains "SYNTHETIC"'},
                        "backgroundColor": "#ffcc80",
                        "fontWeight": "bold",
                    },
                ],
            ),
            html.Div(id="runs-count", className="lead"),
        ]
    )


@callback(
    Output("runs-table", "data"),
    Output("runs-table", "selected_rows"),
    Output("runs-problems", "children"),
    Output("runs-count", "children"),
    Input("runs-refresh", "n_intervals"),
    State(SELECTION_STORE, "data"),
)
def refresh(_ticks, selected):
    entries = results().entries()
    rows = [entry.summary() for entry in entries]
    chosen = [i for i, row in enumerate(rows) if row["id"] in (selected or [])]
    errors = [message for entry in entries if not entry.ok for message in entry.messages()]
    warnings = [message for entry in entries if entry.ok for message in entry.messages()]
    problems = html.Div([notices(errors, "error"), notices(warnings, "warning")])
    return rows, chosen, problems, f"{len(rows)} runs in {results().root}"


@callback(
    Output(SELECTION_STORE, "data"),
    Input("runs-table", "selected_rows"),
    State("runs-table", "data"),
    prevent_initial_call=True,
)
def remember_selection(selected_rows, rows):
    return [rows[i]["id"] for i in selected_rows or [] if i < len(rows)]
