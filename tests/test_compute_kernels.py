"""The kernel-by-kernel compute model (modeling/kernels.py, compute.py): wave quantisation, the
unfused attention path, fusion, per-kernel overhead, and the FLOPs-only path a processor without
kernel figures keeps."""

from dataclasses import replace

import numpy as np
import pytest

from commbench.modeling.compute import kernels_per_layer, layer_compute
from commbench.modeling.hardware import load_processor
from commbench.modeling.job import EXECUTIONS, TrainingJob
from commbench.modeling.kernels import gemm_seconds, wave_factor
from commbench.modeling.layout import LayoutBatch, parse_layout
from commbench.modeling.models import PRESETS

H100 = load_processor("h100")
MODEL = PRESETS["llama2-7b"]


def layer(execution: str, proc=H100, layout="tp=2,dp=4,mbs=1", seq=4096):
    job = TrainingJob(MODEL, seq, 8, execution=EXECUTIONS[execution])
    return layer_compute(job, LayoutBatch.from_layouts([parse_layout(layout, 8)]), proc)


def test_one_tile_more_than_a_wave_costs_a_second_wave():
    tile_m, tile_n = H100.gemm_tile
    full = tile_m * H100.sm_count  # M rows of tiles, one column: exactly one wave
    assert wave_factor(H100, full, tile_n) == 1.0
    one_more = float(gemm_seconds(H100, full + tile_m, tile_n, 8192))
    one_wave = float(gemm_seconds(H100, full, tile_n, 8192))
    # 133 tiles on 132 SMs: two waves for 1/132 more work
    assert one_more / one_wave == pytest.approx(2.0, rel=0.1)


def test_a_processor_without_kernel_figures_prices_gemms_by_flops_alone():
    plain = replace(H100, sm_count=None, gemm_tile=None, gemm_surface=())
    m, n, k = np.array([128.0, 4096.0]), 4096.0, 4096.0
    assert np.allclose(gemm_seconds(plain, m, n, k), plain.gemm_time(2 * m * n * k))


def test_unfused_attention_costs_more_than_flash_and_grows_with_the_square_of_the_sequence():
    flash, unfused = layer("megatron-core"), layer("megatron-2021")
    assert unfused.fwd_attention[0] > 2 * flash.fwd_attention[0] * H100.attention_rate("flash2")[0] / 0.9
    short, long = layer("megatron-2021", seq=2048), layer("megatron-2021", seq=8192)
    assert long.fwd_attention[0] / short.fwd_attention[0] == pytest.approx(16, rel=0.2)


def test_unfused_elementwise_kernels_move_more_bytes_and_launch_more_kernels():
    fused, eager = EXECUTIONS["megatron-core"], EXECUTIONS["torch-fsdp"]
    assert kernels_per_layer(MODEL, eager) > kernels_per_layer(MODEL, fused)
    assert layer("torch-fsdp").fwd_elementwise[0] > layer("megatron-core").fwd_elementwise[0]


def test_kernel_overhead_is_kernels_times_the_per_kernel_cost():
    costly = replace(H100, kernel_overhead_s=10e-6)
    added = (
        layer("megatron-core", costly).forward[0]
        - layer("megatron-core", replace(H100, kernel_overhead_s=0.0)).forward[0]
    )
    assert added == pytest.approx(kernels_per_layer(MODEL, EXECUTIONS["megatron-core"]) * 10e-6)


def test_an_execution_gemm_factor_slows_only_that_executions_gemms():
    assert dict(H100.execution_gemm_efficiency)["torch-fsdp"] < 1.0
    fsdp = layer("torch-fsdp")
    unscaled = layer("torch-fsdp", replace(H100, execution_gemm_efficiency=()))
    assert fsdp.fwd_gemm[0] > unscaled.fwd_gemm[0]
    assert fsdp.fwd_attention[0] == unscaled.fwd_attention[0]


def test_plan_help_lists_every_execution_preset_with_its_assumptions_and_json_names_the_one_used(capsys):
    from commbench.cli import main

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name, execution in EXECUTIONS.items():
        if name == execution.name:  # aliases (megatron) are named in the heading
            assert f"{name}: {' '.join(execution.assumes.split())}" in help_text
    assert (
        main(
            [
                "plan",
                "--model",
                "llama2-7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--seq-len",
                "2048",
                "--layout",
                "dp=8,mbs=1,zero=3",
                "--execution",
                "torch-fsdp",
                "--json",
            ]
        )
        == 0
    )
    import json

    assert json.loads(capsys.readouterr().out)["execution"] == "torch-fsdp"


