"""`commbench calibrate` on this CPU: the processor JSON it writes, that `plan --processor` reads it,
how its figures are derived from the timings, and bad input refused before measuring.

The CUDA path (CUDA events, bf16/fp16, the flash/efficient/cuDNN backends) cannot run here; what
does not need a GPU is tested: the timing loop's arithmetic on a fake clock, the names the
backends get on CUDA, and the refusal of --device cuda without a GPU.
"""

from __future__ import annotations

import json

import pytest

from commbench.measure.processor_json import processor_json
from commbench.modeling.hardware import load_processor, processor_from_json

TINY = ["--gemm-dims", "32,64", "--attention", "64x2x16", "--repeats", "1", "--threads", "1", "--no-progress"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("calibrate") / "cpu.json"
    result = run_cli("calibrate", "--quick", *TINY, "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    return out, result


def test_writes_a_processor_in_the_presets_format(calibrated):
    out, result = calibrated
    written = json.loads(out.read_text())
    assert json.loads(result.stdout) == written  # --json prints what --out holds
    figures = {key: entry for key, entry in written.items() if isinstance(entry, dict)}
    assert set(figures) >= {
        "peak_flops_bf16",
        "memory_bytes",
        "memory_bandwidth_bytes_per_s",
        "gemm_efficiency",
        "gemm_surface",
        "attention_efficiency",
        "attention_rates",
        "elementwise_efficiency",
        "kernel_overhead_s",
        "optimizer_efficiency",
        "sm_count",
    }
    for key, entry in figures.items():
        assert entry["source"].startswith("measured on "), key
        assert " by commbench " in entry["source"], key
    surface = written["gemm_surface"]["value"]
    assert list(surface) == ["fp32"] and len(surface["fp32"]) == 8  # 2 x 2 x 2 shapes
    assert max(point[3] for point in surface["fp32"]) == pytest.approx(1.0)  # the fastest is the peak
    assert "sdpa-math" in written["attention_rates"]["value"]
    processor = load_processor(str(out))
    assert processor.surface("fp32") is not None and processor.kernel_overhead_s > 0
    assert all(seconds > 0 for seconds in processor.autograd_op_s)


def test_plan_reads_the_calibrated_processor(calibrated):
    from tests.conftest import run_cli

    out, _ = calibrated
    result = run_cli(
        "plan",
        "--model",
        "llama3.2-1b",
        "--gpus",
        "2",
        "--hardware",
        "dgx-a100",
        "--global-batch",
        "8",
        "--seq-len",
        "512",
        "--processor",
        str(out),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert "calibrated on" in result.stdout


def measurements(gemm_seconds=1.0) -> dict:
    """Timings made up for the arithmetic, not measured."""
    return {
        "dtypes": ["fp32"],
        "repeats": 1,
        "gemm": [
            {"dtype": "fp32", "m": 100, "n": 100, "k": 100, "seconds": gemm_seconds},
            {"dtype": "fp32", "m": 200, "n": 100, "k": 100, "seconds": gemm_seconds},
        ],
        "attention": [
            {
                "dtype": "fp32",
                "backend": "math",
                "batch": 1,
                "heads": 2,
                "seq": 10,
                "head_dim": 5,
                "forward_s": 1.0,
                "forward_backward_s": 3.5,
            }
        ],
        "elementwise": [
            {"dtype": "fp32", "kind": "copy", "bytes": 100.0, "seconds": 1.0},
            {"dtype": "fp32", "kind": "gelu", "bytes": 100.0, "seconds": 2.0},
            {"dtype": "fp32", "kind": "add", "bytes": 150.0, "seconds": 2.0},
        ],
        "launch_s": 5e-6,
        "optimizer": {"params": 2, "seconds": 1.0},
        "autograd_op": {"forward_s": 4e-6, "backward_s": 3e-6},
    }


FACTS = {"name": "CPU test", "memory_bytes": 1e9, "sm_count": 2, "cuda": None}


def test_figures_follow_from_the_timings():
    raw = processor_json(measurements(), FACTS, "host", "2026-12-01T00:00:00Z", "0.0")
    value = {key: entry["value"] for key, entry in raw.items() if isinstance(entry, dict)}
    assert value["peak_flops_bf16"] == 4e6  # 2*200*100*100 FLOPs in 1 s
    assert value["gemm_surface"]["fp32"] == [[100, 100, 100, 0.5], [200, 100, 100, 1.0]]
    assert value["gemm_efficiency"] == [[2e6, 0.5], [4e6, 1.0]]
    # attention: 2*1*2*10^2*5 = 2000 FLOPs forward in 1 s; backward 2.5x that in 2.5 s
    rates = {"forward": 2000 / 4e6, "backward": 2000 / 4e6}
    assert value["attention_rates"] == {"sdpa-math": rates, "sdpa": rates}  # the only backend is torch's choice
    assert value["attention_efficiency"] == pytest.approx(3.5 * 2000 / 3.5 / 4e6)
    assert value["memory_bandwidth_bytes_per_s"] == 100.0
    assert value["elementwise_efficiency"] == pytest.approx(0.625)  # median of 0.5 and 0.75
    assert value["optimizer_efficiency"] == pytest.approx(0.48)  # 2 params x 24 B per s over 100 B/s
    assert value["kernel_overhead_s"] == 5e-6
    assert value["autograd_op_s"] == {"forward": 4e-6, "backward": 3e-6}
    assert raw["peak_flops_bf16"]["source"].startswith("measured on host at 2026-12-01T00:00:00Z by commbench 0.0")
    processor_from_json(raw)  # the schema's reader takes it


def test_a_datasheet_peak_scales_every_fraction_and_cannot_be_below_a_measurement():
    raw = processor_json(measurements(), FACTS, "h", "t", "v", peak_flops=8e6)
    assert raw["gemm_surface"]["value"]["fp32"][1][3] == 0.5
    assert "--peak-flops" in raw["peak_flops_bf16"]["source"]
    with pytest.raises(ValueError, match="below a GEMM measured"):
        processor_json(measurements(), FACTS, "h", "t", "v", peak_flops=1e6)


def test_cuda_backends_get_the_step_models_names():
    gpu = {**FACTS, "name": "NVIDIA H100 80GB HBM3", "cuda": "12.4"}
    timings = measurements()
    timings["attention"][0]["backend"] = "flash"
    assert list(processor_json(timings, gpu, "h", "t", "v")["attention_rates"]["value"]) == ["flash2", "sdpa"]


def test_host_clock_takes_the_median_after_a_warm_up(monkeypatch):
    from commbench.measure import calibrate

    ticks = iter([0.0, 1.0, 1.0, 4.0, 4.0, 6.0])  # runs of 1, 3 and 2 s
    monkeypatch.setattr(calibrate.time, "perf_counter", lambda: next(ticks))
    calls = []
    assert calibrate.HostClock().seconds(lambda: calls.append(1), 3) == 2.0
    assert len(calls) == 4  # one untimed warm-up


BAD = [
    (["--dtype", "fp8"], "unknown"),
    (["--dtype", "bf16"], "not calibrated on cpu"),
    (["--gemm-dims", "0,64"], "out of range"),
    (["--gemm-dims", "1e3"], "not a whole number"),
    (["--gemm-shapes", "64x64"], "is not"),
    (["--attention", "64x2x4096"], "out of range"),
    (["--repeats", "0"], "--repeats"),
    (["--out", "/proc/commbench-calibrate.json"], "cannot write"),
    (["--out", "/nonexistent-dir/x.json"], "cannot write"),
]


def calibrate_in_process(capsys, *args: str) -> tuple[int, str]:
    """`commbench calibrate ARGS` through the command line's main (one interpreter: torch loads once)."""
    from commbench.cli import main

    code = main(["calibrate", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, needle):
    out = [] if "--out" in args else ["--out", str(tmp_path / "p.json")]
    code, err = calibrate_in_process(capsys, "--device", "cpu", *out, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
    assert not list(tmp_path.iterdir()), "nothing written for refused input"


def test_no_gpu_here_is_refused(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, err = calibrate_in_process(capsys, "--device", "cuda", "--out", str(tmp_path / "p.json"))
    assert code == 2 and "no CUDA device" in err and len(err.strip().splitlines()) == 1


def test_calibrations_combine_the_autograd_op_and_older_ones_without_it_still_combine():
    from commbench.measure.processor_json import combine

    slow = {**measurements(), "autograd_op": {"forward_s": 8e-6, "backward_s": 1e-6}}
    older = {key: value for key, value in measurements().items() if key != "autograd_op"}
    assert combine([measurements(), slow], statistic=max)["autograd_op"] == {"forward_s": 8e-6, "backward_s": 3e-6}
    assert "autograd_op" not in combine([older, older])
    assert "autograd_op_s" not in processor_json(older, FACTS, "h", "t", "v")
