"""History: one row's busbw over a cluster's runs, from the results database, with change points."""

import dash
from dash import Input, Output, State, callback, dcc, html

from commbench.units import format_size
from dashboard.app import results
from dashboard.figures.history import history_figure
from dashboard.fleet import busiest_row, database_for, history_rows, history_series, link_for, scopes_of, sizes_of
from dashboard.ui import control, notices, page_heading

dash.register_page(__name__, path="/history", name="History", order=5, title="commbench · history")

ALL_SCOPES = "all"


def layout(**_query):
    heading = page_heading(
        "History",
        "One row's busbw in every run of a cluster, in start order, from the results "
        "database (`commbench db ingest`). Dashed lines are change points (ruptures PELT, "
        "material above 5%) with the run.json differences found there. Click a run to compare "
        "it with the run before it.",
    )
    db = database_for(results().root)
    if db is None:
        return html.Div(
            heading
            + [
                notices(
                    [
                        f"no results database: run `commbench db ingest {results().root}` "
                        f"(it writes {results().root / 'commbench.duckdb'} when run there with "
                        "--db) or set COMMBENCH_DB"
                    ]
                )
            ]
        )
    rows = history_rows(db)
    start = busiest_row(rows)  # the row with the most points: the page never opens on an empty history
    if start is None:
        return html.Div(
            heading
            + [
                html.P(
                    f"{db} holds no sweep or import yet: run `commbench db ingest {results().root}`.", id="hist-empty"
                )
            ]
        )
    return html.Div(
        heading
        + [
            html.Div(
                [
                    control(
                        "cluster",
                        dcc.Dropdown(
                            id="hist-cluster",
                            options=sorted({row.cluster for row in rows}),
                            value=start.cluster,
                            clearable=False,
                        ),
                    ),
                    control(
                        "op",
                        dcc.Dropdown(
                            id="hist-op", options=sorted({row.op for row in rows}), value=start.op, clearable=False
                        ),
                    ),
                    control(
                        "size",
                        dcc.Dropdown(
                            id="hist-size",
                            options=_size_options(sizes_of(rows, start.cluster, start.op)),
                            value=start.size,
                            clearable=False,
                        ),
                    ),
                    control(
                        "scope",
                        dcc.Dropdown(
                            id="hist-scope",
                            value=start.scope,
                            clearable=False,
                            options=[ALL_SCOPES, *scopes_of(rows, start.cluster, start.op, start.size)],
                        ),
                    ),
                ],
                className="controls",
            ),
            dcc.Graph(id="hist-figure"),
            html.Div(id="hist-changes"),
            dcc.Link("click a run to compare it with the run before it", id="hist-compare-link", href="/compare"),
        ]
    )


def _size_options(sizes: list[int]) -> list[dict]:
    return [{"label": format_size(size), "value": size} for size in sizes]


@callback(
    Output("hist-size", "options"),
    Output("hist-size", "value"),
    Input("hist-cluster", "value"),
    Input("hist-op", "value"),
    State("hist-size", "value"),
    prevent_initial_call=True,
)
def offer_sizes(cluster, op, size):
    """Only the sizes this cluster measured for this op; the chosen one kept when it is among them, else
    the size with the most points."""
    rows = history_rows(database_for(results().root))
    sizes = sizes_of(rows, cluster, op)
    if size not in sizes:
        busiest = busiest_row(rows, cluster, op)
        size = busiest.size if busiest else None
    return _size_options(sizes), size


@callback(
    Output("hist-scope", "options"),
    Output("hist-scope", "value"),
    Input("hist-size", "value"),
    State("hist-cluster", "value"),
    State("hist-op", "value"),
    State("hist-scope", "value"),
    prevent_initial_call=True,
)
def offer_scopes(size, cluster, op, scope):
    scopes = scopes_of(history_rows(database_for(results().root)), cluster, op, size)
    return [ALL_SCOPES, *scopes], scope if scope in scopes else ALL_SCOPES


@callback(
    Output("hist-figure", "figure"),
    Output("hist-changes", "children"),
    Input("hist-cluster", "value"),
    Input("hist-op", "value"),
    Input("hist-size", "value"),
    Input("hist-scope", "value"),
)
def draw_history(cluster, op, size, scope):
    db = database_for(results().root)
    if db is None or not (cluster and op and size):
        return history_figure([]), None
    series = history_series(db, cluster, op, int(size), None if scope == ALL_SCOPES else scope)
    synthetic = (
        notices(["these runs are SYNTHETIC (generated, never measured): run.json source 'synthetic'"])
        if any(point["source"] == "synthetic" for one in series for point in one["points"])
        else None
    )
    return history_figure(series), [synthetic, _change_list(series)]


def _change_list(series: list[dict]):
    items = [
        html.Li(
            f"{one['scope']} n={one['group_size']}: run {change['index']} ({change['run_id']}), busbw "
            f"{change['change']:+.1%}: {'; '.join(change['differences'])}"
        )
        for one in series
        for change in one["change_points"]
    ]
    return html.Ul(items, id="hist-change-list") if items else html.P("no change point", id="hist-change-list")


@callback(
    Output("hist-compare-link", "href"),
    Output("hist-compare-link", "children"),
    Input("hist-figure", "clickData"),
    Input("hist-cluster", "value"),
    Input("hist-op", "value"),
    Input("hist-size", "value"),
    Input("hist-scope", "value"),
)
def compare_link(click, cluster, op, size, scope):
    """A link to the Compare page for the clicked run and the run before it in the same series."""
    if not click or dash.ctx.triggered_id != "hist-figure":
        return "/compare", "click a run to compare it with the run before it"
    point = click["points"][0]
    db = database_for(results().root)
    series = history_series(db, cluster, op, int(size), None if scope == ALL_SCOPES else scope)[point["curveNumber"]]
    return link_for(series["points"], point["pointIndex"], results().root)
