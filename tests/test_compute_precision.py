"""Compute precision apart from memory bytes: FP8/MXFP8/NVFP4 recipes change GEMM time, memory and
parameter-gather bytes, are refused where the GPU cannot run them, and `plan --json` names them."""

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from commbench.modeling.compute import layer_compute
from commbench.modeling.layout import Layout, LayoutBatch
from commbench.modeling.recipes import RECIPES
from commbench.modeling.spec import PlanSpec, build_planner

JOB = dict(model="llama3-70b", gpus=64, global_batch=512, seq_len=4096, hardware="dgx-h100")
LAYOUT = Layout(tp=4, pp=2, dp=8, mbs=1, zero=1)


def _planner(**changes):
    return build_planner(PlanSpec(**{**JOB, **changes}))


def _evaluate(planner, layout=LAYOUT):
    return planner.step_model.evaluate(LayoutBatch.from_layouts([layout]))


@pytest.fixture(scope="module")
def bf16_and_fp8():
    return _planner(), _planner(compute_precision="fp8-delayed")


def test_fp8_gemms_run_at_the_fp8_rate(bf16_and_fp8):
    bf16, fp8 = bf16_and_fp8
    batch = LayoutBatch.from_layouts([LAYOUT])
    proc = bf16.cluster.system.processor
    slow, fast = layer_compute(bf16.job, batch, proc), layer_compute(fp8.job, batch, proc)
    # the large projections of a 70B layer sit on the curve's plateau: half the time at twice the peak,
    # over the fitted factor FP8 GEMMs reach of the BF16 curve (presets/processor-h100.json)
    factor = dict(proc.quantised_gemm_efficiency).get("fp8", 1.0)
    assert fast.fwd_gemm[0] / slow.fwd_gemm[0] == pytest.approx(0.5 / factor, rel=0.02)
    assert fast.bwd_gemm[0] / slow.bwd_gemm[0] == pytest.approx(0.5 / factor, rel=0.02)
    # the attention core, the output layer and the loss stay in BF16
    assert fast.fwd_attention[0] == slow.fwd_attention[0] and fast.head_fwd[0] == slow.head_fwd[0]
    # and the casts cost something: the step gains less than the GEMMs do
    assert fast.fwd_quantise[0] > 0 and fast.bwd_quantise[0] > 0 and slow.fwd_quantise == 0
    step_bf16, step_fp8 = _evaluate(bf16).step_s[0], _evaluate(fp8).step_s[0]
    assert 0.5 < step_fp8 / step_bf16 < 0.9


def test_recipe_overheads_order():
    """Current scaling reads every input once more for its amax; NVFP4 adds its Hadamard transform."""
    batch = LayoutBatch.from_layouts([LAYOUT])
    seconds = {}
    for name in ("fp8-delayed", "fp8-current", "fp8-blockwise"):
        planner = _planner(compute_precision=name)
        lc = layer_compute(planner.job, batch, planner.cluster.system.processor)
        seconds[name] = float(lc.fwd_quantise[0] + lc.bwd_quantise[0])
    assert seconds["fp8-delayed"] < seconds["fp8-blockwise"] < seconds["fp8-current"]
    blackwell = (
        _planner(hardware="dgx-b200", compute_precision="mxfp8"),
        _planner(hardware="dgx-b200", compute_precision="nvfp4"),
    )
    mx, nv = (layer_compute(p.job, batch, p.cluster.system.processor) for p in blackwell)
    assert nv.bwd_quantise[0] > mx.bwd_quantise[0]  # the Hadamard pass over the weight gradient's inputs
    assert nv.fwd_gemm[0] < mx.fwd_gemm[0]  # FP4 peak, though 10/62 of the layers stay BF16


def test_fp8_memory_items(bf16_and_fp8):
    bf16, fp8 = bf16_and_fp8
    low, high = _evaluate(fp8).memory, _evaluate(bf16).memory
    assert high["quantised weights"][0] == 0 and low["quantised weights"][0] > 0
    # cached FP8 copies, row-wise and transposed: 2 bytes per linear weight on the rank
    params_on_rank = high["parameters"][0] / 2
    assert 0.9 * params_on_rank * 2 < low["quantised weights"][0] < 2 * params_on_rank * 1.0001
    assert low["activations"][0] < 0.85 * high["activations"][0]  # linear inputs kept in FP8
    gathered = _evaluate(_planner(compute_precision="fp8-delayed", fp8_param_gather=True)).memory
    assert gathered["parameters"][0] == pytest.approx(high["parameters"][0] / 2)  # FP8 primary weights
    assert gathered["quantised weights"][0] == pytest.approx(low["quantised weights"][0] / 2)  # no second copy
    assert gathered["optimizer"][0] == high["optimizer"][0]  # the fp32 master copy stays


