"""The GEMM figure of a processor description: a calibrated device's measured surface against a preset's.

x is one GEMM's FLOPs (2MNK), y the rate it reaches (TFLOP/s = fraction of the processor's peak x
that peak), both on log axes, so a CPU and a GPU fit on one figure. Each measured shape is a point
(hover: M x N x K, dtype, fraction of peak); a processor without a surface is drawn as its curve
by FLOPs alone, the line the step model then uses. Nothing here measures or imports torch.
"""

from __future__ import annotations

import plotly.graph_objects as go

from commbench.dtypes import GEMM_DTYPES
from commbench.modeling.hardware import Processor
from dashboard.figures.common import PALETTE

SYMBOLS = dict(zip(GEMM_DTYPES, ("circle", "diamond", "square")))  # one marker per GEMM precision


def _surface_traces(processor: Processor, label: str, colour: str) -> list:
    traces = []
    for dtype, points in processor.gemm_surface:
        traces.append(
            go.Scatter(
                x=[2 * m * n * k for m, n, k, _ in points],
                y=[f * processor.peak_flops / 1e12 for *_, f in points],
                mode="markers",
                name=f"{label}: {dtype} shapes",
                marker={"color": colour, "symbol": SYMBOLS.get(dtype)},
                text=[f"{m:.0f} x {n:.0f} x {k:.0f} {dtype}: {f:.0%} of peak" for m, n, k, f in points],
                hovertemplate="%{text}<br>%{y:.3g} TFLOP/s<extra></extra>",
            )
        )
    return traces


def _curve_trace(processor: Processor, label: str, colour: str) -> go.Scatter:
    flops = [point[0] for point in processor.gemm_curve]
    return go.Scatter(
        x=flops,
        y=[e * processor.peak_flops / 1e12 for _, e in processor.gemm_curve],
        mode="lines",
        name=f"{label}: curve by FLOPs",
        line={"color": colour, "dash": "dot"},
        text=[f"{e:.0%} of peak" for _, e in processor.gemm_curve],
        hovertemplate="%{x:.3g} FLOPs: %{text}<br>%{y:.3g} TFLOP/s<extra></extra>",
    )


def gemm_surface_figure(calibrated: Processor, preset: Processor) -> go.Figure:
    figure = go.Figure()
    for processor, label, colour in (
        (preset, f"preset {preset.name}", PALETTE[0]),
        (calibrated, calibrated.name, PALETTE[2]),
    ):
        traces = _surface_traces(processor, label, colour) or [_curve_trace(processor, label, colour)]
        figure.add_traces(traces)
    figure.update_layout(
        title=f"GEMM rate by size: {calibrated.name} against {preset.name}",
        xaxis={"type": "log", "title": "FLOPs of one GEMM (2MNK)"},
        yaxis={"type": "log", "title": "TFLOP/s reached"},
        template="plotly_white",
        height=380,
        legend={"orientation": "h", "y": -0.25},
    )
    return figure
