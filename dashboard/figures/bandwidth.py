"""Bandwidth and latency against message size, several runs overlaid, with the fitted model.

Input is a records frame (commbench Record fields plus a `run` column), as ResultsStore.records
returns it. One curve is one (run, scope, group size, groups, in/out-of-place) series.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from commbench.data.bandwidth_table import BandwidthTable, Entry, model_time_us
from commbench.units import format_size
from dashboard.figures.common import PALETTE, message_figure, rate_ticks, scatter_class, size_ticks, time_ticks

METRICS = {"busbw_gbps": "bus bandwidth (GB/s)", "algbw_gbps": "algorithm bandwidth (GB/s)"}
IN_PLACE_CHOICES = {"out": False, "in": True}
# Sizes up to this are latency-bound on every fabric: the latency figure shows only these.
LATENCY_MAX_SIZE = 64 * 1024
SERIES_KEYS = ["run", "scope", "group_size", "n_groups", "in_place"]
TABLE_COLUMNS = [
    "run", "op", "scope", "group_size", "n_groups", "size_bytes", "count", "dtype", "in_place",
    "time_us", "time_stat", "time_us_p10", "time_us_p90", "algbw_gbps", "busbw_gbps", "cv", "wrong",
]  # fmt: skip

_HOVER = (
    "<b>%{fullData.name}</b><br>size %{customdata[0]} (%{x:,} B), count %{customdata[1]:,} %{customdata[2]}"
    "<br>time %{customdata[3]:.2f} us (p10 %{customdata[4]:.2f}, p90 %{customdata[5]:.2f}, cv %{customdata[6]:.3f})"
    "<br>algbw %{customdata[7]:.3f} GB/s, busbw %{customdata[8]:.3f} GB/s<extra></extra>"
)
_HOVER_COLUMNS = [
    "size_label",
    "count",
    "dtype",
    "time_us",
    "time_us_p10",
    "time_us_p90",
    "cv",
    "algbw_gbps",
    "busbw_gbps",
]


def select_records(frame: pd.DataFrame, op: str | None, scopes: list[str] | None, in_place: str) -> pd.DataFrame:
    """Rows of one op, the chosen scopes, and out-of-place, in-place or both ("out", "in", "both")."""
    if frame.empty or "op" not in frame:
        return frame.iloc[0:0]
    keep = frame["op"] == op
    if scopes:
        keep &= frame["scope"].isin(scopes)
    if in_place in IN_PLACE_CHOICES:
        keep &= frame["in_place"] == IN_PLACE_CHOICES[in_place]
    return frame[keep].sort_values(SERIES_KEYS + ["size_bytes"])


def series_colours(frame: pd.DataFrame) -> dict[tuple, str]:
    """A colour per series, the same in every figure drawn from this frame."""
    keys = frame.groupby(SERIES_KEYS, sort=False).groups.keys()
    return {key: PALETTE[position % len(PALETTE)] for position, key in enumerate(keys)}


def series_name(run: str, scope: str, group_size: int, n_groups: int, in_place: bool) -> str:
    groups = f" x{n_groups} groups" if n_groups > 1 else ""
    return f"{run} · {scope} n={group_size}{groups}{' in-place' if in_place else ''}"


def bandwidth_figure(
    frame: pd.DataFrame,
    metric: str = "busbw_gbps",
    references: list[tuple[str, float]] | None = None,
    fitted: bool = True,
    no_reference: str | None = None,
) -> go.Figure:
    """Bandwidth vs size, log-log, one curve per series; dashed fitted model; dotted nominal rates.

    The fitted model is commbench.data.bandwidth_table's, the one the planner prices collectives with.
    no_reference: why no nominal rate is drawn, written on the figure when references is empty.
    """
    if frame.empty:
        return message_figure("No records for this choice: pick runs on the Runs page or above.")
    figure = go.Figure()
    # A log axis cannot show zero: nccl-tests prints bandwidths to two decimals, so its smallest
    # sizes read 0.00. Those points stay in the table and the fit (which uses times), not here.
    trace_class = scatter_class(len(frame))
    colours = series_colours(frame)
    for keys, series in frame.groupby(SERIES_KEYS, sort=False):
        name, colour = series_name(*keys), colours[keys]
        drawn = series[series[metric] > 0]
        figure.add_trace(
            trace_class(
                x=drawn["size_bytes"],
                y=drawn[metric],
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": colour},
                customdata=_hover_data(drawn),
                hovertemplate=_HOVER,
            )
        )
        if fitted:
            _add_fit(figure, series, metric, name, colour)
    # A trace rather than add_hline: hline annotations are placed wrongly on log axes.
    span = [frame["size_bytes"].min(), frame["size_bytes"].max()]
    for label, gbps in references or []:
        figure.add_trace(
            go.Scatter(
                x=span,
                y=[gbps, gbps],
                mode="lines",
                name=f"nominal {label}: {gbps:g} GB/s",
                line={"dash": "dot", "color": "#555"},
                hovertemplate=f"nominal {label}: {gbps:g} GB/s<extra></extra>",
            )
        )
    figure.update_layout(
        template="plotly_white",
        height=460,
        hovermode="closest",
        legend={"orientation": "h", "y": -0.2},
        xaxis={"title": "message size (bytes, log)", **size_ticks(frame["size_bytes"])},
        yaxis={"title": METRICS[metric] + ", log", **rate_ticks([*frame[metric], *(g for _, g in references or [])])},
        margin={"t": 30},
    )
    if no_reference and not references:
        figure.add_annotation(
            text=no_reference,
            showarrow=False,
            xref="paper",
            yref="paper",
            x=0,
            y=1.02,
            xanchor="left",
            yanchor="bottom",
            font={"size": 11, "color": "#555"},
        )
    return figure


def _hover_data(series: pd.DataFrame) -> np.ndarray:
    series = series.assign(size_label=series["size_bytes"].map(format_size))
    return series[_HOVER_COLUMNS].to_numpy(dtype=object)


def series_entries(series: pd.DataFrame) -> list[Entry]:
    """The bandwidth table's entries of one series: the curves the planner prices and `commbench table`
    prints, built by BandwidthTable from the same records (its choice of rows, times and fit)."""
    records = [
        {key: value for key, value in row.items() if not (isinstance(value, float) and math.isnan(value))}
        for row in series.to_dict("records")
    ]  # a column a record lacks is NaN in the frame
    in_place = bool(series["in_place"].iloc[0])
    return BandwidthTable.from_records(records, in_place=in_place).items


def _add_fit(figure: go.Figure, series: pd.DataFrame, metric: str, name: str, colour: str) -> None:
    """The bandwidth table's latency-bandwidth fit of one series, drawn over its size range."""
    for entry in series_entries(series):
        if len(entry.sizes) < 2:  # one size cannot tell latency from bandwidth
            continue
        fit, factor = entry.fit, entry.busbw_factor
        sizes = np.geomspace(entry.sizes.min(), entry.sizes.max(), 64)
        algbw = sizes / model_time_us(fit, sizes, factor) / 1e3  # bytes/us -> GB/s
        shown = algbw * factor if metric == "busbw_gbps" else algbw
        figure.add_trace(
            go.Scatter(
                x=sizes,
                y=shown,
                mode="lines",
                line={"dash": "dash", "width": 1, "color": colour},
                legendgroup=name,
                name=f"fit: {fit.alpha_us:.3g} us + busbw {fit.busbw_gbps:.3g} GB/s (rms {100 * fit.rms_rel_error:.1f}%)",
                meta={"alpha_us": fit.alpha_us, "busbw_gbps": fit.busbw_gbps, "op": entry.op, "dtype": entry.dtype},
                hovertemplate=(
                    f"model: {fit.alpha_us:.3f} us latency, {fit.busbw_gbps:.4g} GB/s busbw"
                    "<br>%{x:,.0f} B: %{y:.3f} GB/s<extra></extra>"
                ),
            )
        )


