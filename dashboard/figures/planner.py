"""Ranked layouts: where each step's time goes, memory per GPU against capacity, the simulated step.

Input is the planner's StepResult for each ranked layout (the table) or its to_dict() (the figures),
and the event schedule's timeline ({stream, start_us, dur_us, name, category}) for the chosen one.
"""

from __future__ import annotations

import plotly.graph_objects as go

from commbench.modeling.ledger import LEDGER_ITEMS
from commbench.modeling.schedule import StepResult
from dashboard.figures.common import CATEGORY_COLOURS, add_timeline_bars, message_figure
from dashboard.figures.overlap import MAX_BARS

GB = 1e9
MEMORY_COLOURS = {
    "parameters": "#1f77b4", "quantised weights": "#17becf", "gradients": "#ff7f0e", "optimizer": "#2ca02c", "grad_buckets": "#ffbb78",
    "param_gather": "#aec7e8", "activations": "#d62728", "recompute_buffer": "#ff9896", "logits": "#9467bd",
    "attention_workspace": "#c5b0d5", "gemm_workspace": "#8c564b", "cuda_context": "#7f7f7f",
    "nccl_buffers": "#bcbd22", "allocator_reserve": "#c7c7c7",
}  # fmt: skip


def _label(position: int, result: dict) -> str:
    return f"#{position + 1} {result['layout']}"


def ranked_rows(results: list[StepResult]) -> list[dict]:
    """One table row per ranked layout."""
    return [
        {
            "rank": position + 1,
            "layout": str(result.layout),
            "tokens_per_s": round(result.tokens_per_s),
            "mfu_pct": round(100 * result.mfu, 1),
            "step_s": round(result.step_s, 4),
            "memory_gb": round(result.memory["total"] / GB, 1),
            "micro_batches": result.micro_batches,
            "largest_costs": result.largest_costs(),
        }
        for position, result in enumerate(results)
    ]


def breakdown_figure(results: list[dict]) -> go.Figure:
    """Stacked horizontal bars: seconds of each step-time category on the critical stage."""
    if not results:
        return message_figure("No layout to show.")
    labels = [_label(i, r) for i, r in enumerate(results)]
    figure = go.Figure()
    for category in results[0]["categories_s"]:
        seconds = [r["categories_s"][category] for r in results]
        if not any(seconds):
            continue
        figure.add_trace(
            go.Bar(
                y=labels,
                x=seconds,
                name=category,
                orientation="h",
                marker={"color": CATEGORY_COLOURS.get(category)},
                customdata=[100 * s / r["step_s"] for s, r in zip(seconds, results)],
                hovertemplate="%{y}<br>" + category + ": %{x:.4f} s (%{customdata:.1f}% of the step)<extra></extra>",
            )
        )
    figure.update_layout(
        template="plotly_white",
        barmode="stack",
        title="step time breakdown",
        xaxis={"title": "seconds per step"},
        yaxis={"autorange": "reversed"},
        height=120 + 44 * len(results),
        legend={"orientation": "h", "y": -0.25},
        margin={"t": 40},
    )
    return figure


def memory_figure(results: list[dict], capacity_bytes: float) -> go.Figure:
    """Stacked bars of the per-GPU memory ledger of each layout, with the GPU's capacity."""
    if not results:
        return message_figure("No layout to show.")
    # Short labels on the axis (layouts are long); the full layout is in the hover.
    positions = [f"#{i + 1}" for i in range(len(results))]
    layouts = [r["layout"] for r in results]
    figure = go.Figure()
    for item in (k for k in LEDGER_ITEMS if k in results[0]["memory_bytes"]):
        figure.add_trace(
            go.Bar(
                x=positions,
                y=[r["memory_bytes"][item] / GB for r in results],
                name=item,
                customdata=layouts,
                marker={"color": MEMORY_COLOURS.get(item)},
                hovertemplate="%{x} %{customdata}<br>" + item + ": %{y:.2f} GB<extra></extra>",
            )
        )
    _stacked_against_capacity(figure, capacity_bytes, "capacity")
    figure.update_layout(
        title="memory per GPU",
        xaxis={"title": "layout (rank in the table)"},
        yaxis={"title": "GB"},
        height=380,
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 40},
    )
    return figure


def _stacked_against_capacity(figure: go.Figure, capacity_bytes: float, what: str) -> None:
    """The memory figures' common frame: bars stacked, and the device's memory as a red dashed line."""
    figure.add_hline(
        y=capacity_bytes / GB,
        line_dash="dash",
        line_color="red",
        annotation_text=f"{what} {capacity_bytes / GB:.0f} GB",
        annotation_position="top left",
    )
    figure.update_layout(template="plotly_white", barmode="stack")


def stage_memory_figure(result: dict, capacity_bytes: float) -> go.Figure:
    """One layout's memory per pipeline stage: each stage's ledger stacked item by item (the
    allocator's items below, what lives outside it on top), against the device's memory."""
    stages = result.get("stages") or []
    if not stages:
        return message_figure("No pipeline stages to show.")
    labels = [f"stage {s['stage']} ({s['layers']} layers)" for s in stages]
    figure = go.Figure()
    for item in LEDGER_ITEMS:
        values = [s["memory_bytes"].get(item, 0.0) / GB for s in stages]
        if not any(values):
            continue
        figure.add_trace(
            go.Bar(
                x=labels,
                y=values,
                name=item,
                marker={"color": MEMORY_COLOURS.get(item)},
                customdata=[s["peak_moment"] for s in stages],
                hovertemplate="%{x}<br>" + item + ": %{y:.2f} GB (peak at %{customdata})<extra></extra>",
            )
        )
    _stacked_against_capacity(figure, capacity_bytes, "device")
    figure.update_layout(
        title=f"memory per pipeline stage of {result['layout']} (planner's ledger, predicted)",
        xaxis={"title": "pipeline stage"},
        yaxis={"title": "GB per GPU"},
        height=400,
        legend={"orientation": "h", "y": -0.3},
        margin={"t": 50},
    )
    return figure


def step_timeline_figure(timeline: list[dict], title: str) -> go.Figure:
    """The simulated step: one row per stream, bars on a numeric millisecond axis."""
    if not timeline:
        return message_figure("The simulator returned no timeline for this layout.")
    bars, note = timeline, None
    if len(bars) > MAX_BARS:
        bars = sorted(bars, key=lambda bar: bar["dur_us"], reverse=True)[:MAX_BARS]
        note = f"{len(timeline)} events: the {MAX_BARS} longest are drawn"
    streams = sorted({bar["stream"] for bar in timeline})
    figure = go.Figure()
    add_timeline_bars(
        figure,
        bars,
        lane=lambda bar: bar["stream"],
        per_unit_us=1e3,
        hover=lambda bar: bar["name"],
        hovertemplate="%{customdata}<br>start %{base:,.3f} ms, duration %{x:,.3f} ms<extra>%{fullData.name}</extra>",
    )
    figure.update_layout(
        template="plotly_white",
        barmode="overlay",
        title=title + (f" ({note})" if note else ""),
        xaxis={"title": "time in the step (ms)", "type": "linear"},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(streams))},
        height=max(260, 34 * len(streams) + 140),
        legend={"orientation": "h", "y": 1.1},
        margin={"t": 60},
    )
    return figure
