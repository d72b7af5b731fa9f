"""Read a Hugging Face config.json into a ModelSpec exactly, or refuse it by name.

Every architecture is read from its own keys: the FFN width in each spelling (intermediate_size,
ffn_hidden_size, ff_intermediate_size, n_inner, ffn_dim; Qwen v1's intermediate_size counts both
SwiGLU branches), grouped and multi-query attention in each spelling (num_key_value_heads,
multi_query, attention_head_type, multi_query_group_num, n_head_kv, num_kv_heads), head_dim or
kv_channels, the activation (hidden_act, hidden_activation, activation_function), biases, norms,
learned position tables, multi-head latent attention (kv_lora_rank, ...), mixtures of experts,
sliding windows and their layer patterns. A key a config leaves out takes transformers' default
for that model type (FAMILY_DEFAULTS below; e.g. Llama's embeddings are untied, Gemma's tied).

What the planner cannot model is refused with one line naming the feature (Mamba/state-space
layers, RWKV, linear attention, encoder-decoders); it is never planned as something else. A
multimodal wrapper's text_config is read and its vision tower is named as not modelled.
load_model() takes what the planner's --model takes: a preset name or a config.json.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, overload

from commbench.data.safe_read import CONFIG, load_json
from commbench.errors import UsageError
from commbench.modeling.limits import (
    MAX_EXPERTS,
    MAX_FFN,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    whole_number,
)
from commbench.modeling.models import PRESETS, MLASpec, ModelSpec, MoESpec, mtp_note


@dataclass(frozen=True)
class Family:
    """What transformers' class for a model type does where its config.json says nothing."""

    tied: bool = False  # tie_word_embeddings default of the config class
    activation: str = "silu"  # hidden_act default
    always_gated: bool = False  # the MLP class has gate/up/down whatever the activation (Gemma)
    layernorm: bool = False  # LayerNorm (weight + bias) rather than RMSNorm (weight)
    norms_per_layer: int = 2  # 1 for a parallel attention + MLP block sharing one norm
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    learned_positions: bool = False  # a position table of max_position_embeddings x hidden
    lm_head_bias: bool = False
    qk_norm: bool = False  # a norm over head_dim on queries and on keys
    defaults: tuple[tuple[str, int], ...] = ()  # (key, value) of the config class's other size defaults


_LLAMA_SIZES = (
    ("hidden_size", 4096),
    ("intermediate_size", 11008),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("vocab_size", 32000),
)
_PLAIN_ALL_BIASES: dict[str, Any] = dict(layernorm=True, qkv_bias=True, out_bias=True, mlp_bias=True)

FAMILY_DEFAULTS: dict[str, Family] = {
    "llama": Family(defaults=_LLAMA_SIZES),
    "mistral": Family(),
    "mixtral": Family(),
    "qwen2": Family(qkv_bias=True),
    "qwen2_moe": Family(qkv_bias=True),
    "qwen3": Family(qk_norm=True, tied=True),
    "qwen": Family(qkv_bias=True),  # Qwen v1: c_attn has a bias, c_proj and the MLP do not (no_bias)
    "deepseek": Family(),
    "deepseek_v2": Family(),
    "deepseek_v3": Family(),
    "qwen3_moe": Family(qk_norm=True),
    "llama4_text": Family(qk_norm=False),
    "gpt_oss": Family(qkv_bias=True, out_bias=True),
    "internlm2": Family(),
    "minicpm": Family(tied=True),
    "phi3": Family(),
    "phi3small": Family(tied=True, activation="gegelu", layernorm=True),
    "chatglm": Family(activation="swiglu"),
    "stablelm": Family(layernorm=True),
    "gemma": Family(tied=True, activation="gelu_pytorch_tanh", always_gated=True),
    "gemma2": Family(tied=True, activation="gelu_pytorch_tanh", always_gated=True, norms_per_layer=4),
    "gemma3_text": Family(
        tied=True, activation="gelu_pytorch_tanh", always_gated=True, norms_per_layer=4, qk_norm=True
    ),
    "starcoder2": Family(tied=True, activation="gelu_pytorch_tanh", **_PLAIN_ALL_BIASES),
    "gpt2": Family(tied=True, activation="gelu_new", learned_positions=True, **_PLAIN_ALL_BIASES),
    "gpt_bigcode": Family(tied=True, activation="gelu_pytorch_tanh", learned_positions=True, **_PLAIN_ALL_BIASES),
    "gpt_neox": Family(activation="gelu", **_PLAIN_ALL_BIASES),
    "gptj": Family(activation="gelu_new", layernorm=True, norms_per_layer=1, mlp_bias=True, lm_head_bias=True),
    "phi": Family(activation="gelu_new", norms_per_layer=1, lm_head_bias=True, **_PLAIN_ALL_BIASES),
    "phi-msft": Family(activation="gelu_new", norms_per_layer=1, lm_head_bias=True, **_PLAIN_ALL_BIASES),
    "opt": Family(tied=True, activation="relu", learned_positions=True, **_PLAIN_ALL_BIASES),
    "bloom": Family(tied=True, activation="gelu", **_PLAIN_ALL_BIASES),
}
# OPT's position table has 2 rows more than its context (a padding offset); BLOOM normalises its embeddings
POSITION_OFFSET = {"opt": 2}
EMBEDDING_NORM = {"bloom"}
GATED_ACTIVATIONS = {"silu", "swish", "swiglu", "gegelu"}  # every transformers MLP using these gates them
UNKNOWN_FAMILY = Family(tied=True)  # PretrainedConfig's own default ties the embeddings


