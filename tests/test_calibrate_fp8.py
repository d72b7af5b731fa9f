"""`commbench calibrate --fp8` times FP8 GEMMs through torch._scaled_mm (E4M3, per-tensor scales).
torch runs _scaled_mm on this CPU too, so the path is exercised end to end here; on a GPU without
FP8 tensor cores torch refuses and calibrate says so in one line (simulated below). The processor
JSON gains peak_flops_fp8 (the fastest FP8 GEMM) and an fp8 surface of fractions of it, which the
step model prices --compute-precision fp8-* GEMMs from."""

from __future__ import annotations

import json

import pytest

from commbench.measure.processor_json import processor_json
from commbench.modeling.hardware import load_processor, processor_from_json
from tests.test_calibrate import TINY
from tests.test_calibrate import measurements as fake_measurements


def test_fp8_gemms_are_timed_and_written(tmp_path):
    from tests.conftest import run_cli

    out = tmp_path / "cpu-fp8.json"
    result = run_cli("calibrate", "--quick", *TINY, "--fp8", "--out", str(out))
    assert result.returncode == 0, result.stderr
    written = json.loads(out.read_text())
    surface = written["gemm_surface"]["value"]
    assert set(surface) == {"fp32", "fp8"} and len(surface["fp8"]) == len(surface["fp32"])
    assert max(point[3] for point in surface["fp8"]) == pytest.approx(1.0)  # fractions of the fastest FP8 GEMM
    assert (
        written["peak_flops_fp8"]["source"].startswith("measured on ")
        and "_scaled_mm" in written["peak_flops_fp8"]["source"]
    )
    processor = load_processor(str(out))
    assert processor.peak_flops_fp8 == written["peak_flops_fp8"]["value"] and processor.surface("fp8") is not None


def test_fp8_points_set_their_own_peak_not_the_bf16_one():
    measurements = {**fake_measurements(), "gemm_fp8": [{"dtype": "fp8", "m": 64, "n": 64, "k": 64, "seconds": 1e-6}]}
    plain = processor_json(
        fake_measurements(),
        {"name": "GPU", "memory_bytes": 1e9, "sm_count": 1, "cuda": "12", "compute_capability": "9.0"},
        "h",
        "t",
        "v",
    )
    with_fp8 = processor_json(
        measurements,
        {"name": "GPU", "memory_bytes": 1e9, "sm_count": 1, "cuda": "12", "compute_capability": "9.0"},
        "h",
        "t",
        "v",
    )
    assert with_fp8["peak_flops_bf16"] == plain["peak_flops_bf16"]
    assert with_fp8["peak_flops_fp8"]["value"] == pytest.approx(2 * 64**3 / 1e-6)
    assert processor_from_json(with_fp8).compute_capability == "9.0"


def test_a_device_without_fp8_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    from commbench import cli
    from commbench.measure import calibrate

    def no_fp8(*_args, **_kwargs):
        raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0\nmore")

    monkeypatch.setattr(calibrate, "time_scaled_gemm", no_fp8)
    assert cli.main(["calibrate", "--quick", *TINY, "--fp8", "--out", str(tmp_path / "x.json")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--fp8: torch._scaled_mm refuses FP8" in lines[0]
