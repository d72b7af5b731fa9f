"""MoE all_to_allv: time against tokens per rank, one curve per routing, and one row's received bytes.

Input is a records frame (Record fields plus `run`), as ResultsStore.records returns it; only the
all_to_allv rows count. Every curve has its uniform all_to_all of the same bytes (measured in the
same run) dotted beside it, so the skew's cost reads as the gap between the two.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from commbench.units import format_size
from dashboard.figures.common import PALETTE, message_figure, time_ticks

OP = "all_to_allv"
CURVE_KEYS = ["run", "scope", "group_size", "routing"]


def routed_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The all_to_allv rows that carry the routing model's figures, in curve order."""
    if frame.empty or "routing" not in frame or "op" not in frame:
        return frame.iloc[0:0]
    rows = frame[(frame["op"] == OP) & frame["routing"].notna() & frame["tokens_per_rank"].notna()]
    return rows.sort_values(CURVE_KEYS + ["tokens_per_rank"])


def row_label(row: pd.Series) -> str:
    """How a row is offered for the heat map: run, scope, routing, tokens."""
    return f"{row['run']} · {row['scope']} n={row['group_size']} · {row['routing']} · {int(row['tokens_per_rank'])} tokens/rank"


def routing_curves_figure(frame: pd.DataFrame) -> go.Figure:
    """Time per call against tokens per rank, solid per routing, dotted for its uniform all_to_all."""
    rows = routed_rows(frame)
    if rows.empty:
        return message_figure(
            "No all_to_allv rows with a routing in these runs: measure them with "
            "`commbench run --ops all_to_allv --routing ...`."
        )
    figure = go.Figure()
    for position, (keys, curve) in enumerate(rows.groupby(CURVE_KEYS, sort=False)):
        run, scope, n, routing = keys
        name, colour = f"{run} · {scope} n={n} · {routing}", PALETTE[position % len(PALETTE)]
        hover = np.stack(
            [
                curve["size_bytes"].map(format_size),
                curve["recv_bytes_max"] / curve["recv_bytes_mean"],
                curve["hottest_rank"],
                curve["skew_penalty"],
            ],
            axis=1,
        )
        figure.add_trace(
            go.Scatter(
                x=curve["tokens_per_rank"],
                y=curve["time_us"],
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": colour},
                customdata=hover,
                hovertemplate=(
                    "<b>%{fullData.name}</b><br>%{x} tokens/rank, busiest rank %{customdata[0]}"
                    "<br>time %{y:.1f} us; max/mean received %{customdata[1]:.3f} (rank %{customdata[2]})"
                    "<br>penalty vs uniform all_to_all %{customdata[3]:.3f}<extra></extra>"
                ),
            )
        )
        figure.add_trace(
            go.Scatter(
                x=curve["tokens_per_rank"],
                y=curve["uniform_time_us"],
                mode="lines",
                name=f"{name}: uniform all_to_all",
                legendgroup=name,
                line={"color": colour, "dash": "dot"},
                hovertemplate="uniform all_to_all of the same bytes: %{y:.1f} us<extra></extra>",
            )
        )
    figure.update_layout(
        template="plotly_white",
        height=420,
        hovermode="closest",
        legend={"orientation": "h", "y": -0.2},
        xaxis={"title": "tokens per rank (log)", "type": "log"},
        yaxis={"title": "time per call (log)", **time_ticks([*rows["time_us"], *rows["uniform_time_us"]])},
        margin={"t": 30},
    )
    return figure


def received_heatmap(row: pd.Series | None) -> go.Figure:
    """Bytes sent from each source rank (rows) to each destination rank (columns) in one row."""
    if row is None or not isinstance(row.get("split_bytes"), (list, np.ndarray)):
        return message_figure("Pick an all_to_allv row to see who sends how much to whom.")
    matrix = np.asarray([list(source) for source in row["split_bytes"]], dtype=float)
    ranks = list(range(len(matrix)))
    figure = go.Figure(
        go.Heatmap(
            z=matrix,
            x=ranks,
            y=ranks,
            colorscale="Blues",
            colorbar={"title": "bytes"},
            hovertemplate="rank %{y} -> rank %{x}: %{z:,.0f} B<extra></extra>",
        )
    )
    received = matrix.sum(axis=0)
    figure.update_layout(
        template="plotly_white",
        height=420,
        margin={"t": 60},
        title=(
            f"{row['routing']}, {int(row['tokens_per_rank'])} tokens/rank: rank {int(np.argmax(received))} receives "
            f"{format_size(int(received.max()))}, {received.max() / received.mean():.2f}x the mean"
        ),
        xaxis={"title": "destination rank", "dtick": 1},
        yaxis={"title": "source rank", "dtick": 1, "autorange": "reversed"},
    )
    return figure
