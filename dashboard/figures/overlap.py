"""Compute and communication on a timeline per rank, and the overlap figures of each iteration.

Input is a stored trace analysis (commbench.traces.analysis.TraceAnalysis.to_dict()). Timeline
bars are horizontal go.Bar on a numeric microsecond axis: px.timeline would force a date axis
that rounds durations to whole milliseconds, hiding most kernels and collectives.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.figures.common import PALETTE, add_timeline_bars, message_figure, size_ticks

# Bars drawn at most; beyond it the longest bars of the window are kept (a browser stays smooth
# with a few thousand SVG bars, not with the 50,000 an analysis may hold).
MAX_BARS = 4000


def iteration_windows(analysis: dict) -> list[tuple[int, float, float]]:
    """(step, start_us, end_us) of every profiled iteration seen on any rank, earliest start first."""
    windows: dict[int, tuple[float, float]] = {}
    for rank in analysis.get("ranks") or []:
        for it in rank.get("iterations") or []:
            if it.get("step") is None:
                continue
            start, end = it["start_us"], it["start_us"] + it["duration_us"]
            low, high = windows.get(it["step"], (start, end))
            windows[it["step"]] = (min(low, start), max(high, end))
    return sorted(((step, low, high) for step, (low, high) in windows.items()), key=lambda w: w[1])


def select_bars(
    timeline: list[dict], ranks: list[int] | None, window: tuple[float, float] | None, limit: int = MAX_BARS
) -> tuple[list[dict], str | None]:
    """Bars of the chosen ranks that touch the window; the longest `limit` of them, with a note if cut."""
    bars = [bar for bar in timeline if ranks is None or bar["rank"] in ranks]
    if window:
        start, end = window
        bars = [bar for bar in bars if bar["start_us"] < end and bar["start_us"] + bar["dur_us"] > start]
    if len(bars) <= limit:
        return bars, None
    kept = sorted(bars, key=lambda bar: bar["dur_us"], reverse=True)[:limit]
    return sorted(
        kept, key=lambda bar: (bar["rank"], bar["start_us"])
    ), f"{len(bars)} events in this view: the {limit} longest are drawn; pick one iteration to see all"


def timeline_figure(bars: list[dict], window: tuple[float, float] | None = None) -> go.Figure:
    """One row per (rank, stream or thread), bars coloured by category, exact microseconds on hover."""
    if not bars:
        return message_figure("No timeline events for this choice.")
    lanes = sorted({(bar["rank"], bar["lane"]) for bar in bars})
    figure = go.Figure()
    add_timeline_bars(
        figure,
        bars,
        lane=lambda bar: _lane_name(bar["rank"], bar["lane"]),
        per_unit_us=1.0,
        hover=lambda bar: [bar["name"], bar["start_us"] + bar["dur_us"]],
        hovertemplate="%{customdata[0]}<br>start %{base:,.3f} us, end %{customdata[1]:,.3f} us"
        "<br>duration %{x:,.3f} us<extra>%{fullData.name}</extra>",
    )
    figure.update_layout(
        template="plotly_white",
        barmode="overlay",
        bargap=0.25,
        height=max(260, 46 * len(lanes) + 120),
        xaxis={"title": "time since the first event (us)", "type": "linear", "range": list(window) if window else None},
        yaxis={"categoryorder": "array", "categoryarray": [_lane_name(*lane) for lane in reversed(lanes)]},
        legend={"orientation": "h", "y": 1.08},
        margin={"t": 40, "l": 10},
    )
    return figure


def _lane_name(rank: int, lane: str) -> str:
    return f"rank {rank} · {lane}"


def iteration_figure(analysis: dict) -> go.Figure:
    """Overlap % and exposed communication of every iteration, one colour per rank."""
    ranks = analysis.get("ranks") or []
    if not any(rank.get("iterations") for rank in ranks):
        return message_figure("The trace has no iterations (no ProfilerStep annotations).")
    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("overlap % (both running / communication)", "exposed communication (ms)")
    )
    for position, rank in enumerate(ranks):
        steps = [str(it["step"]) for it in rank["iterations"]]
        name, colour = f"rank {rank['rank']}", {"color": PALETTE[position % len(PALETTE)]}
        figure.add_trace(
            go.Bar(
                x=steps,
                y=[it["overlap_pct"] for it in rank["iterations"]],
                name=name,
                legendgroup=name,
                marker=colour,
                hovertemplate="step %{x}: %{y:.1f}%<extra>" + name + "</extra>",
            ),
            row=1,
            col=1,
        )
        figure.add_trace(
            go.Bar(
                x=steps,
                y=[it["exposed_communication_us"] / 1e3 for it in rank["iterations"]],
                name=name,
                legendgroup=name,
                showlegend=False,
                marker=colour,
                hovertemplate="step %{x}: %{y:.3f} ms<extra>" + name + "</extra>",
            ),
            row=1,
            col=2,
        )
    figure.update_xaxes(title_text="iteration (ProfilerStep#)", type="category")
    figure.update_layout(template="plotly_white", barmode="group", height=340, margin={"t": 50})
    return figure


def rank_rows(analysis: dict) -> list[dict]:
    """Whole-trace figures per rank, for a table (times in milliseconds)."""
    rows = []
    for rank in analysis.get("ranks") or []:
        total = rank["total"]
        rows.append(
            {
                "rank": rank["rank"],
                "device": rank["device"],
                "iterations": len(rank.get("iterations") or []),
                "window_ms": round(total["duration_us"] / 1e3, 3),
                "compute_ms": round(total["compute_us"] / 1e3, 3),
                "communication_ms": round(total["communication_us"] / 1e3, 3),
                "overlap_pct": None if total["overlap_pct"] is None else round(total["overlap_pct"], 1),
                "exposed_comm_ms": round(total["exposed_communication_us"] / 1e3, 3),
                "idle_ms": round(total["idle_us"] / 1e3, 3),
            }
        )
    return rows


def collective_rows(analysis: dict) -> list[dict]:
    """The busiest collectives of every rank."""
    return [
        {
            "rank": rank["rank"],
            "collective": c["name"],
            "count": c["count"],
            "total_ms": round(c["total_us"] / 1e3, 3),
            "bytes": c["bytes"],
        }
        for rank in analysis.get("ranks") or []
        for c in rank.get("collectives") or []
    ]


# --- `commbench overlap` runs (records with compute_us, comm_us, both_us ...) ----------------


def measurement_figure(frame) -> go.Figure:
    """Overlap achieved and mutual slowdown against message size, one line per collective."""
    if frame.empty or "overlap" not in frame:
        return message_figure("No overlap records in this run.")
    figure = make_subplots(rows=1, cols=2, subplot_titles=("overlap achieved (%)", "slowdown when run together (x)"))
    for op, rows in frame.sort_values("size_bytes").groupby("op"):
        figure.add_trace(
            go.Scatter(
                x=rows["size_bytes"],
                y=100 * rows["overlap"],
                mode="lines+markers",
                name=op,
                legendgroup=op,
                customdata=rows[["compute_us", "comm_us", "both_us"]].to_numpy(),
                hovertemplate=(
                    op + " %{x:,} B: overlap %{y:.1f}%<br>compute %{customdata[0]:.1f} us, comm "
                    "%{customdata[1]:.1f} us, both %{customdata[2]:.1f} us<extra></extra>"
                ),
            ),
            row=1,
            col=1,
        )
        for column, dash in (("compute_slowdown", "solid"), ("comm_slowdown", "dot")):
            figure.add_trace(
                go.Scatter(
                    x=rows["size_bytes"],
                    y=rows[column],
                    mode="lines+markers",
                    legendgroup=op,
                    showlegend=False,
                    name=f"{op} {column.split('_')[0]}",
                    line={"dash": dash},
                    hovertemplate=f"{op} {column.replace('_', ' ')}" + " %{x:,} B: %{y:.3f}x<extra></extra>",
                ),
                row=1,
                col=2,
            )
    figure.update_xaxes(title_text="message size (log)", **size_ticks(frame["size_bytes"]))
    figure.update_yaxes(range=[0, 105], row=1, col=1)
    figure.update_layout(
        template="plotly_white",
        height=360,
        margin={"t": 50},
        annotations=list(figure.layout.annotations)
        + [
            dict(
                text="solid: compute slowed by comm · dotted: comm slowed by compute",
                showarrow=False,
                xref="paper",
                yref="paper",
                x=1,
                y=-0.28,
                xanchor="right",
                font={"size": 11},
            )
        ],
    )
    return figure


def measured_pair_bars(record: dict) -> list[dict]:
    """Timeline bars of one overlap record: each operation alone, then both started at 0 together."""
    return [
        {
            "rank": record.get("slowest_rank") or 0,
            "lane": lane,
            "category": category,
            "name": name,
            "start_us": 0.0,
            "dur_us": float(duration),
        }
        for lane, category, name, duration in (
            ("1 GEMM alone", "compute", f"GEMM {record['gemm_size']}^3", record["compute_us"]),
            ("2 collective alone", "communication", record["op"], record["comm_us"]),
            (
                "3 GEMM together",
                "compute",
                f"GEMM {record['gemm_size']}^3 beside {record['op']}",
                record["compute_during_comm_us"],
            ),
            (
                "4 collective together",
                "communication",
                f"{record['op']} beside the GEMM",
                record["comm_during_compute_us"],
            ),
        )
    ]
