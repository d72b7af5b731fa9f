"""Pieces every figure shares: the empty-figure message, size axes, colours, the WebGL switch."""

from __future__ import annotations

import plotly.graph_objects as go

from commbench.units import format_size

# Above this many points in one figure the curves are drawn with WebGL (Scattergl); below it SVG
# looks sharper. Browsers allow only a few WebGL contexts per page, so few figures may cross it.
WEBGL_POINTS = 2000

# Colours of series (runs, ranks) in order; a series keeps its colour across the figures of a page.
PALETTE = ["#636efa", "#00cc96", "#ef553b", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff",
           "#fecb52"]

CATEGORY_COLOURS = {
    "compute": "#1f77b4",
    "communication": "#ff7f0e",
    "memory": "#2ca02c",
    "recompute": "#9467bd",
    "slowdown": "#8c564b",
    "tp": "#d62728",
    "cp": "#e377c2",
    "ep": "#bcbd22",
    "dp": "#ff7f0e",
    "pp": "#17becf",
    "bubble": "#c7c7c7",
    "optimizer": "#7f7f7f",
}


def message_figure(text: str, title: str | None = None) -> go.Figure:
    """An empty figure that says why there is nothing to draw."""
    figure = go.Figure()
    figure.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper", font={"size": 14})
    figure.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False}, height=260,
                         template="plotly_white")
    return figure


def size_ticks(sizes) -> dict:
    """Log x-axis settings with ticks at every other power of two, labelled the nccl-tests way (4K, 1M)."""
    sizes = [int(s) for s in sizes if s and s > 0]
    if not sizes:
        return {"type": "log"}
    low, high = min(sizes).bit_length() - 1, max(sizes).bit_length()
    ticks = [1 << power for power in range(low, high + 1) if (power - low) % 2 == 0]
    return {"type": "log", "tickvals": ticks, "ticktext": [format_size(t) for t in ticks]}


def scatter_class(points: int):
    return go.Scattergl if points > WEBGL_POINTS else go.Scatter
