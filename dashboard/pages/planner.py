"""Planner: rank training layouts for a model on a cluster, priced from a preset or a measured run."""

import dash
from dash import Input, Output, State, callback, dcc, html

from commbench.errors import CommbenchError
from dashboard.app import planner, results
from dashboard.figures.common import message_figure
from dashboard.figures.planner import breakdown_figure, memory_figure, ranked_rows, step_timeline_figure
from dashboard.planning import PRESET_SOURCE, PlanChoice, default_gpus_per_node, hardware_names, model_names
from dashboard.ui import control, columns_of, data_table, notices

dash.register_page(__name__, path="/planner", name="Planner", order=4, title="commbench · planner")

BANDWIDTH_KINDS = ("sweep", "import", "pairwise", "overlap")


def layout(**_query):
    runs = results().usable(BANDWIDTH_KINDS)
    sources = [{"label": "hardware preset figures", "value": PRESET_SOURCE}] + [
        {"label": f"measured: {e.key} ({e.info.get('backend')}, {e.info.get('world_size')} ranks)", "value": e.key}
        for e in runs if e.run.records
    ]
    return html.Div([
        html.H2("Planner"),
        html.P("Every layout (TP, PP, DP, ZeRO, micro-batch, recompute ...) that divides the cluster, the model and "
               "the batch is priced; the fastest that fit in memory are simulated and ranked. Pick a row to see "
               "its simulated step.", className="lead"),
        html.Div([
            control("model", dcc.Dropdown(id="plan-model", value="llama2-7b", clearable=False, options=model_names())),
            control("hardware", dcc.Dropdown(id="plan-hardware", value="dgx-h100", clearable=False,
                                              options=hardware_names())),
            control("GPUs", dcc.Input(id="plan-gpus", type="number", value=16, min=1, step=1, debounce=True)),
            control("GPUs per node", dcc.Input(id="plan-gpus-per-node", type="number", min=1, step=1, debounce=True,
                                                placeholder="preset")),
            control("global batch", dcc.Input(id="plan-batch", type="number", value=64, min=1, step=1, debounce=True)),
            control("sequence length", dcc.Input(id="plan-seq", type="number", value=4096, min=1, step=1,
                                                  debounce=True)),
            control("bandwidth from", dcc.Dropdown(id="plan-bandwidth", value=PRESET_SOURCE, clearable=False,
                                                    options=sources), wide=True),
        ], className="controls"),
        html.Div(id="plan-notices"),
        html.Div(id="plan-summary", className="lead"),
        data_table("plan-table", row_selectable="single", selected_rows=[0], sort_action="none", filter_action="none"),
        html.Div([dcc.Graph(id="plan-breakdown"), dcc.Graph(id="plan-memory")], className="grid2"),
        dcc.Graph(id="plan-timeline"),
    ])


def _choice(model, hardware, gpus, gpus_per_node, batch, seq, bandwidth) -> PlanChoice:
    if not all(isinstance(v, int) and v > 0 for v in (gpus, batch, seq)):
        raise CommbenchError("GPUs, global batch and sequence length must be positive whole numbers")
    run_dir, stamp = None, None
    if bandwidth and bandwidth != PRESET_SOURCE:
        entry = results().entry(bandwidth)
        if entry.error:
            raise CommbenchError(f"{entry.key}: {entry.error}")
        run_dir, stamp = str(entry.path), entry.signature
    return PlanChoice(model, gpus, gpus_per_node or None, hardware, batch, seq, bandwidth_dir=run_dir,
                      bandwidth_stamp=stamp)


@callback(Output("plan-gpus-per-node", "placeholder"), Input("plan-hardware", "value"))
def show_preset_gpus_per_node(hardware):
    return f"preset: {default_gpus_per_node(hardware)}"


@callback(
    Output("plan-table", "columns"), Output("plan-table", "data"), Output("plan-table", "selected_rows"),
    Output("plan-breakdown", "figure"), Output("plan-memory", "figure"), Output("plan-summary", "children"),
    Output("plan-notices", "children"),
    Input("plan-model", "value"), Input("plan-hardware", "value"), Input("plan-gpus", "value"),
    Input("plan-gpus-per-node", "value"), Input("plan-batch", "value"), Input("plan-seq", "value"),
    Input("plan-bandwidth", "value"),
)
def rank_layouts(model, hardware, gpus, gpus_per_node, batch, seq, bandwidth):
    try:
        view = planner().plan(_choice(model, hardware, gpus, gpus_per_node, batch, seq, bandwidth))
    except CommbenchError as exc:
        empty = message_figure(str(exc))
        return [], [], [], empty, empty, "", notices([str(exc)], "error")
    ranked = [result.to_dict() for result in view.ranked]
    rows = ranked_rows(ranked)
    summary = (f"{view.fitting} of {view.screened} layouts fit in {view.capacity_bytes / 1e9:.0f} GB; "
               f"network: {view.network}")
    return (columns_of(rows), rows, [0], breakdown_figure(ranked),
            memory_figure(ranked, view.capacity_bytes), summary, notices(view.warnings))


@callback(
    Output("plan-timeline", "figure"),
    Input("plan-table", "selected_rows"),
    State("plan-model", "value"), State("plan-hardware", "value"), State("plan-gpus", "value"),
    State("plan-gpus-per-node", "value"), State("plan-batch", "value"), State("plan-seq", "value"),
    State("plan-bandwidth", "value"),
    prevent_initial_call=True,  # rank_layouts sets the selection once the plan exists
)
def simulate_chosen(selected, *choice):
    try:
        view = planner().plan(_choice(*choice))
    except CommbenchError as exc:
        return message_figure(str(exc))
    index = (selected or [0])[0]
    if index >= len(view.ranked):
        return message_figure("Pick a layout in the table.")
    return step_timeline_figure(view.timeline(index), f"simulated step of #{index + 1} {view.ranked[index].layout}")