def latency_figure(frame: pd.DataFrame) -> go.Figure:
    """Time per call at small sizes (up to LATENCY_MAX_SIZE), p10-p90 as error bars."""
    small = frame[frame["size_bytes"] <= LATENCY_MAX_SIZE] if not frame.empty else frame
    if small.empty:
        return message_figure(f"No records at or below {format_size(LATENCY_MAX_SIZE)} for this choice.")
    figure = go.Figure()
    trace_class = scatter_class(len(small))
    colours = series_colours(frame)
    for keys, series in small.groupby(SERIES_KEYS, sort=False):
        figure.add_trace(
            trace_class(
                x=series["size_bytes"],
                y=series["time_us"],
                mode="lines+markers",
                name=series_name(*keys),
                line={"color": colours[keys]},
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": series["time_us_p90"] - series["time_us"],
                    "arrayminus": series["time_us"] - series["time_us_p10"],
                },
                customdata=_hover_data(series),
                hovertemplate=_HOVER,
            )
        )
    figure.update_layout(
        template="plotly_white",
        height=360,
        hovermode="closest",
        showlegend=False,
        margin={"t": 30},
        xaxis={"title": "message size (bytes, log)", **size_ticks(small["size_bytes"])},
        yaxis={
            "title": "time per call (log)",
            **time_ticks([*small["time_us_p10"], *small["time_us_p90"], *small["time_us"]]),
        },
    )
    return figure


def table_rows(frame: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """DataTable columns and rows of the chosen records (numbers rounded for reading, not for the CSV)."""
    columns = [c for c in TABLE_COLUMNS if c in frame.columns]
    shown = frame[columns].round(
        {"time_us": 2, "time_us_p10": 2, "time_us_p90": 2, "algbw_gbps": 3, "busbw_gbps": 3, "cv": 4}
    )
    return [{"name": c, "id": c} for c in columns], shown.to_dict("records")
