"""The dashboard's GEMM figure (dashboard/figures/processor.py), without a browser: a calibrated
processor's surface points against a preset drawn as its curve by FLOPs."""

from __future__ import annotations

import pytest

pytest.importorskip("plotly", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from commbench.measure.processor_json import processor_json
from commbench.modeling.hardware import load_processor, processor_from_json
from dashboard.figures.processor import gemm_surface_figure
from tests.test_calibrate import FACTS, measurements


def test_calibrated_points_against_the_presets_curve():
    calibrated = processor_from_json(processor_json(measurements(), FACTS, "host", "t", "v"))
    preset = load_processor("a100")
    figure = gemm_surface_figure(calibrated, preset)
    names = [trace.name for trace in figure.data]
    assert names == [f"preset {preset.name}: curve by FLOPs", f"{calibrated.name}: fp32 shapes"]
    points = figure.data[1]
    # made-up timings: 100x100x100 at half of the 4 MFLOP/s peak, 200x100x100 at all of it
    assert list(points.x) == [2e6, 4e6] and list(points.y) == pytest.approx([2e-6, 4e-6])
    assert points.text[0] == "100 x 100 x 100 fp32: 50% of peak"
    curve = figure.data[0]
    assert curve.y[-1] == pytest.approx(preset.gemm_curve[-1][1] * preset.peak_flops / 1e12)
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
