"""Real config.json files of published models: each is read to its published parameter counts, or
refused with a line naming what is not modelled (tests/fixtures/models/real/SOURCES.json).

A published figure is checked within 0.5% when it is precise enough for that; a figure too coarse for
0.5% ("2.7B") is checked within its own resolution in a separate test, so the two never blur."""

import json
from pathlib import Path

import pytest

from commbench.errors import UsageError
from commbench.modeling.model_config import read_config

REAL = Path(__file__).parent / "fixtures" / "models" / "real"
CORPUS = json.loads((REAL / "SOURCES.json").read_text())
SOURCES = CORPUS["models"]
MODELLED = sorted(name for name, entry in SOURCES.items() if "total" in entry)
REFUSED = sorted(name for name, entry in SOURCES.items() if "refused_with" in entry)
READ_THIS_SESSION = "read 2026-12-01"


def published_figures(check):
    """(model, 'total' or 'active') for every published figure whose check is `check`."""
    return [
        (name, kind)
        for name in MODELLED
        for kind in ("total", "active")
        if kind in SOURCES[name] and SOURCES[name][kind]["check"] == check
    ]


def modelled_count(name, kind):
    """The reader's count for the figure a publisher gives: total, or active as that publisher counts it."""
    spec = read_config(REAL / name / "config.json")
    assert spec.name == name
    if kind == "total":
        return spec.total_params
    return spec.active_params - spec.embedding_params * SOURCES[name].get("active_excludes_input_embedding", False)


def category_counts():
    """How many figures fall in each (check, reading) category, and how many configs have a total read here at 0.5%."""
    counts = {}
    for check in ("half_percent", "coarse"):
        for name, kind in published_figures(check):
            key = f"{kind} {check}, {SOURCES[name][kind]['read']}"
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def test_corpus_covers_every_file_and_enough_models():
    folders = sorted(p.name for p in REAL.iterdir() if p.is_dir())
    assert folders == sorted(SOURCES)
    assert len(folders) >= 40 and len(REFUSED) >= 3


def test_every_figure_has_a_check_and_says_how_it_was_read():
    for name in MODELLED:
        for kind in ("total", "active"):
            figure = SOURCES[name].get(kind)
            if figure is None:
                continue
            assert figure["check"] in ("half_percent", "coarse"), name
            assert figure["read"] in (READ_THIS_SESSION, "not re-read", "derived"), name
            assert figure["source"], name
            if figure["check"] == "coarse":
                assert figure["rounding"] in ("nearest", "truncated") and figure["resolution"] > 0, name
            else:  # a figure checked at 0.5% has no rounding that could eat the tolerance
                assert "resolution" not in figure, name
    assert CORPUS["category_counts"] == category_counts()


@pytest.mark.parametrize("name, kind", published_figures("half_percent"))
def test_within_half_a_percent_of_the_published_count(name, kind):
    value, published = modelled_count(name, kind), SOURCES[name][kind]["published"]
    assert abs(value - published) <= 0.005 * published, (
        f"{name} {kind}: {value:,} vs published {published:,.0f} ({100 * (value / published - 1):+.2f}%)"
    )


@pytest.mark.parametrize("name, kind", published_figures("coarse"))
def test_published_figure_too_coarse_checked_within_its_resolution(name, kind):
    figure = SOURCES[name][kind]
    value, published, unit = modelled_count(name, kind), figure["published"], figure["resolution"]
    if figure["rounding"] == "truncated":
        assert published <= value < published + unit, (
            f"{name} {kind}: {value:,} not in [{published:,.0f}, +{unit:,.0f})"
        )
    else:
        assert abs(value - published) <= unit / 2, f"{name} {kind}: {value:,} vs {published:,.0f} +- {unit / 2:,.0f}"


@pytest.mark.parametrize("name", REFUSED)
def test_unmodelled_architectures_are_refused_by_name(name):
    with pytest.raises(UsageError) as refusal:
        read_config(REAL / name / "config.json")
    assert str(refusal.value) == f"{name}: {SOURCES[name]['refused_with']}"


@pytest.mark.parametrize(
    "name, kv_heads",
    [
        ("gpt_bigcode-santacoder", 1),
        ("santacoder", 1),
        ("chatglm3-6b", 2),
        ("gemma-2b", 1),
        ("mistral-7b-v0.1", 8),
        ("phi-2-msft", 32),
    ],
)
def test_every_spelling_of_grouped_and_multi_query_attention(name, kv_heads):
    assert read_config(REAL / name / "config.json").kv_heads == kv_heads


@pytest.mark.parametrize(
    "name, mlp, ffn",
    [
        ("phi-2", "gelu", 10240),
        ("phi-2-msft", "gelu", 10240),
        ("starcoder2-7b", "gelu", 18432),
        ("gemma-2b", "swiglu", 16384),
        ("phi-3-small-8k-instruct", "swiglu", 14336),
        ("qwen-7b", "swiglu", 11008),
        ("chatglm3-6b", "swiglu", 13696),
        ("opt-1.3b", "gelu", 8192),
    ],
)
def test_mlp_kind_and_width_come_from_each_architectures_keys(name, mlp, ffn):
    spec = read_config(REAL / name / "config.json")
    assert (spec.mlp, spec.ffn_hidden) == (mlp, ffn)


@pytest.mark.parametrize(
    "name, window, layers",
    [
        ("mistral-7b-v0.1", 4096, 32),
        ("gemma-2-9b-it", 4096, 21),
        ("gemma-3-1b-it", 512, 22),
        ("phi-3-mini-4k-instruct", 2047, 32),
        ("qwen2-72b", None, 0),
        ("mixtral-8x7b", None, 0),
    ],
)
def test_sliding_window_layer_patterns(name, window, layers):
    spec = read_config(REAL / name / "config.json")
    assert (spec.sliding_window if layers else None, spec.windowed_layers) == (window, layers)


def test_defaults_follow_transformers_per_model_type(tmp_path):
    # LLaVA's text_config leaves Llama's sizes and tying to LlamaConfig: 4096 wide, 32 layers, untied
    spec = read_config(REAL / "llava-1.5-7b" / "config.json")
    assert (spec.hidden, spec.layers, spec.ffn_hidden, spec.tied_embeddings) == (4096, 32, 11008, False)
    assert any("vision tower (clip_vision_model)" in note for note in spec.notes)
    for name in ("llama-2-7b", "mixtral-8x7b"):  # LlamaConfig and MixtralConfig default to untied embeddings
        cfg = json.loads((REAL / name / "config.json").read_text())
        del cfg["tie_word_embeddings"]
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(cfg))
        assert (
            read_config(tmp_path / name / "config.json").total_params
            == read_config(REAL / name / "config.json").total_params
        )
    gemma = json.loads((REAL / "gemma-2b" / "config.json").read_text())
    assert "tie_word_embeddings" not in gemma and read_config(REAL / "gemma-2b" / "config.json").tied_embeddings


def test_model_name_is_the_folder_or_the_given_name(tmp_path):
    cfg = json.loads((REAL / "llama-2-7b" / "config.json").read_text())
    cfg["_name_or_path"] = "/home/someone/checkpoints/llama"
    (tmp_path / "my-llama").mkdir()
    (tmp_path / "my-llama" / "config.json").write_text(json.dumps(cfg))
    assert read_config(tmp_path / "my-llama" / "config.json").name == "my-llama"
    assert read_config(tmp_path / "my-llama" / "config.json", "llama-ft").name == "llama-ft"