def fp32_cpu(surface: dict, memory_bandwidth: float = 1e10):
    """A CPU-like processor with a measured surface (figures made up for the arithmetic)."""
    from commbench.modeling.hardware import Processor

    return Processor(
        "cpu",
        peak_flops=1e11,
        memory_bytes=1e10,
        memory_bandwidth=memory_bandwidth,
        gemm_curve=((1e6, 0.5), (1e10, 0.5)),
        attention_efficiency=0.5,
        sm_count=1,
        gemm_surface=tuple((dtype, tuple(map(tuple, points))) for dtype, points in surface.items()),
    )


def test_a_shape_the_surface_measured_in_the_jobs_dtype_is_priced_at_its_own_fraction():
    # two shapes of equal FLOPs measured at 0.8 and 0.2: the curve by FLOPs cannot tell them apart
    proc = fp32_cpu({"fp32": [[256, 1024, 512, 0.8], [1024, 512, 256, 0.2]]})
    fast = float(gemm_seconds(proc.for_dtype("fp32"), 256, 1024, 512))
    slow = float(gemm_seconds(proc.for_dtype("fp32"), 1024, 512, 256))
    assert fast == pytest.approx(2 * 256 * 1024 * 512 / (1e11 * 0.8))
    assert slow == pytest.approx(4 * fast)
    # a shape it did not measure: the surface's curve by FLOPs (both points at these FLOPs: 0.2..0.8)
    other = float(gemm_seconds(proc.for_dtype("fp32"), 512, 512, 512))
    assert fast < other < slow
    # a bf16 job does not read the fp32 points: the processor's curve, 0.5 everywhere
    assert float(gemm_seconds(proc, 256, 1024, 512)) == pytest.approx(2 * 256 * 1024 * 512 / (1e11 * 0.5))


def test_an_fp32_job_reads_the_fp32_surface_and_moves_4_byte_elements():
    from commbench.modeling.job import PRECISIONS

    proc = fp32_cpu({"fp32": [[8192, 8192, 8192, 0.05]]})  # the fp32 surface: 0.05 at every FLOPs
    job = dict(model=MODEL, seq_len=2048, global_batch=4, execution=EXECUTIONS["torch-eager"])
    batch = LayoutBatch.from_layouts([parse_layout("dp=1,mbs=4", 1)])
    fp32 = layer_compute(TrainingJob(**job, precision=PRECISIONS["fp32"]), batch, proc)
    bf16 = layer_compute(TrainingJob(**job), batch, proc)  # no bf16 points: the curve's 0.5
    assert PRECISIONS["fp32"].compute_dtype == "fp32" and PRECISIONS["16"].compute_dtype == "bf16"
    assert fp32.fwd_gemm[0] == pytest.approx(10 * bf16.fwd_gemm[0])
    # a memory-bound GEMM moves its three matrices: 4-byte elements in fp32, 2-byte in bf16
    tiny = fp32_cpu({"fp32": [[4, 4, 4, 1.0]]}, memory_bandwidth=1.0)
    assert float(gemm_seconds(tiny.for_dtype("fp32"), 4, 4, 4)) == pytest.approx(4 * 48)
    assert float(gemm_seconds(tiny, 4, 4, 4)) == pytest.approx(2 * 48)


def test_eager_autograd_ops_are_priced_forward_and_backward_only_where_the_execution_runs_them():
    ops = (3e-6, 5e-6)
    costly, free = replace(H100, autograd_op_s=ops), replace(H100, autograd_op_s=(0.0, 0.0))
    eager, base = layer("torch-eager", costly), layer("torch-eager", free)
    kernels = kernels_per_layer(MODEL, EXECUTIONS["torch-eager"])
    assert eager.forward[0] - base.forward[0] + base.fwd_kernels[0] == pytest.approx(kernels * ops[0])
    assert eager.bwd_kernels[0] == pytest.approx(kernels * ops[1])
    # an execution whose host runs ahead of the device (GPU frameworks) keeps the per-kernel overhead
    assert layer("megatron-core", costly).forward[0] == layer("megatron-core", free).forward[0]
    assert layer("torch-fsdp", costly).backward[0] == layer("torch-fsdp", free).backward[0]
