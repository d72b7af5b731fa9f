"""Pieces every figure shares: the empty-figure message, log axes with explicit ticks, colours, the WebGL switch.

Log axes get tick values and texts from here rather than from Plotly: left alone, Plotly labels the
minor ticks of a short log axis with bare digits ("4 3 2 1000 9 8") and uses SI prefixes on rates
("100µ" for 0.0001 GB/s).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import plotly.graph_objects as go

# Above this many points in one figure the curves are drawn with WebGL (Scattergl); below it SVG
# looks sharper. Browsers allow only a few WebGL contexts per page, so few figures may cross it.
WEBGL_POINTS = 2000

# Colours of series (runs, ranks) in order; a series keeps its colour across the figures of a page.
PALETTE = ["#636efa", "#00cc96", "#ef553b", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880", "#ff97ff", "#fecb52"]

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
    figure.update_layout(
        title=title, xaxis={"visible": False}, yaxis={"visible": False}, height=260, template="plotly_white"
    )
    return figure


def add_timeline_bars(
    figure: go.Figure,
    bars: list[dict],
    lane: Callable[[dict], str],
    per_unit_us: float,
    hover: Callable[[dict], Any],
    hovertemplate: str,
) -> None:
    """One horizontal bar trace per category, coloured as CATEGORY_COLOURS says: each bar from its
    start_us over its dur_us (divided by per_unit_us: 1e3 draws milliseconds), on the row `lane`
    names, with `hover`'s value as its customdata."""

    def scaled(value: float) -> float:
        return value if per_unit_us == 1.0 else value / per_unit_us

    for category in sorted({bar["category"] for bar in bars}):
        chosen = [bar for bar in bars if bar["category"] == category]
        figure.add_trace(
            go.Bar(
                orientation="h",
                name=category,
                base=[scaled(bar["start_us"]) for bar in chosen],
                x=[scaled(bar["dur_us"]) for bar in chosen],
                y=[lane(bar) for bar in chosen],
                marker={"color": CATEGORY_COLOURS.get(category, "#7f7f7f"), "line": {"width": 0}},
                customdata=[hover(bar) for bar in chosen],
                hovertemplate=hovertemplate,
            )
        )


_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_TIME_UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "µs"))  # from microseconds
# mantissas of the ticks on a log axis spanning few decades (1-2-5), and on a longer one
_SHORT_SPAN_DECADES = 3
_MANTISSAS_SHORT, _MANTISSAS_LONG = (1, 2, 5), (1,)


def size_label(num_bytes: float) -> str:
    """1024 -> '1 KiB', 4194304 -> '4 MiB', 512 -> '512 B', 1536 -> '1.5 KiB' (binary units)."""
    value, unit = float(num_bytes), 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{plain_number(value)} {_BINARY_UNITS[unit]}"


def time_label(microseconds: float) -> str:
    """A time given in us with the unit that keeps it readable: 0.5 -> '0.5 µs', 2000 -> '2 ms'."""
    for scale, unit in _TIME_UNITS:
        if microseconds >= scale:
            return f"{plain_number(microseconds / scale)} {unit}"
    return f"{plain_number(microseconds)} µs"


def plain_number(value: float) -> str:
    """A positive number in plain decimals, no exponent or SI prefix: 0.0001 -> '0.0001', 2000 -> '2,000'."""
    if value >= 1:
        return f"{value:,.3g}" if value < 999.5 else f"{value:,.0f}"
    digits = max(0, -math.floor(math.log10(value))) + 2 if value > 0 else 0
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") or "0"


def size_ticks(sizes) -> dict:
    """Log x-axis settings with ticks at every other power of two, labelled in binary units (4 KiB, 1 MiB)."""
    sizes = [int(s) for s in sizes if s and s > 0]
    if not sizes:
        return {"type": "log"}
    low, high = min(sizes).bit_length() - 1, max(sizes).bit_length()
    ticks = [1 << power for power in range(low, high + 1) if (power - low) % 2 == 0]
    return {"type": "log", "tickvals": ticks, "ticktext": [size_label(t) for t in ticks]}


def log_ticks(values: Iterable[float], label: Callable[[float], str] = plain_number) -> dict:
    """Log axis settings with ticks at 1-2-5 x 10^k (only 10^k over more than three decades) covering
    the positive values, each labelled by label()."""
    positive = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    if not positive:
        return {"type": "log"}
    low, high = math.floor(math.log10(min(positive))), math.ceil(math.log10(max(positive)))
    mantissas = _MANTISSAS_SHORT if high - low <= _SHORT_SPAN_DECADES else _MANTISSAS_LONG
    candidates = [m * 10.0**e for e in range(low, high + 1) for m in mantissas]
    inside = [t for t in candidates if min(positive) <= t <= max(positive)]
    below = [t for t in candidates if t < min(positive)][-1:]
    above = [t for t in candidates if t > max(positive)][:1]
    ticks = below + inside + above if len(inside) < 2 else inside  # at least two ticks framing the data
    return {"type": "log", "tickvals": ticks, "ticktext": [label(t) for t in ticks]}


def rate_ticks(gbps: Iterable[float]) -> dict:
    """A log GB/s axis labelled in plain decimals (0.0001, 0.01, 1, 100)."""
    return log_ticks(gbps, plain_number)


def time_ticks(microseconds: Iterable[float]) -> dict:
    """A log time axis (values in us) labelled with their unit (10 µs, 2 ms, 1 s)."""
    return log_ticks(microseconds, time_label)


def scatter_class(points: int):
    return go.Scattergl if points > WEBGL_POINTS else go.Scatter
