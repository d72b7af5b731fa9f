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
    added = layer("megatron-core", costly).forward[0] - layer("megatron-core", replace(H100, kernel_overhead_s=0.0)).forward[0]
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
    assert main(["plan", "--model", "llama2-7b", "--gpus", "8", "--global-batch", "8", "--seq-len", "2048",
                 "--layout", "dp=8,mbs=1,zero=3", "--execution", "torch-fsdp", "--json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["execution"] == "torch-fsdp"