def read_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """The model in a config.json file, named `name`, else after the folder holding a config.json
    (never _name_or_path, often a path on the uploader's machine), else after the file."""
    path = Path(path)
    cfg = load_json(path, CONFIG)  # safe_read: regular file, size cap, depth and integer limits; one line
    if not isinstance(cfg, dict):
        raise UsageError(f"{path}: a config.json holds a JSON object, not {type(cfg).__name__}")
    folder = path.resolve().parent.name if path.name == "config.json" else ""
    return spec_from_config(cfg, name or folder or path.stem, source=str(path))


def spec_from_config(cfg: dict[str, Any], name: str, source: str | None = None) -> ModelSpec:
    source = source or name
    notes = []
    if isinstance(cfg.get("text_config"), dict):
        vision: dict[str, Any] = cfg["vision_config"] if isinstance(cfg.get("vision_config"), dict) else {}
        notes.append(
            f"vision tower ({vision.get('model_type', 'vision_config')}) and projector not modelled: "
            f"planning the language model of {name} only"
        )
        text = dict(cfg["text_config"])
        text.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings"))
        cfg = text
    refuse_unmodelled(cfg, name)
    return _Reader(cfg, name, source, notes).spec()


def refuse_unmodelled(cfg: dict[str, Any], name: str) -> None:
    """One clear line for architectures whose layers are not attention + MLP."""
    model_type = str(cfg.get("model_type", "")).lower()
    layers = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    if model_type == "jamba" or "attn_layer_period" in cfg:
        period = cfg.get("attn_layer_period") or 1
        mamba = (
            f", {layers - layers // period} of {layers} layers"
            if isinstance(layers, int) and isinstance(period, int)
            else ""
        )
        raise UsageError(f"{name}: Mamba layers (Jamba{mamba}) are not modelled")
    if "mamba" in model_type or ("state_size" in cfg and "conv_kernel" in cfg):
        raise UsageError(f"{name}: Mamba state-space layers (model_type {model_type or '?'}) are not modelled")
    if model_type.startswith("rwkv"):
        raise UsageError(f"{name}: RWKV time-mixing layers (model_type {model_type}) are not modelled")
    linear = _linear_attention_layers(cfg)
    if linear:
        raise UsageError(f"{name}: linear-attention layers ({linear} of {layers} layers) are not modelled")
    if cfg.get("is_encoder_decoder"):
        raise UsageError(f"{name}: encoder-decoder models (model_type {model_type or '?'}) are not modelled")


def _linear_attention_layers(cfg: dict[str, Any]) -> int:
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        return sum(kind == "linear_attention" for kind in layer_types)
    attn_types = cfg.get("attn_type_list")  # MiniMax: 0 = lightning (linear) attention, 1 = softmax
    return sum(kind == 0 for kind in attn_types) if isinstance(attn_types, list) else 0


