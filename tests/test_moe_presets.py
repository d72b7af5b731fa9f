"""The MoE presets are exactly what commbench's config reader makes of their published config.json
(tests/fixtures/models/moe_presets.json, with sources), and count the parameters their publishers give."""

import json
from pathlib import Path

import pytest

from commbench.modeling.model_config import spec_from_config
from commbench.modeling.models import PRESETS

CONFIGS = json.loads((Path(__file__).parent / "fixtures" / "models" / "moe_presets.json").read_text())["models"]
# (total, active) in billions as the publishers state them (model cards / papers), and the rounding
# resolution: DeepSeek-V3 671B/37B (arXiv:2412.19437), Qwen3 235B/22B and 30.5B/3.3B (model cards),
# Mixtral 8x22B 141B/39B (Mistral's announcement), Llama 4 Maverick 400B/17B (Meta's model card),
# gpt-oss-120b 116.8B/5.1B and gpt-oss-20b 20.9B/3.6B (OpenAI's model card). DeepSeek and OpenAI leave the input embedding
# out of the active count.
PUBLISHED = {
    "deepseek-v3": (671, 37, 0.5, 1.0, True),
    "qwen3-235b-a22b": (235, 22, 0.5, 0.5, False),
    "qwen3-30b-a3b": (30.5, 3.3, 0.05, 0.1, False),
    "mixtral-8x22b": (141, 39, 0.5, 0.5, False),
    "llama4-maverick": (400, 17, 1.0, 0.5, False),
    "gpt-oss-120b": (116.8, 5.1, 0.05, 0.05, True),
    "gpt-oss-20b": (20.91, 3.61, 0.01, 0.01, True),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_preset_is_its_config(name):
    assert PRESETS[name] == spec_from_config(CONFIGS[name]["config"], name)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_counts_the_published_parameters(name):
    total, active, total_step, active_step, without_embedding = PUBLISHED[name]
    spec = PRESETS[name]
    counted_active = spec.active_params - (spec.embedding_params if without_embedding else 0)
    assert abs(spec.total_params / 1e9 - total) <= total_step
    assert abs(counted_active / 1e9 - active) <= active_step


def test_layer_placement_keys_of_each_family():
    """first_k_dense_replace (DeepSeek), interleave_moe_layer_step (Llama 4), decoder_sparse_step and
    mlp_only_layers (Qwen-MoE), a Megatron-style moe_layer_freq list, MTP modules."""
    assert (PRESETS["deepseek-v3"].dense_layers, PRESETS["deepseek-v3"].mtp_layers) == (3, 1)
    assert PRESETS["llama4-maverick"].moe_layers == 24
    qwen = dict(CONFIGS["qwen3-30b-a3b"]["config"])
    assert spec_from_config({**qwen, "decoder_sparse_step": 2}, "q").moe_layers == 24
    assert spec_from_config({**qwen, "mlp_only_layers": [0, 1, 47]}, "q").moe_layers == 45
    assert spec_from_config({**qwen, "moe_layer_freq": [0] * 4 + [1] * 44}, "q").moe_layers == 44
    deepseek = dict(CONFIGS["deepseek-v3"]["config"])
    assert spec_from_config({**deepseek, "moe_layer_freq": 2}, "d").moe_layers == 29  # i % 2 == 0 from layer 3 on
