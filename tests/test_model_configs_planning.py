"""Real configs through the planner: MLA's attention FLOPs in `plan --json`, sliding windows priced
by the window, what tensor and context parallelism do with MLA, and the parameter lines of `plan`."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from commbench.modeling.compute import layer_compute
from commbench.modeling.hardware import load_system
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import Layout, LayoutBatch
from commbench.modeling.memory import stage_parameters
from commbench.modeling.model_config import read_config

REAL = Path(__file__).parent / "fixtures" / "models" / "real"


def plan_json(*args):
    out = subprocess.run(
        [sys.executable, "-m", "commbench", "plan", *args, "--json"], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def test_deepseek_v3_attention_flops_per_token_match_a_hand_calculation():
    cfg = json.loads((REAL / "deepseek-v3" / "config.json").read_text())
    seq = 4096
    heads, layers, h = cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["hidden_size"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]  # 192: scores use the no-position and rotary parts
    v = cfg["v_head_dim"]  # 128: values are narrower than queries and keys
    # causal: on average a query scores s/2 keys; QK^T is 2*qk FLOPs per key and head, AV 2*v
    scores = layers * heads * (2 * qk + 2 * v) * seq / 2
    q_lora, kv_lora, rope = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    weights = (
        h * q_lora
        + q_lora * heads * qk  # queries: down to the latent, up to every head
        + h * (kv_lora + rope)
        + kv_lora * heads * (cfg["qk_nope_head_dim"] + v)  # keys and values
        + heads * v * h
    )  # output projection
    figures = plan_json(
        "--model",
        str(REAL / "deepseek-v3"),
        "--gpus",
        "256",
        "--global-batch",
        "512",
        "--seq-len",
        str(seq),
        "--layout",
        "tp=8,pp=16,dp=2,ep=2,zero=1",
    )["model_figures"]
    assert figures["attention_flops_per_token"]["scores"] == pytest.approx(scores, rel=1e-12)
    assert figures["attention_flops_per_token"]["projections"] == pytest.approx(2 * layers * weights, rel=1e-12)
    assert figures["total_params"] == 671_026_404_352 and figures["active_params"] == 37_552_282_624


def _attention_seconds(model, seq_len):
    job = TrainingJob(model, seq_len, 8)
    batch = LayoutBatch.from_layouts([Layout(dp=8)])
    return float(layer_compute(job, batch, load_system("dgx-h100").processor).fwd_attention[0])


def test_sliding_window_prices_attention_by_the_window_at_32k():
    mistral = read_config(REAL / "mistral-7b-v0.1" / "config.json")
    seq, window = 32768, mistral.sliding_window
    full = replace(mistral, sliding_window=None, windowed_layers=0)
    ratio = _attention_seconds(mistral, seq) / _attention_seconds(full, seq)
    # each query sees min(position, w) keys: s*w - w^2/2 pairs against s^2/2 without the window
    assert ratio == pytest.approx(2 * window / seq - (window / seq) ** 2, rel=1e-9)
    assert ratio < 0.25


def test_gemma2_windows_every_other_layer():
    gemma = read_config(REAL / "gemma-2-9b-it" / "config.json")
    seq, w = 32768, 4096
    full = replace(gemma, sliding_window=None, windowed_layers=0)
    expected = (21 * (seq * w - w * w / 2) + 21 * seq * seq / 2) / (42 * seq * seq / 2)
    assert _attention_seconds(gemma, seq) / _attention_seconds(full, seq) == pytest.approx(expected, rel=1e-9)


def test_mla_tensor_parallel_keeps_the_latent_projections_whole_and_cp_sends_per_head_keys_and_values():
    v3 = read_config(REAL / "deepseek-v3" / "config.json")
    job = TrainingJob(v3, 4096, 64)
    one, eight = (stage_parameters(job, LayoutBatch.from_layouts([Layout(tp=t, dp=64 // t)]))[0][0] for t in (1, 8))
    whole = v3.layers * (7168 * 1536 + 1536 + 7168 * (512 + 64) + 512)  # q_a, its norm, kv_a, its norm
    assert eight == pytest.approx((one - whole) / 8 + whole, rel=1e-12)
    assert v3.kv_dim + v3.v_dim == 128 * (192 + 128)  # what the CP ring passes per token, not 2 x 128 x 128


def test_plan_prints_total_and_active_parameters_and_names_the_model_by_its_folder():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "plan",
            "--model",
            str(REAL / "mixtral-8x7b"),
            "--gpus",
            "16",
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
            "--layout",
            "tp=8,dp=2,ep=2,zero=1",
        ],
        capture_output=True,
        text=True,
    ).stdout
    assert "parameters: 46,702,792,704 total, 12,879,925,248 active per token" in out
    assert "model: mixtral-8x7b:" in out
    named = plan_json(
        "--model",
        str(REAL / "llava-1.5-7b"),
        "--name",
        "llava",
        "--gpus",
        "8",
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--layout",
        "dp=8,zero=1",
    )
    assert named["model_figures"]["total_params"] == 6_738_939_904
    assert any(w.startswith("vision tower (clip_vision_model)") for w in named["warnings"])


def test_refused_config_is_one_line_and_exit_2():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "commbench",
            "plan",
            "--model",
            str(REAL / "jamba-v0.1"),
            "--gpus",
            "8",
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "jamba-v0.1: Mamba layers (Jamba, 28 of 32 layers) are not modelled" in run.stderr
