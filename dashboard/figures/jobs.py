"""The Jobs page's figure: a job's collectives (NCCL Inspector import) over the benchmark's curve."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from commbench.analysis.efficiency import IN_PLACE_OPS, JobEfficiency, benchmark_entry
from commbench.units import format_size
from dashboard.figures.common import PALETTE, message_figure, size_ticks


def jobs_figure(result: JobEfficiency | None, tables: dict | None, title: str) -> go.Figure:
    """Per op: the benchmark's measured busbw and fitted curve, and each communicator's rows as points
    with their 95% interval (busbw the job reached = efficiency x the benchmark's at its sizes)."""
    if result is None or not result.rows:
        return message_figure("pick an imported job and a benchmark run that share an op", title)
    ops = sorted({row.op for row in result.rows})
    figure = make_subplots(rows=1, cols=len(ops), subplot_titles=ops, horizontal_spacing=0.08)
    comms = sorted({row.comm_id for row in result.rows})
    for column, op in enumerate(ops, 1):
        rows = [row for row in result.rows if row.op == op]
        _benchmark_curves(figure, rows, tables, column)
        for row_group in _by_comm(rows):
            first = row_group[0]
            colour = PALETTE[comms.index(first.comm_id) % len(PALETTE)]
            busbw = np.array([r.job_busbw_gbps for r in row_group])
            bench = np.array([r.benchmark_busbw_gbps for r in row_group])
            figure.add_trace(
                go.Scatter(
                    x=[r.size_bytes for r in row_group],
                    y=busbw,
                    mode="markers",
                    marker={"size": 11, "color": colour},
                    name=f"job: {first.comm_name} ({first.comm_id})",
                    legendgroup=first.comm_id,
                    showlegend=column == 1,
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": np.array([r.ci_high for r in row_group]) * bench - busbw,
                        "arrayminus": busbw - np.array([r.ci_low for r in row_group]) * bench,
                    },
                    customdata=[
                        [r.efficiency, r.ci_low, r.ci_high, r.calls, r.scope, r.group_size, ", ".join(r.hosts)]
                        for r in row_group
                    ],
                    hovertemplate="%{customdata[4]} n=%{customdata[5]} on %{customdata[6]}<br>size %{x} B, %{customdata[3]} calls"
                    "<br>busbw %{y:.4g} GB/s = %{customdata[0]:.1%} of the benchmark"
                    " (95%: %{customdata[1]:.1%}-%{customdata[2]:.1%})<extra></extra>",
                ),
                row=1,
                col=column,
            )
        sizes = sorted({r.size_bytes for r in rows})
        figure.update_xaxes(title_text="message size", row=1, col=column, **size_ticks(sizes))
    figure.update_yaxes(title_text="busbw (GB/s)", row=1, col=1, rangemode="tozero")
    figure.update_layout(
        title={"text": title, "font": {"size": 13}},
        template="plotly_white",
        height=480,
        margin={"t": 110},
        legend={"orientation": "h", "y": -0.25},
    )
    return figure


def _by_comm(rows) -> list[list]:
    groups: dict[str, list] = {}
    for row in sorted(rows, key=lambda r: r.size_bytes):
        groups.setdefault(row.comm_id, []).append(row)
    return list(groups.values())


def _benchmark_curves(figure, rows, tables, column: int) -> None:
    """The benchmark entries these rows were priced by: measured points and the table's curve between them."""
    if not tables:
        return
    drawn = set()
    for row in rows:
        nnodes = max(1, len({h for h in row.hosts}))
        table = tables[row.op in IN_PLACE_OPS]
        try:
            entry = benchmark_entry(
                table, row.op, row.scope, row.group_size, (max(1, row.group_size // nnodes), nnodes)
            )
        except LookupError:
            continue
        if entry.label in drawn:
            continue
        drawn.add(entry.label)
        low = min(entry.sizes[0], min(r.size_bytes for r in rows))
        high = max(entry.sizes[-1], max(r.size_bytes for r in rows))
        grid = np.geomspace(low, high, 60)
        figure.add_trace(
            go.Scatter(
                x=grid,
                y=entry.busbw_gbps(grid),
                mode="lines",
                line={"color": "#444", "dash": "dot"},
                name=f"benchmark curve: {entry.label}",
                showlegend=column == 1,
                legendgroup="bench",
                hovertemplate="benchmark %{y:.4g} GB/s at %{x} B<extra></extra>",
            ),
            row=1,
            col=column,
        )
        figure.add_trace(
            go.Scatter(
                x=entry.sizes,
                y=entry.measured_busbw_gbps,
                mode="markers",
                marker={"symbol": "x", "color": "#444", "size": 8},
                legendgroup="bench",
                name="benchmark: measured sizes",
                showlegend=column == 1,
                hovertext=[format_size(int(s)) for s in entry.sizes],
                hovertemplate="benchmark measured %{y:.4g} GB/s at %{hovertext}<extra></extra>",
            ),
            row=1,
            col=column,
        )
