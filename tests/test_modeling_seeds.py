"""The seed documents' figures come out of the model exactly."""

import re
import subprocess
import sys
from argparse import Namespace

import pytest

from commbench.commands import estimate
from commbench.modeling.compute import SECONDS_PER_YEAR, training_flops, training_seconds
from commbench.modeling.job import PRECISIONS
from commbench.modeling.memory import static_ledger
from commbench.modeling.models import PRESETS


def ledger_gb(params, variant="16"):
    ledger = static_ledger(params, PRECISIONS[variant])
    return [item["bytes"] / 1e9 for item in ledger["items"].values()], ledger["total_bytes"] / 1e9


@pytest.mark.parametrize(
    "params, variant, items, total",
    [
        (7e9, "16", [14, 14, 84], 112),
        (70e9, "16", [140, 140, 840], 1120),
        (70e9, "12", [140, 140, 560], 840),
        (405e9, "16", [810, 810, 4860], 6480),
    ],
)
def test_static_memory_ledger(params, variant, items, total):
    got_items, got_total = ledger_gb(params, variant)
    assert got_items == pytest.approx(items, abs=1e-9)
    assert got_total == pytest.approx(total, abs=1e-9)


def test_sixteen_bytes_breakdown_names_the_optimizer_parts():
    ledger = static_ledger(1, PRECISIONS["16"])
    assert ledger["bytes_per_param"] == 16
    assert {k: v["bytes_per_param"] for k, v in ledger["optimizer_parts"].items()} == {
        "fp32 master": 4,
        "Adam m": 4,
        "Adam v": 4,
    }


def test_compute_budget_70b_on_1e12_tokens():
    flops = training_flops(70e9, 1e12)
    assert flops == pytest.approx(4.2e23)
    one = training_seconds(flops, 1, 1e15, 0.5)
    assert one == pytest.approx(8.4e8)
    assert round(one / SECONDS_PER_YEAR, 1) == 26.6
    days = training_seconds(flops, 1024, 1e15, 0.5) / 86400
    assert 9 <= days < 10  # "about 9 days"


def test_estimate_command_prints_the_seed_ledger(capsys):
    args = Namespace(params=7e9, tokens=1e12, gpu=None, gpus=1024, mfu=0.5, bytes="16", json=False)
    assert estimate.main(args) == 0
    out = capsys.readouterr().out
    assert "14 + 14 + 84 = 112 GB" in out
    assert re.search(r"total\s*│\s*16\s*│\s*112\s*│", out)  # the table's total row: 16 B/param, 112 GB
    args.params = 70e9
    estimate.main(args)
    out = capsys.readouterr().out
    assert "140 + 140 + 840 = 1120 GB" in out
    assert "4.2e23 FLOPs" in out
    assert "26.6 years" in out


def test_estimate_json_and_twelve_byte_variant():
    args = Namespace(params=70e9, tokens=1e12, gpu=None, gpus=1024, mfu=0.5, bytes="12", json=True)
    report = estimate.build_report(args)
    assert report["memory"]["total_bytes"] == pytest.approx(840e9)
    assert report["memory"]["bytes_per_param"] == 12
    assert report["flops"] == pytest.approx(4.2e23)


def test_175b_needs_at_least_44_gpus_at_20_bytes(capsys):
    # the seed's "16-20 bytes/param, 175B -> ~3.5 TB, at least 44 H100s" uses the upper bound;
    # the itemised 16 B/param ledger (2.8 TB) needs 35
    args = Namespace(params=175e9, tokens=1e12, gpu="h100", gpus=1, mfu=0.5, bytes="16", json=False)
    report = estimate.build_report(args)
    assert report["seed_upper_bound"] == {"bytes_per_param": 20, "min_gpus": 44}
    assert report["min_gpus_for_static_state"] == 35
    estimate.main(args)
    out = " ".join(capsys.readouterr().out.split())
    assert "at least 35 x 80 GB GPUs" in out
    assert "upper bound of 20 B/param: at least 44 GPUs" in out


@pytest.mark.parametrize(
    "name, billions",
    [
        ("llama2-7b", 6.74),
        ("llama2-13b", 13.02),
        ("llama2-70b", 68.98),
        ("llama3-8b", 8.03),
        ("llama3-70b", 70.55),
        ("llama3.1-405b", 405.85),
        ("gpt3-175b", 174.57),
        ("mixtral-8x7b", 46.70),
        ("deepseek-moe-16b", 16.38),
        ("llama3.2-1b", 1.24),
    ],
)
def test_preset_parameter_counts_match_published_sizes(name, billions):
    assert PRESETS[name].total_params / 1e9 == pytest.approx(billions, abs=0.01)


def test_mixtral_active_parameters():
    assert PRESETS["mixtral-8x7b"].active_params / 1e9 == pytest.approx(12.88, abs=0.01)


def test_modeling_never_imports_torch():
    code = (
        "import sys; import commbench.modeling.planner, commbench.modeling.measured, "
        "commbench.commands.plan, commbench.commands.estimate; "
        "from commbench.modeling import models, hardware, memory, compute, comm, network, cluster, step, schedule; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_hugging_face_configs_load(tmp_path):
    import json

    from commbench.modeling.model_config import load_model

    mixtral = {
        "model_type": "mixtral",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    }
    (tmp_path / "mixtral").mkdir()
    (tmp_path / "mixtral" / "config.json").write_text(json.dumps(mixtral))
    assert load_model(str(tmp_path / "mixtral")).total_params == PRESETS["mixtral-8x7b"].total_params
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
    (tmp_path / "gpt2.json").write_text(json.dumps(gpt2))
    spec = load_model(str(tmp_path / "gpt2.json"))
    assert spec.mlp == "gelu" and spec.tied_embeddings and spec.ffn_hidden == 3072
    # GPT-2 small: 124,439,808 with its learned positions, biases and LayerNorm biases (OpenAI's "124M")
    assert spec.total_params == 124_439_808
