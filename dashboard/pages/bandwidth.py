"""Bandwidth: busbw or algbw against message size for the chosen runs, op and scopes."""

import dash
from dash import Input, Output, State, callback, dcc, html

from commbench.modeling.hardware import load_network, preset_names
from commbench.topology.rates import nominal_rates
from dashboard.app import SELECTION_STORE, results
from dashboard.figures.bandwidth import METRICS, bandwidth_figure, latency_figure, select_records, table_rows
from dashboard.figures.moe import received_heatmap, routed_rows, routing_curves_figure, row_label
from dashboard.figures.topology import cluster_topology
from dashboard.ui import control, data_table, notices, run_options, synthetic_notices

dash.register_page(__name__, path="/bandwidth", name="Bandwidth", order=2, title="commbench · bandwidth")

MEASURED_KINDS = ("sweep", "import", "pairwise")
MAX_TABLE_ROWS = 10_000  # rows sent to the browser's table (a 195k-row run sent 121 MB); the CSV has every row
AUTO_REFERENCE = "auto"
# why a run's topology yields no nominal rate (topology.rates: NVLink inside a node, NIC rate between nodes)
NO_NOMINAL_RATE = (
    "no nominal-rate line: the runs' topology records no NVLink (no GPUs, as in a CPU run over "
    "gloo, which moves data through shared memory or loopback TCP) and no NIC rate for these "
    "scopes; choose a preset under reference line to draw one"
)


def layout(**_query):
    entries = results().usable(MEASURED_KINDS)
    references = (
        [{"label": "from the runs' topology", "value": AUTO_REFERENCE}]
        + [{"label": f"preset: {load_network(name).name}", "value": name} for name in preset_names("network")]
        + [{"label": "none", "value": "none"}]
    )
    return html.Div(
        [
            html.H2("Bandwidth"),
            html.P(
                "Bandwidth against message size (log-log), one curve per run, scope and group size; dashed lines are "
                "the fitted model time = latency + size / bandwidth, dotted lines the nominal link rate. Hover a point "
                "for its exact figures.",
                className="lead",
            ),
            dcc.Store(id="bw-start", data=next((e.key for e in entries if e.measured), None)),
            html.Div(
                [
                    control(
                        "runs",
                        dcc.Dropdown(
                            id="bw-runs", options=run_options(entries), multi=True, placeholder="pick one or more runs"
                        ),
                        wide=True,
                    ),
                    control("collective", dcc.Dropdown(id="bw-op", clearable=False)),
                    control("scopes", dcc.Checklist(id="bw-scopes", inline=True)),
                ],
                className="controls",
            ),
            html.Div(
                [
                    control(
                        "metric",
                        dcc.RadioItems(
                            id="bw-metric",
                            value="busbw_gbps",
                            inline=True,
                            options=[{"label": f" {k[:5]}", "value": k} for k in METRICS],
                        ),
                    ),
                    control(
                        "buffers",
                        dcc.RadioItems(
                            id="bw-in-place",
                            value="out",
                            inline=True,
                            options=[
                                {"label": " out-of-place", "value": "out"},
                                {"label": " in-place", "value": "in"},
                                {"label": " both", "value": "both"},
                            ],
                        ),
                    ),
                    control(
                        "fitted model",
                        dcc.Checklist(id="bw-fit", value=["fit"], options=[{"label": " show", "value": "fit"}]),
                    ),
                    control(
                        "reference line",
                        dcc.Dropdown(id="bw-reference", value=AUTO_REFERENCE, options=references, clearable=False),
                        wide=True,
                    ),
                ],
                className="controls",
            ),
            html.Div(id="bw-notices"),
            dcc.Tabs(
                id="bw-view",
                value="graphs",
                children=[
                    dcc.Tab(
                        label="Graphs",
                        value="graphs",
                        children=[
                            dcc.Graph(id="bw-graph"),
                            html.H4("Latency at small sizes (p10-p90 bars)"),
                            dcc.Graph(id="bw-latency"),
                            html.H4("MoE all_to_allv by routing (dotted: the uniform all_to_all of the same bytes)"),
                            dcc.Graph(id="bw-moe-curves"),
                            control("received bytes of row", dcc.Dropdown(id="bw-moe-row"), wide=True),
                            dcc.Graph(id="bw-moe-heatmap"),
                        ],
                    ),
                    dcc.Tab(
                        label="Table",
                        value="table",
                        children=[
                            html.Div(
                                [html.Button("Download CSV", id="bw-download-button"), dcc.Download(id="bw-download")],
                                className="controls",
                            ),
                            data_table("bw-table", page_size=20),
                        ],
                    ),
                ],
            ),
        ]
    )