@pytest.mark.parametrize("zero", [1, 3])
def test_fp8_param_gather_halves_the_parameter_gathers(zero):
    layout = replace(LAYOUT, zero=zero)
    plain = _evaluate(_planner(compute_precision="fp8-delayed"), layout).comm
    halved = _evaluate(_planner(compute_precision="fp8-delayed", fp8_param_gather=True), layout).comm
    if zero == 1:
        assert halved.dp.param_gather[0] < plain.dp.param_gather[0]
        gather_sent = plain.dp.sent_per_step[0] - halved.dp.sent_per_step[0]
        assert gather_sent > 0
    else:
        assert halved.zero3.fwd[0] < plain.zero3.fwd[0]
        # per layer pass: gather forward, gather + reduce-scatter backward; the gathers halve
        assert halved.zero3.sent_per_step[0] < plain.zero3.sent_per_step[0]
    assert halved.bytes_per_step["tp"][0] == plain.bytes_per_step["tp"][0]  # activations are sent in BF16


@pytest.mark.parametrize(
    "hardware, precisions",
    [
        ("dgx-h100", ("fp8-delayed", "fp8-current", "fp8-blockwise")),
        ("h200", ("fp8-delayed", "fp8-blockwise")),
        ("dgx-b200", ("fp8-delayed", "mxfp8", "nvfp4")),
        ("gb200-nvl72", ("mxfp8", "nvfp4")),
        ("gb300-nvl72", ("mxfp8", "nvfp4")),
    ],
)
def test_every_modern_system_takes_its_recipes(hardware, precisions):
    for precision in precisions:
        planner = build_planner(
            PlanSpec(
                model="llama3-8b",
                gpus=72 if "nvl72" in hardware else 8,
                global_batch=144,
                seq_len=4096,
                hardware=hardware,
                compute_precision=precision,
            )
        )
        assert planner.job.compute is RECIPES[precision]
        assert np.isfinite(_evaluate(planner, Layout(dp=planner.cluster.gpus, zero=1)).step_s[0])


def _plan(*argv):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "plan",
            "--model",
            "llama3-8b",
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
            "--gpus",
            "8",
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_plan_json_names_precision_recipe_and_bf16_layers():
    run = _plan("--hardware", "dgx-b200", "--compute-precision", "nvfp4", "--fp8-param-gather", "--json", "--top", "1")
    assert run.returncode == 0, run.stderr
    compute = json.loads(run.stdout)["compute"]
    assert compute["compute_precision"] == "nvfp4" and compute["recipe"] == "NVFP4BlockScaling"
    assert {"attention core", "embedding", "output layer", "MoE router"} <= set(compute["bf16"])
    assert compute["bf16_layer_share"] == pytest.approx(10 / 62) and "arXiv:2509.25149" in compute["bf16_layer_source"]
    assert compute["gemm_peak_flops"] == 9e15 and compute["fp8_param_gather"] is True
    assert compute["bytes_per_param_variant"].startswith("bf16 mixed precision")
    # B200 has an FP8 factor fitted on the scorecard's calibration half, none for FP4: it says so
    assert compute["quantised_gemm_efficiency"] == 1.0 and compute["quantised_gemm_efficiency_source"].startswith(
        "not fitted"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--hardware", "dgx-a100", "--compute-precision", "fp8-delayed"],
            "A100 SXM4 80GB (compute capability 8.0) cannot run fp8-delayed",
        ),
        (["--hardware", "dgx-h100", "--compute-precision", "nvfp4"], "(compute capability 9.0) cannot run nvfp4"),
        (["--hardware", "h200", "--compute-precision", "mxfp8"], "cannot run mxfp8"),
        (["--fp8-param-gather"], "--fp8-param-gather needs a quantised --compute-precision"),
    ],
)
def test_a_recipe_the_gpu_cannot_run_is_one_line_exit_2(argv, message):
    run = _plan(*argv)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], run.stderr


def test_the_quantised_gemm_factor_scales_only_its_own_formats_gemms():
    """quantised_gemm_efficiency (fitted per GPU on the scorecard's calibration half) multiplies the GEMM
    curve of the format it names: FP8 GEMMs slow by 1/factor, BF16 GEMMs and FP4 untouched."""
    from commbench.modeling.hardware import load_processor, processor_from_json
    from commbench.modeling.kernels import gemm_seconds

    gb200 = load_processor("gb200")
    plain = replace(gb200, quantised_gemm_efficiency=())
    halved = replace(gb200, quantised_gemm_efficiency=(("fp8", 0.5),))
    shape = (16384, 8192, 8192)  # on the curve's plateau
    fp8 = [float(gemm_seconds(p.for_recipe(RECIPES["mxfp8"]), *shape)) for p in (plain, halved)]
    assert fp8[1] / fp8[0] == pytest.approx(2.0, rel=1e-6)
    for name in ("bf16", "nvfp4"):
        times = [float(gemm_seconds(p.for_recipe(RECIPES[name]), *shape)) for p in (plain, halved)]
        assert times[0] == times[1]
    raw = {
        "name": "x",
        "peak_flops_bf16": {"value": 1e15, "source": "s"},
        "memory_bytes": {"value": 1e10, "source": "s"},
        "memory_bandwidth_bytes_per_s": {"value": 1e12, "source": "s"},
        "gemm_efficiency": {"value": [[1e6, 0.1], [1e12, 0.8]], "source": "s"},
        "attention_efficiency": {"value": 0.5, "source": "s"},
        "quantised_gemm_efficiency": {"value": {"fp8": 3.0}, "source": "s"},
    }
    with pytest.raises(ValueError, match=r"quantised_gemm_efficiency\['fp8'\] must be in \(0, 2\]"):
        processor_from_json(raw)
