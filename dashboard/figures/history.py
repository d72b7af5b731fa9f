"""Figures of a fleet's history and of a comparison of two runs (plain data in, Plotly figures out).

history_figure  busbw per run for each series (scope, group size), change points marked; each
                point carries its run id (hover, and the History page opens a comparison on click).
compare_figure  per row, the change in busbw between two runs with its 95% interval, coloured by
                verdict: red slower, green faster, grey no significant change or untested.
"""

from __future__ import annotations

import plotly.graph_objects as go

from commbench.units import format_size
from dashboard.figures.common import PALETTE, message_figure

VERDICT_COLOURS = {
    "slower": "#d62728",
    "faster": "#2ca02c",
    "no significant change": "#9e9e9e",
    "no samples": "#c7c7c7",
}


def history_figure(series_list: list[dict]) -> go.Figure:
    """series_list: Series.to_dict() of commbench.analysis.history (points, change_points, ...)."""
    if not series_list or not any(series["points"] for series in series_list):
        return message_figure("no runs of this row in the database", "History")
    figure = go.Figure()
    for number, series in enumerate(series_list):
        colour = PALETTE[number % len(PALETTE)]
        points = series["points"]
        figure.add_trace(
            go.Scatter(
                x=list(range(1, len(points) + 1)),
                y=[point["busbw_gbps"] for point in points],
                mode="lines+markers",
                name=f"{series['scope']} n={series['group_size']}",
                line={"color": colour},
                customdata=[[point["run_id"], point["created"]] for point in points],
                hovertemplate="run %{x}: %{customdata[0]}<br>%{customdata[1]}<br>busbw %{y:.4g} GB/s<extra></extra>",
            )
        )
        for change in series["change_points"]:
            figure.add_vline(x=change["index"] - 0.5, line={"color": colour, "dash": "dash"})
            figure.add_annotation(
                x=change["index"],
                y=1,
                yref="paper",
                showarrow=False,
                xanchor="left",
                text=f"{change['change']:+.1%}: {'; '.join(change['differences'][:2])}",
                font={"color": colour, "size": 11},
            )
    first = series_list[0]
    figure.update_layout(
        title=f"{first['cluster']}: {first['op']} {format_size(first['size_bytes'])}, busbw per run (dashed: change points)"
        + (" · SYNTHETIC runs" if _synthetic(series_list) else ""),
        xaxis_title="run (in start order)",
        yaxis_title="busbw (GB/s)",
        template="plotly_white",
        height=460,
        hovermode="closest",
        clickmode="event",
    )
    return figure


def _synthetic(series_list: list[dict]) -> bool:
    return any(point.get("source") == "synthetic" for series in series_list for point in series["points"])


def compare_figure(comparison: dict) -> go.Figure:
    """comparison: Comparison.to_dict() of commbench.analysis.compare."""
    rows = comparison["rows"]
    if not rows:
        return message_figure("the two runs share no row", "Compare")
    figure = go.Figure()
    for verdict, colour in VERDICT_COLOURS.items():
        chosen = [row for row in rows if row["verdict"] == verdict]
        if not chosen:
            continue
        figure.add_trace(
            go.Bar(
                x=[row["row"] for row in chosen],
                y=[row["busbw_change"] * 100 for row in chosen],
                name=verdict,
                marker_color=colour,
                error_y=_busbw_interval(chosen),
                customdata=[[row["time_a_us"], row["time_b_us"], _q_text(row)] for row in chosen],
                hovertemplate="%{x}<br>busbw %{y:+.1f}%<br>time %{customdata[0]:.1f} -> %{customdata[1]:.1f} us"
                "<br>q %{customdata[2]}<extra></extra>",
            )
        )
    threshold = comparison["threshold"] * 100
    for level in (threshold, -threshold):
        figure.add_hline(y=level, line={"color": "#999", "dash": "dot"})
    figure.update_layout(
        title=f"{comparison['run_b']} against {comparison['run_a']}: busbw change per row (95% interval; "
        f"dotted: ±{threshold:.0f}%)",
        yaxis_title="busbw change (%)",
        template="plotly_white",
        height=480,
        barmode="group",
        xaxis={"tickangle": -40},
    )
    return figure


def compare_rows(comparison: dict) -> list[dict]:
    """The comparison as table rows, percentages as numbers."""
    return [
        {
            "row": row["row"],
            "time A (us)": round(row["time_a_us"], 2),
            "time B (us)": round(row["time_b_us"], 2),
            "time change (%)": round(row["time_change"] * 100, 2),
            "95% CI (%)": _interval_text(row),
            "busbw change (%)": round(row["busbw_change"] * 100, 2),
            "q": _q_text(row),
            "verdict": row["verdict"],
        }
        for row in comparison["rows"]
    ]


def _busbw_interval(rows: list[dict]) -> dict:
    """The time interval [lo, hi] turned into busbw terms: busbw change = 1/(1 + time change) - 1."""
    upper, lower = [], []
    for row in rows:
        if row["ci_low"] is None:
            upper.append(0.0)
            lower.append(0.0)
            continue
        centre = row["busbw_change"]
        upper.append((1 / (1 + row["ci_low"]) - 1 - centre) * 100)
        lower.append((centre - (1 / (1 + row["ci_high"]) - 1)) * 100)
    return {"type": "data", "symmetric": False, "array": upper, "arrayminus": lower}


def _interval_text(row: dict) -> str:
    if row["ci_low"] is None:
        return "-"
    return f"[{row['ci_low'] * 100:+.1f}, {row['ci_high'] * 100:+.1f}]"


def _q_text(row: dict) -> str:
    return "-" if row["q"] is None else f"{row['q']:.2g}"