@callback(
    Output("bw-runs", "value"), Input("bw-start", "data"), State(SELECTION_STORE, "data"), State("bw-runs", "options")
)
def start_from_selection(newest_measured, selected, options):
    """The runs ticked on the Runs page, else the newest run measured here (not imported, not synthetic),
    else the newest run."""
    available = [option["value"] for option in options]
    chosen = [key for key in selected or [] if key in available]
    return chosen or ([newest_measured] if newest_measured in available else available[:1])


@callback(
    Output("bw-op", "options"),
    Output("bw-op", "value"),
    Output("bw-scopes", "options"),
    Output("bw-scopes", "value"),
    Input("bw-runs", "value"),
    State("bw-op", "value"),
)
def offer_ops_and_scopes(runs, op):
    frame = results().records(runs)
    if frame.empty:
        return [], None, [], []
    ops = sorted(frame["op"].unique())
    op = op if op in ops else ("all_reduce" if "all_reduce" in ops else ops[0])
    scopes = sorted(frame["scope"].unique())
    return ops, op, [{"label": f" {s}", "value": s} for s in scopes], scopes


@callback(
    Output("bw-graph", "figure"),
    Output("bw-latency", "figure"),
    Output("bw-table", "columns"),
    Output("bw-table", "data"),
    Output("bw-notices", "children"),
    Input("bw-runs", "value"),
    Input("bw-op", "value"),
    Input("bw-scopes", "value"),
    Input("bw-metric", "value"),
    Input("bw-in-place", "value"),
    Input("bw-fit", "value"),
    Input("bw-reference", "value"),
)
def draw(runs, op, scopes, metric, in_place, fit, reference):
    store = results()
    entries = store.entries_for(runs)
    frame = select_records(store.records(runs), op, scopes, in_place)
    columns, rows = table_rows(frame.head(MAX_TABLE_ROWS))
    lines, missing = _references(entries, scopes or [], reference)
    figure = bandwidth_figure(frame, metric, lines, fitted=bool(fit), no_reference=missing)
    problems = [message for e in entries if not e.ok for message in e.messages()]
    warnings = [message for e in entries if e.ok for message in e.messages()]
    if len(frame) > MAX_TABLE_ROWS:
        warnings.append(
            f"the table shows the first {MAX_TABLE_ROWS:,} of {len(frame):,} rows; Download CSV has them all"
        )
    return (
        figure,
        latency_figure(frame),
        columns,
        rows,
        [synthetic_notices(entries), notices(problems, "error"), notices(warnings)],
    )


def _references(entries, scopes, reference) -> tuple[list[tuple[str, float]], str | None]:
    """The nominal rates to draw, and when there are none, the sentence that says why."""
    if reference == "none":
        return [], "no nominal-rate line: 'none' is chosen under reference line"
    if reference != AUTO_REFERENCE:
        network = load_network(reference)
        return [(network.name, network.bandwidth / 1e9)], None
    found = {}
    for entry in entries:
        for scope in scopes:
            for label, gbps in nominal_rates(cluster_topology(entry.info.get("topology")), scope):
                found[label] = gbps
    return list(found.items()), None if found else NO_NOMINAL_RATE


@callback(
    Output("bw-moe-curves", "figure"),
    Output("bw-moe-row", "options"),
    Output("bw-moe-row", "value"),
    Input("bw-runs", "value"),
)
def draw_moe_curves(runs):
    rows = routed_rows(results().records(runs))
    labels = [row_label(row) for _, row in rows.iterrows()]
    return routing_curves_figure(rows), labels, labels[-1] if labels else None


@callback(Output("bw-moe-heatmap", "figure"), Input("bw-moe-row", "value"), State("bw-runs", "value"))
def draw_moe_heatmap(label, runs):
    rows = routed_rows(results().records(runs))
    chosen = [row for _, row in rows.iterrows() if row_label(row) == label]
    return received_heatmap(chosen[0] if chosen else None)


@callback(
    Output("bw-download", "data"),
    Input("bw-download-button", "n_clicks"),
    State("bw-runs", "value"),
    State("bw-op", "value"),
    State("bw-scopes", "value"),
    State("bw-in-place", "value"),
    prevent_initial_call=True,
)
def download(_clicks, runs, op, scopes, in_place):
    frame = select_records(results().records(runs), op, scopes, in_place)
    return dcc.send_data_frame(frame.to_csv, f"commbench-{op or 'records'}.csv", index=False)
