"""History: one row's busbw over a cluster's runs, from the results database, with change points."""

import dash
from dash import Input, Output, callback, dcc, html

from commbench.units import format_size
from dashboard.app import results
from dashboard.figures.history import history_figure
from dashboard.fleet import database_for, history_choices, history_series, link_for
from dashboard.ui import control, notices, page_heading

dash.register_page(__name__, path="/history", name="History", order=5, title="commbench · history")

ALL_SCOPES = "all"


def layout(**_query):
    heading = page_heading("History", "One row's busbw in every run of a cluster, in start order, from the results "
                           "database (`commbench db ingest`). Dashed lines are change points (ruptures PELT, "
                           "material above 5%) with the run.json differences found there. Click a run to compare "
                           "it with the run before it.")
    db = database_for(results().root)
    if db is None:
        return html.Div(heading + [notices([f"no results database: run `commbench db ingest {results().root}` "
                                            f"(it writes {results().root / 'commbench.duckdb'} when run there with "
                                            "--db) or set COMMBENCH_DB"])])
    choices = history_choices(db)
    return html.Div(heading + [
        html.Div([
            control("cluster", dcc.Dropdown(id="hist-cluster", options=choices["cluster"],
                                            value=(choices["cluster"] or [None])[0], clearable=False)),
            control("op", dcc.Dropdown(id="hist-op", options=choices["op"], value=_first(choices["op"], "all_reduce"),
                                       clearable=False)),
            control("size", dcc.Dropdown(id="hist-size", options=[{"label": format_size(size), "value": size}
                                                                  for size in choices["size"]],
                                         value=(choices["size"] or [None])[-1], clearable=False)),
            control("scope", dcc.Dropdown(id="hist-scope", options=[ALL_SCOPES] + choices["scope"], value=ALL_SCOPES,
                                          clearable=False)),
        ], className="controls"),
        dcc.Graph(id="hist-figure"),
        html.Div(id="hist-changes"),
        dcc.Link("click a run to compare it with the run before it", id="hist-compare-link", href="/compare"),
    ])


def _first(options: list, preferred: str):
    return preferred if preferred in options else (options or [None])[0]


@callback(Output("hist-figure", "figure"), Output("hist-changes", "children"),
          Input("hist-cluster", "value"), Input("hist-op", "value"), Input("hist-size", "value"),
          Input("hist-scope", "value"))
def draw_history(cluster, op, size, scope):
    db = database_for(results().root)
    if db is None or not (cluster and op and size):
        return history_figure([]), None
    series = history_series(db, cluster, op, int(size), None if scope == ALL_SCOPES else scope)
    synthetic = notices(["these runs are SYNTHETIC (generated, never measured): run.json source 'synthetic'"]) if any(
        point["source"] == "synthetic" for one in series for point in one["points"]) else None
    return history_figure(series), [synthetic, _change_list(series)]


def _change_list(series: list[dict]):
    items = [html.Li(f"{one['scope']} n={one['group_size']}: run {change['index']} ({change['run_id']}), busbw "
                     f"{change['change']:+.1%}: {'; '.join(change['differences'])}")
             for one in series for change in one["change_points"]]
    return html.Ul(items, id="hist-change-list") if items else html.P("no change point", id="hist-change-list")


@callback(Output("hist-compare-link", "href"), Output("hist-compare-link", "children"),
          Input("hist-figure", "clickData"), Input("hist-cluster", "value"), Input("hist-op", "value"),
          Input("hist-size", "value"), Input("hist-scope", "value"))
def compare_link(click, cluster, op, size, scope):
    """A link to the Compare page for the clicked run and the run before it in the same series."""
    if not click or dash.ctx.triggered_id != "hist-figure":
        return "/compare", "click a run to compare it with the run before it"
    point = click["points"][0]
    db = database_for(results().root)
    series = history_series(db, cluster, op, int(size), None if scope == ALL_SCOPES else scope)[point["curveNumber"]]
    return link_for(series["points"], point["pointIndex"], results().root)
