"""bench/scorecard_moe.py: the MoE rows split by the scorecard's position rule, each with its source
commit, priced at their own layout (a row without a hardware preset is listed, not scored)."""

import csv
import dataclasses
import importlib.util
import statistics
import sys
from pathlib import Path

from commbench.modeling.hardware import load_processor

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _module():
    spec = importlib.util.spec_from_file_location("scorecard_moe", BENCH / "scorecard_moe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCORECARD = _module()


def test_rows_split_by_position_and_cite_their_commit():
    rows = SCORECARD.load_rows()
    half = SCORECARD.halves(rows)
    ordered = sorted(rows, key=lambda r: (r["gpus"], r["id"]))
    assert [half[r["id"]] for r in ordered[:4]] == ["held out", "calibration", "held out", "calibration"]
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(len(r["commit"]) == 10 and r["container"] for r in rows)


def test_a_published_row_is_priced_at_its_layout_b300_on_its_preset_and_graphs_by_recipe():
    rows = SCORECARD.load_rows()
    h100 = next(r for r in rows if r["system"] == "DGX-H100" and r["model"] == "gpt-oss-120b")
    layout = SCORECARD.layout_of(h100)
    assert (layout.tp, layout.pp, layout.ep, layout.etp) == (h100["tp"], h100["pp"], h100["ep"], 1)
    assert SCORECARD.predict(h100)["step_s"] > 0
    b300 = next(r for r in rows if r["system"] == "DGX-B300")
    assert SCORECARD.spec_of(b300).hardware == "dgx-b300" and SCORECARD.predict(b300)["step_s"] > 0
    # full-iteration CUDA graphs from the 26.06 recipes on, MXFP8 on GB200/GB300 (and Qwen3 on B300)
    graphed = {r["id"] for r in rows if SCORECARD.full_iteration_graph(r)}
    assert "mbridge-gb200-qwen3-30b-a3b-8g-mxfp8-tp1pp1cp1ep8vp1-mbs4-gbs512-26.06" in graphed
    assert "mbridge-gb200-qwen3-30b-a3b-8g-mxfp8-tp1pp1cp1ep8vp1-mbs4-gbs512-26.04" not in graphed
    assert "mbridge-b300-qwen3-30b-a3b-8g-mxfp8-tp1pp1cp1ep8vp1-mbs8-gbs512-26.06" in graphed
    assert not any(word in name for name in graphed for word in ("-bf16-", "-h100-", "-b200-"))
    assert "mbridge-b300-deepseek-v3-256g-mxfp8-tp1pp8cp1ep8vp1-mbs2-gbs4096-26.06" not in graphed
    assert SCORECARD.published_step(h100) == h100["global_batch"] * h100["seq_len"] / (
        h100["tokens_per_s_per_gpu"] * h100["gpus"]
    )


def test_every_row_reads_its_recipe_and_a_deepep_recipe_prices_flex():
    rows = SCORECARD.load_rows()
    with open(SCORECARD.RECIPES, newline="", encoding="utf-8") as handle:
        recipes = {r["id"]: r for r in csv.DictReader(handle)}
    assert set(recipes) == {r["id"] for r in rows}
    h100 = next(
        r for r in rows if r["id"] == "mbridge-h100-qwen3-235b-a22b-256g-fp8-tp2pp8cp1ep32vp4-mbs1-gbs8192-26.02"
    )
    assert (
        recipes[h100["id"]]["moe_flex_dispatcher_backend"] == "deepep" and recipes[h100["id"]]["moe_a2a_overlap"] == "1"
    )
    spec = SCORECARD.spec_of(h100)
    assert (spec.dispatcher, spec.moe_overlap) == ("flex", "1f1b-a2a")
    unmatched = [r for r in rows if not recipes[r["id"]]["config"]]
    assert all(SCORECARD.spec_of(r).dispatcher == "alltoall" for r in unmatched)


def test_a_deepseek_row_takes_its_recipes_pipeline_layout_with_the_mtp_layer_beside_the_loss():
    """DeepSeek-V3's recipes name an explicit split (set_deepseek_v3_pipeline_model_parallel_layout): at
    pp=16 the embedding and 4 layers first, 4 on each middle stage, 1 layer + MTP + loss last. The even
    split would put 3 layers, the MTP module and the output head on the last stage, which then paces."""
    rows = {r["id"]: r for r in SCORECARD.load_rows()}
    row = rows["mbridge-b200-deepseek-v3-256g-mxfp8-tp1pp16cp1ep8vp1-mbs1-gbs4096-26.02"]
    layout = SCORECARD.layout_of(row)
    assert layout.pp_layout.endswith("|tmL") and layout.stage_layer_counts() == [4] * 15 + [1]
    planner = SCORECARD.build_planner(SCORECARD.spec_of(row))
    recipe, _ = planner.evaluate_layout(layout)
    even, _ = planner.evaluate_layout(dataclasses.replace(layout, pp_layout=""))
    assert recipe.step_s < 0.85 * even.step_s  # the MTP module and the head no longer pace a 4-layer stage
    assert all(not rows[i]["pp_layout"] for i in rows if "gpt-oss" in i or "qwen3" in i)


def test_the_b300_preset_prices_its_kernels_as_the_same_blackwell_ultra_gpu_in_gb300():
    b300, gb300 = load_processor("b300"), load_processor("gb300")
    assert b300.quantised_gemm_efficiency == gb300.quantised_gemm_efficiency != ()
    assert (b300.sm_count, b300.gemm_tile, b300.attention_rates) == (
        gb300.sm_count,
        gb300.gemm_tile,
        gb300.attention_rates,
    )


def test_each_row_is_priced_with_its_models_bias_dropout_and_loss_fusions_from_the_recipe():
    # bench/moe_recipes.py reads them at the row's commit: GPT-OSS's bridge sets bias_dropout_fusion
    # False, DeepSeek-V3's True, Qwen3's leaves Megatron-Core's default (False); every recipe fuses the loss
    rows = {r["id"]: r for r in SCORECARD.load_rows()}
    gpt_oss = rows["mbridge-b200-gpt-oss-120b-64g-bf16-tp1pp1cp1ep8vp1-mbs4-gbs1280-26.04"]
    deepseek = rows["mbridge-b200-deepseek-v3-256g-mxfp8-tp1pp16cp1ep8vp1-mbs1-gbs4096-26.02"]
    assert (gpt_oss["bias_dropout_fusion"], deepseek["bias_dropout_fusion"]) == ("0", "1")
    execution = SCORECARD.row_planner(gpt_oss).job.execution
    assert not execution.fused_norm_residual and execution.loss_bytes == SCORECARD.FUSED_LOSS_BYTES
    assert SCORECARD.row_planner(deepseek).job.execution.fused_norm_residual
    # the fusions reach the price: the preset's own (fused norm, unfused loss) gives another step
    preset = {**gpt_oss, "bias_dropout_fusion": "", "cross_entropy_loss_fusion": ""}
    assert SCORECARD.predict(gpt_oss)["step_s"] != SCORECARD.predict(preset)["step_s"]


def test_mlperf_rows_carry_the_rules_split_and_their_logged_step_times():
    """The MLPerf v6.0 MoE rows: their own source, the split by the position rule stored with them (written
    before any prediction), the step time the median of the entered log windows' medians."""
    rows = SCORECARD.load_mlperf_rows()
    assert {r["id"]: r["half"] for r in rows} == SCORECARD.halves(rows)
    assert {r["source"] for r in rows} == {"mlperf-training-v6.0-moe"}
    assert all("eabf23a07b2a0c60a289ff871dc3a46fff0d0421" in r["reference"] for r in rows)
    spec = importlib.util.spec_from_file_location("mlperf_rows", BENCH / "mlperf_rows.py")
    mlperf = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mlperf_rows", mlperf)  # its dataclasses look their module up
    spec.loader.exec_module(mlperf)
    windows = mlperf.step_windows()
    for row in rows:
        system = row["reference"].split("NVIDIA/results/", 1)[1].split("/result_", 1)[0]
        medians = [
            statistics.median(v for _, v in windows[n]) for n in windows if n.startswith(f"NVIDIA/results/{system}/")
        ]
        assert medians and abs(statistics.median(medians) / row["step_s"] - 1) < 1e-3
        assert row["global_batch"] % (row["gpus"] // (row["tp"] * row["pp"] * row["cp"]) * row["mbs"]) == 0


def test_an_mlperf_row_is_priced_at_its_launch_configs_layout_model_and_graph():
    rows = {r["id"]: r for r in SCORECARD.load_mlperf_rows()}
    gpt = rows["mlperf60-gb300-gpt-oss-20b-mxfp8-512g-theia"]
    layout = SCORECARD.layout_of(gpt)
    assert (layout.tp, layout.cp, layout.ep, layout.etp, layout.dp) == (2, 4, 8, 1, 64)
    planner = SCORECARD.row_planner(gpt)
    assert (planner.job.model.vocab, planner.job.model.layers, planner.job.model.moe.num_experts) == (128256, 24, 32)
    assert SCORECARD.full_iteration_graph(gpt) and SCORECARD.published_step(gpt) == gpt["step_s"]
    gb200 = rows["mlperf60-gb200-gpt-oss-20b-mxfp8-72g-tyche-hsg"]  # TE graphs of attention/router only
    assert not SCORECARD.full_iteration_graph(gb200)
    deepseek = rows["mlperf60-gb200-deepseek-v3-mxfp8-8192g-tyche-hsg"]
    layout = SCORECARD.layout_of(deepseek)
    assert (layout.tp, layout.pp, layout.vpp, layout.ep, layout.etp) == (2, 4, 4, 32, 1)
    assert layout.recompute_modules == "mlp"
    assert layout.stage_layer_counts() == [16, 16, 16, 13]  # Et*4|(t*4|)*14tmL over pp=4 x vp=4
    spec = SCORECARD.spec_of(deepseek)
    assert (spec.dispatcher, spec.moe_overlap, spec.nvlink_domain, spec.cuda_graph) == ("flex", "1f1b-a2a", 64, True)
