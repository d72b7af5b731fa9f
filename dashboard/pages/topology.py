"""Topology: how GPUs, NICs, CPUs and switches connect, and the bandwidth measured over them."""

import dash
from dash import Input, Output, State, callback, dcc, html

from commbench.errors import CommbenchError
from commbench.topology.model import ClusterTopology
from dashboard.app import SELECTION_STORE, results
from dashboard.figures.topology import (
    cluster_topology,
    link_matrix_figure,
    measured_by_scope,
    pairwise_figure,
    topology_figure,
)
from dashboard.ui import control, notices, page_heading

dash.register_page(__name__, path="/topology", name="Topology", order=1, title="commbench · topology")

# Matrices drawn at most (one per node); a cluster's nodes usually share one board layout.
MAX_MATRICES = 4


def layout(**_query):
    sources = results().topology_sources()
    return html.Div(
        [
            *page_heading(
                "Topology",
                "Nodes, GPUs, NICs and switches of a run (or of a saved `commbench topo --json` "
                "file named *.topology.json in the results folder). Edges are labelled with the link: NV# "
                "bonded NVLinks, PCIe level, network rate; colour them by link type or by the bandwidth the "
                "run measured.",
            ),
            dcc.Store(id="topo-start"),
            html.Div(
                [
                    control(
                        "topology of",
                        dcc.Dropdown(
                            id="topo-source",
                            clearable=False,
                            options=[{"label": f"{s.label}, {s.gpus} GPUs", "value": s.key} for s in sources],
                        ),
                        wide=True,
                    ),
                    control(
                        "colour links by",
                        dcc.RadioItems(
                            id="topo-colour",
                            value="link",
                            inline=True,
                            options=[
                                {"label": " link type", "value": "link"},
                                {"label": " measured bandwidth", "value": "measured"},
                            ],
                        ),
                    ),
                ],
                className="controls",
            ),
            html.Div(id="topo-notices"),
            dcc.Graph(id="topo-graph"),
            html.H4("GPU and NIC matrix (nvidia-smi topo -m words)"),
            html.Div(id="topo-matrices"),
            html.Div(id="topo-pairwise"),
        ]
    )


@callback(
    Output("topo-source", "value"),
    Input("topo-start", "data"),
    State(SELECTION_STORE, "data"),
    State("topo-source", "options"),
)
def start_from_selection(_start, selected, options):
    """A ticked run that recorded a topology, else the newest run measured here (sources list runs newest
    first), else the source with the most GPUs."""
    values = [option["value"] for option in options]
    for key in selected or []:
        if f"run:{key}" in values:
            return f"run:{key}"
    if not options:
        return None
    sources = [s for s in results().topology_sources() if s.key in values]
    measured = [s.key for s in sources if s.measured]
    if measured:
        return measured[0]
    gpus = {s.key: s.gpus for s in sources}
    return max(values, key=lambda value: gpus.get(value, 0))


@callback(
    Output("topo-graph", "figure"),
    Output("topo-matrices", "children"),
    Output("topo-pairwise", "children"),
    Output("topo-notices", "children"),
    Input("topo-source", "value"),
    Input("topo-colour", "value"),
)
def draw(source, colour_by):
    if not source:
        return (
            topology_figure(ClusterTopology()),
            [],
            [],
            notices(
                [
                    "No topology yet: runs record one, or save `commbench topo --json` output as "
                    "results/NAME.topology.json."
                ],
                "info",
            ),
        )
    try:
        data, entry = results().topology(source)
    except CommbenchError as exc:
        return topology_figure(ClusterTopology()), [], [], notices([str(exc)], "error")
    topology = cluster_topology(data)
    if topology is None:
        return topology_figure(ClusterTopology()), [], [], notices([f"{source}: not a commbench topology"], "error")
    nodes = topology.nodes
    frame = entry.records if entry else None
    measured = measured_by_scope(frame, len(nodes)) if frame is not None else {}
    matrices = [dcc.Graph(figure=link_matrix_figure(node)) for node in nodes[:MAX_MATRICES]]
    notes = [f"{node.hostname}: {note}" for node in nodes for note in node.notes]
    if len(nodes) > MAX_MATRICES:
        notes.append(f"matrices of the first {MAX_MATRICES} of {len(nodes)} nodes are shown")
    pairwise = pairwise_figure(frame) if frame is not None else None
    pair_view = [html.H4("Pairwise bandwidth"), dcc.Graph(id="topo-pairs", figure=pairwise)] if pairwise else []
    return topology_figure(topology, colour_by, measured), matrices, pair_view, notices(notes, "info")