class _Reader:
    """Reads one (text) config; every size passes the limits of commbench.modeling.limits."""

    def __init__(self, cfg: dict[str, Any], name: str, source: str, notes: list[str]) -> None:
        self.model_type = str(cfg.get("model_type", "")).lower()
        self.family = FAMILY_DEFAULTS.get(self.model_type, UNKNOWN_FAMILY)
        self.cfg = {**dict(self.family.defaults), **{k: v for k, v in cfg.items() if v is not None}}
        self.name, self.source, self.notes = name, source, notes

    def first(self, *keys: str) -> tuple[str, Any] | tuple[None, None]:
        """(key, value) of the first key present with a value, or (None, None)."""
        for key in keys:
            if key in self.cfg:
                return key, self.cfg[key]
        return None, None

    @overload
    def size(self, *keys: str, high: int, low: int = 1, default: int) -> int: ...
    @overload
    def size(self, *keys: str, high: int, low: int = 1, default: None = None) -> int | None: ...
    def size(self, *keys: str, high: int, low: int = 1, default: int | None = None) -> int | None:
        key, value = self.first(*keys)
        return default if key is None else whole_number(f"{self.source}: {key}", value, low, high)

    def present(self, key: str, high: int, low: int = 1) -> int:
        """A size the caller has seen in the config (`key in self.cfg`)."""
        return whole_number(f"{self.source}: {key}", self.cfg[key], low, high)

    def flag(self, *keys: str, default: bool) -> bool:
        key, value = self.first(*keys)
        return default if key is None else bool(value)

    # the pieces --------------------------------------------------------------------------
    def spec(self) -> ModelSpec:
        hidden = self.size("hidden_size", "n_embd", "n_embed", "d_model", high=MAX_HIDDEN)
        layers = self.size("num_hidden_layers", "n_layer", "num_layers", high=MAX_LAYERS)
        heads = self.size("num_attention_heads", "n_head", high=MAX_HEADS)
        vocab = self.size("padded_vocab_size", "vocab_size", high=MAX_VOCAB)
        if hidden is None or layers is None or heads is None or vocab is None:
            kind = f" (model_type {self.model_type})" if self.model_type else ""
            raise UsageError(
                f"{self.source}{kind}: needs hidden_size, num_hidden_layers, num_attention_heads and "
                f"vocab_size (or their n_embd/n_layer/n_head spellings)"
            )
        head_dim = self.size("head_dim", "kv_channels", high=MAX_HEAD_DIM)
        kv_heads = self.kv_heads(heads)
        activation, gated = self.activation()
        ffn = self.ffn_width(hidden, gated)
        mla = self.mla()
        moe = self.moe(hidden, layers)
        window, windowed = self.window(layers)
        tied = self.flag("tie_word_embeddings", "tie_emb_prj_weight", default=self.family.tied)
        q_width = heads * (head_dim or hidden // heads)
        kv_width = kv_heads * (head_dim or hidden // heads)
        mtp = self.size("num_nextn_predict_layers", "mtp_num_layers", low=0, high=MAX_LAYERS, default=0)
        if mtp:
            self.notes.append(mtp_note(mtp))
        return ModelSpec(
            name=self.name,
            hidden=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv_heads,
            ffn_hidden=ffn,
            vocab=vocab,
            mlp="swiglu" if gated else "gelu",
            tied_embeddings=tied,
            head_dim=head_dim,
            moe=moe,
            max_seq_len=self.size(
                "max_position_embeddings",
                "n_positions",
                "seq_length",
                "max_sequence_length",
                high=MAX_SEQ_LEN,
                default=4096,
            ),
            mla=mla,
            sliding_window=window,
            windowed_layers=windowed,
            layer_extra_params=self.layer_extras(
                hidden, q_width, kv_width, ffn, gated, head_dim or hidden // heads, mla
            ),
            model_extra_params=self.model_extras(hidden, vocab),
            embedding_dim=self.size("word_embed_proj_dim", high=MAX_HIDDEN),
            activation=activation,
            notes=tuple(self.notes),
            mtp_layers=mtp,
        )

    def kv_heads(self, heads: int) -> int:
        if self.flag("multi_query", default=False) or self.cfg.get("attention_head_type") == "multiquery":
            return 1  # GPT-BigCode / SantaCoder: one key-value head
        if self.flag("multi_query_attention", default=False):  # ChatGLM2/3
            return self.size("multi_query_group_num", high=heads, default=1)
        return self.size("num_key_value_heads", "n_head_kv", "num_kv_heads", high=heads, default=heads)

    def activation(self) -> tuple[str, bool]:
        key, value = self.first("hidden_act", "hidden_activation", "activation_function")
        activation = str(value).lower() if key else self.family.activation
        return activation, self.family.always_gated or activation in GATED_ACTIVATIONS

    def ffn_width(self, hidden: int, gated: bool) -> int:
        # Llama 4 names its dense layers' MLP intermediate_size_mlp (intermediate_size is the experts')
        key, _ = self.first(
            "intermediate_size_mlp",
            "ff_intermediate_size",
            "ffn_hidden_size",
            "inner_hidden_size",
            "intermediate_size",
            "n_inner",
            "ffn_dim",
        )
        width = self.present(key, high=MAX_FFN) if key else 4 * hidden  # GPT-2 style: n_inner null means 4h
        if self.model_type == "qwen" and key == "intermediate_size":
            width //= 2  # Qwen v1 declares the two SwiGLU branches together (w1 and w2 are each half of it)
        return width

    def mla(self) -> MLASpec | None:
        if self.cfg.get("kv_lora_rank") is None:
            return None
        # a missing size stays None here: MLASpec refuses it, naming it
        sizes: dict[str, Any] = dict(
            kv_lora_rank=self.size("kv_lora_rank", high=MAX_FFN),
            qk_nope_head_dim=self.size("qk_nope_head_dim", high=MAX_HEAD_DIM),
            qk_rope_head_dim=self.size("qk_rope_head_dim", low=0, high=MAX_HEAD_DIM),
            v_head_dim=self.size("v_head_dim", high=MAX_HEAD_DIM),
            q_lora_rank=self.size("q_lora_rank", low=0, high=MAX_FFN, default=0),
        )
        return MLASpec(**sizes)

    def moe(self, hidden: int, layers: int) -> MoESpec | None:
        experts = self.size(
            "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", low=0, high=MAX_EXPERTS
        )
        if not experts or experts < 2:
            return None
        expert_ffn = self.size("moe_intermediate_size", "intermediate_size", high=MAX_FFN)
        if expert_ffn is None:
            raise UsageError(f"{self.source}: an MoE config needs moe_intermediate_size or intermediate_size")
        shared = self.size("shared_expert_intermediate_size", low=0, high=MAX_FFN)
        if shared is None:
            # Llama 4's MoE layers always add one shared expert of the experts' width (Llama4TextMoe)
            default_shared = 1 if self.model_type == "llama4_text" else 0
            shared = self.size("n_shared_experts", low=0, high=MAX_EXPERTS, default=default_shared) * expert_ffn
        return MoESpec(
            num_experts=experts,
            top_k=self.size("num_experts_per_tok", "experts_per_token", "top_k", "moe_top_k", high=experts, default=2),
            expert_ffn_hidden=expert_ffn,
            shared_ffn_hidden=shared,
            dense_layers=layers - self.moe_layer_count(layers),
            shared_expert_gate="shared_expert_intermediate_size" in self.cfg,
        )

    def moe_layer_count(self, layers: int) -> int:
        """Layers with routed experts, as each family's modelling code places them (counted; the
        planner does not place them): an explicit moe_layers list (Llama 4) or moe_layer_freq pattern
        (Megatron's 1/0 list); else after DeepSeek's first_k_dense_replace, every layer i with
        i % moe_layer_freq == 0 (DeepSeek), or (i + 1) % step == 0 for Qwen-MoE's decoder_sparse_step
        and Llama 4's interleave_moe_layer_step, minus Qwen-MoE's mlp_only_layers."""
        listed = self.cfg.get("moe_layers")
        if isinstance(listed, list):
            return len({i for i in listed if isinstance(i, int) and 0 <= i < layers})
        pattern = self.cfg.get("moe_layer_freq")
        if isinstance(pattern, list):
            if len(pattern) != layers:
                raise UsageError(f"{self.source}: moe_layer_freq lists {len(pattern)} layers, the model has {layers}")
            return sum(1 for flag in pattern if flag)
        first = self.size("first_k_dense_replace", low=0, high=layers, default=0)
        dense_listed = self.cfg.get("mlp_only_layers")
        # a set: a list's membership test in the loop took 21 s for a config listing 200k layers
        only_dense = {i for i in dense_listed if isinstance(i, int)} if isinstance(dense_listed, list) else set()
        if "moe_layer_freq" in self.cfg:
            freq = self.present("moe_layer_freq", high=layers)
            return sum(1 for i in range(first, layers) if i % freq == 0 and i not in only_dense)
        step = self.size("decoder_sparse_step", "interleave_moe_layer_step", high=layers, default=1)
        return sum(1 for i in range(first, layers) if (i + 1) % step == 0 and i not in only_dense)

    def window(self, layers: int) -> tuple[int | None, int]:
        """(window, layers using it). Qwen2 keeps sliding_window in its config but uses it only with
        use_sliding_window, on the layers from max_window_layers on; Gemma 2 windows every other layer,
        Gemma 3 all but every sliding_window_pattern-th; layer_types lists them where a config has it."""
        window = self.size("sliding_window", high=MAX_SEQ_LEN)
        if window is None or not self.flag("use_sliding_window", default=True):
            return None, 0
        layer_types = self.cfg.get("layer_types")
        if isinstance(layer_types, list):
            return window, sum(kind == "sliding_attention" for kind in layer_types)
        if self.model_type == "gemma2":
            return window, (layers + 1) // 2
        if "sliding_window_pattern" in self.cfg:
            pattern = self.present("sliding_window_pattern", high=layers)
            return window, layers - layers // pattern
        if "max_window_layers" in self.cfg:
            return window, max(0, layers - self.present("max_window_layers", low=0, high=MAX_LAYERS))
        return window, layers

    def layer_extras(
        self, hidden: int, q_width: int, kv_width: int, ffn: int, gated: bool, head_dim: int, mla: MLASpec | None
    ) -> int:
        """Norm weights (and LayerNorm biases) and linear biases of one layer."""
        fam, all_bias = self.family, self.flag("use_bias", "bias", default=False)
        norm = hidden * (2 if fam.layernorm or not self.flag("rmsnorm", default=True) else 1)
        extras = (
            1 if self.flag("parallel_attn", default=False) and fam.norms_per_layer == 2 else fam.norms_per_layer
        ) * norm
        if mla:
            return extras
        qkv_bias = self.flag(
            "attention_bias", "add_qkv_bias", "use_qkv_bias", "qkv_bias", default=fam.qkv_bias or all_bias
        )
        out_bias = self.flag("attention_bias", "add_bias_linear", default=fam.out_bias or all_bias)
        mlp_bias = self.flag("mlp_bias", "add_bias_linear", default=fam.mlp_bias or all_bias)
        extras += qkv_bias * (q_width + 2 * kv_width) + out_bias * hidden
        extras += mlp_bias * ((2 if gated else 1) * ffn + hidden)
        return extras + (2 * head_dim if self.flag("qk_layernorm", default=self.family.qk_norm) else 0)

    def model_extras(self, hidden: int, vocab: int) -> int:
        """The final norm, a learned position table and an output-head bias."""
        fam = self.family
        norm = hidden * (2 if fam.layernorm else 1)
        positions = 0
        if fam.learned_positions:
            rows = self.size("n_positions", "max_position_embeddings", high=MAX_SEQ_LEN, default=1024)
            positions = hidden * (rows + POSITION_OFFSET.get(self.model_type, 0))
        final = norm if self.flag("do_layer_norm_before", "post_layer_norm", default=True) else 0
        embedding_norm = norm if self.model_type in EMBEDDING_NORM else 0
        projections = self.embedding_projections(hidden)
        return final + positions + embedding_norm + projections + (vocab if fam.lm_head_bias else 0)

    def embedding_projections(self, hidden: int) -> int:
        """OPT-350m embeds in a narrower width and projects in and out of the hidden size."""
        width = self.size("word_embed_proj_dim", high=MAX_HIDDEN, default=hidden)
        return 0 if width == hidden else 2 * width * hidden


def load_model(name_or_path: str, name: str | None = None) -> ModelSpec:
    """A preset name (case-insensitive) or a Hugging Face config.json (or a folder holding one).
    A config's model is named `name`, else after the folder holding the file."""
    key = name_or_path.strip().lower()
    if key in PRESETS:
        spec = PRESETS[key]
        return replace(spec, name=name) if name else spec
    path = Path(name_or_path)
    try:
        if path.is_dir():
            path = path / "config.json"
        is_file = path.is_file()
    except OSError:  # a name no file system takes (too long, say) is no config.json either
        is_file = False
    if is_file:
        return read_config(path, name)
    if "/" in name_or_path or name_or_path.endswith(".json"):  # meant as a path: say the file is missing
        raise UsageError(f"{name_or_path}: no such file (--model takes a preset name or a config.json path)")
    raise UsageError(f"unknown model {name_or_path!r}: use a preset ({', '.join(PRESETS)}) or a config.json path")
