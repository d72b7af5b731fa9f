"""Transformer descriptions: the shapes the memory, FLOP and communication models need.

Parameter counts (biases ignored, they are < 0.1% of any preset here):
  attention   h*q + 2*h*kv + q*h          q = heads*head_dim, kv = kv_heads*head_dim (GQA: kv < q)
  MLP         2*h*f (GELU, two matrices) or 3*h*f (SwiGLU: gate, up, down)
  MoE layer   attention + experts*MLP(f_expert) + shared MLP + router h*experts
  norms       2*h per layer, h at the end
  embeddings  vocab*h, plus an output head of vocab*h unless tied

Presets follow the architecture tables of their papers and the published config.json files
(GPT-3: Brown et al. 2020 table 2.1; Llama 2: Touvron et al. 2023; Llama 3/3.1/3.2: Meta's
model cards and config.json; Mixtral: Jiang et al. 2024; DeepSeekMoE 16B: Dai et al. 2024 and
its config.json).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from commbench.errors import UsageError
from commbench.modeling.limits import (MAX_EXPERTS, MAX_FFN, MAX_HEAD_DIM, MAX_HEADS, MAX_HIDDEN, MAX_LAYERS,
                                       MAX_PARAMS, MAX_SEQ_LEN, MAX_VOCAB, whole_number)


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts in the MLP of every layer after the first `dense_layers`."""

    num_experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_ffn_hidden: int = 0  # always-on shared experts, summed (DeepSeekMoE: 2 x 1408)
    dense_layers: int = 0  # leading layers that keep a dense MLP (DeepSeek's first_k_dense_replace)
    capacity_factor: float | None = None  # None: dropless routing

    def __post_init__(self):
        whole_number("moe: num_experts", self.num_experts, 1, MAX_EXPERTS)
        whole_number("moe: top_k", self.top_k, 1, self.num_experts)
        whole_number("moe: expert_ffn_hidden", self.expert_ffn_hidden, 1, MAX_FFN)
        whole_number("moe: shared_ffn_hidden", self.shared_ffn_hidden, 0, MAX_FFN)
        whole_number("moe: dense_layers", self.dense_layers, 0, MAX_LAYERS)
        if self.capacity_factor is not None and not 0 < self.capacity_factor < math.inf:
            raise UsageError(f"moe: capacity_factor must be a positive number, not {self.capacity_factor!r}")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int  # dense MLP width (the dense layers of an MoE model)
    vocab: int
    mlp: str = "swiglu"  # "swiglu" or "gelu"
    tied_embeddings: bool = False
    head_dim: int | None = None  # None: hidden // heads
    moe: MoESpec | None = None
    max_seq_len: int = 4096

    def __post_init__(self):
        if self.mlp not in ("swiglu", "gelu"):
            raise UsageError(f"model {self.name}: mlp must be swiglu or gelu, not {self.mlp!r}")
        for name, high in (("hidden", MAX_HIDDEN), ("layers", MAX_LAYERS), ("heads", MAX_HEADS),
                           ("kv_heads", MAX_HEADS), ("ffn_hidden", MAX_FFN), ("vocab", MAX_VOCAB),
                           ("max_seq_len", MAX_SEQ_LEN)):
            whole_number(f"model {self.name}: {name}", getattr(self, name), 1, high)
        if self.head_dim is not None:
            whole_number(f"model {self.name}: head_dim", self.head_dim, 1, MAX_HEAD_DIM)
        elif self.heads > self.hidden:
            raise UsageError(f"model {self.name}: {self.heads} heads leave no width per head of hidden={self.hidden}")
        if self.heads % self.kv_heads:
            raise UsageError(f"model {self.name}: {self.heads} heads do not split into {self.kv_heads} KV groups")
        if self.moe and self.moe.dense_layers > self.layers:
            raise UsageError(f"model {self.name}: {self.moe.dense_layers} dense layers, more than its {self.layers} layers")
        # every size is bounded above, but their products could still be absurd (and leave int64)
        if self.total_params > MAX_PARAMS:
            raise UsageError(f"model {self.name}: {self.total_params:.3g} parameters, more than the {MAX_PARAMS:.0e} modelled")

    # shapes ---------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.heads * (self.head_dim or self.hidden // self.heads)

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.head_dim or self.hidden // self.heads)

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "swiglu" else 2

    @property
    def moe_layers(self) -> int:
        return self.layers - self.moe.dense_layers if self.moe else 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    # parameter counts -----------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim

    def mlp_params(self, ffn: int) -> int:
        return self.mlp_matrices * self.hidden * ffn

    @property
    def dense_layer_params(self) -> int:
        return self.attention_params + self.mlp_params(self.ffn_hidden) + 2 * self.hidden

    @property
    def expert_params_per_layer(self) -> int:
        """Routed experts of one MoE layer (the part expert parallelism shards)."""
        return self.moe.num_experts * self.mlp_params(self.moe.expert_ffn_hidden) if self.moe else 0

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer without its routed experts: attention, shared experts, router, norms."""
        if not self.moe:
            return 0
        return (self.attention_params + self.mlp_params(self.moe.shared_ffn_hidden)
                + self.hidden * self.moe.num_experts + 2 * self.hidden)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def output_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def expert_params(self) -> int:
        return self.moe_layers * self.expert_params_per_layer

    @property
    def total_params(self) -> int:
        return (self.dense_layers * self.dense_layer_params + self.moe_layers * self.moe_layer_params
                + self.expert_params + self.embedding_params + self.output_params + self.hidden)

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: all but the routed experts it is not sent to."""
        if not self.moe:
            return self.total_params
        unused = self.moe.num_experts - self.moe.top_k
        return self.total_params - self.moe_layers * unused * self.mlp_params(self.moe.expert_ffn_hidden)

    def model_flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token as MFU counts them (PaLM, Chowdhery et al. 2022, appendix B):
        6 x the matmul parameters a token uses (the input embedding is a lookup, not a matmul;
        the output projection is one, tied or not) + 12 * layers * q_dim * seq for attention."""
        matmul_params = self.active_params - self.embedding_params + self.vocab * self.hidden * self.tied_embeddings
        return 6.0 * matmul_params + 12.0 * self.layers * self.q_dim * seq_len

    def describe(self) -> str:
        kind = f"MoE {self.moe.num_experts}e top-{self.moe.top_k}" if self.moe else "dense"
        return (f"{self.name}: {self.total_params / 1e9:.2f}B params ({kind}), h={self.hidden}, "
                f"L={self.layers}, heads={self.heads}/{self.kv_heads} kv, ffn={self.ffn_hidden} {self.mlp}, "
                f"vocab={self.vocab}{' tied' if self.tied_embeddings else ''}")


def _llama(name, hidden, layers, heads, kv_heads, ffn, vocab, seq, tied=False) -> ModelSpec:
    return ModelSpec(name, hidden, layers, heads, kv_heads, ffn, vocab, "swiglu", tied, max_seq_len=seq)


PRESETS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec("gpt3-175b", 12288, 96, 96, 96, 4 * 12288, 50257, "gelu", True, max_seq_len=2048),
        _llama("llama3.2-1b", 2048, 16, 32, 8, 8192, 128256, 8192, tied=True),
        _llama("llama2-7b", 4096, 32, 32, 32, 11008, 32000, 4096),
        _llama("llama2-13b", 5120, 40, 40, 40, 13824, 32000, 4096),
        _llama("llama2-70b", 8192, 80, 64, 8, 28672, 32000, 4096),
        _llama("llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192),
        _llama("llama3-70b", 8192, 80, 64, 8, 28672, 128256, 8192),
        _llama("llama3.1-405b", 16384, 126, 128, 8, 53248, 128256, 8192),
        replace(_llama("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 32768),
                moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden=14336)),
        replace(_llama("deepseek-moe-16b", 2048, 28, 16, 16, 10944, 102400, 4096),
                moe=MoESpec(num_experts=64, top_k=6, expert_ffn_hidden=1408, shared_ffn_hidden=2 * 1408,
                            dense_layers=1)),
    )
}


_TWO_MATRIX_MLP_FAMILIES = {"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "bloom", "falcon", "phi"}


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name (case-insensitive) or a Hugging Face config.json (or a folder holding one)."""
    key = name_or_path.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    path = Path(name_or_path)
    try:
        if path.is_dir():
            path = path / "config.json"
        is_file = path.is_file()
    except OSError:  # a name no file system takes (too long, say) is no config.json either
        is_file = False
    if is_file:
        return from_hf_config(path)
    raise UsageError(f"unknown model {name_or_path!r}: use a preset ({', '.join(PRESETS)}) or a config.json path")


def from_hf_config(path: str | Path) -> ModelSpec:
    """Read the fields transformers' Llama, Mistral, Mixtral, Qwen2(-MoE), DeepSeek and GPT-2 configs use.

    Every size must be a whole number within the limits of commbench.modeling.limits; a field that
    is not is refused by its name in the file, before any model sees it.
    """
    path = Path(path)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: bad JSON, or a number too long to read
        raise UsageError(f"{path}: not a readable config.json ({exc})") from None
    if not isinstance(cfg, dict):
        raise UsageError(f"{path}: a config.json holds a JSON object, not {type(cfg).__name__}")

    def first(*keys):
        """(key, value) of the first key present with a value, or (None, None)."""
        for key in keys:
            if cfg.get(key) is not None:
                return key, cfg[key]
        return None, None

    def size(*keys, high: int, low: int = 1, default: int | None = None) -> int | None:
        key, value = first(*keys)
        return default if key is None else whole_number(f"{path}: {key}", value, low, high)

    hidden = size("hidden_size", "n_embd", "d_model", high=MAX_HIDDEN)
    layers = size("num_hidden_layers", "n_layer", "num_layers", high=MAX_LAYERS)
    heads = size("num_attention_heads", "n_head", high=MAX_HEADS)
    vocab = size("vocab_size", high=MAX_VOCAB)
    if None in (hidden, layers, heads, vocab):
        raise UsageError(f"{path}: needs hidden_size, num_hidden_layers, num_attention_heads and vocab_size")
    # GPT-2-era families have a two-matrix MLP; Llama-era ones (and Gemma's GeGLU) a gated three-matrix one
    model_type = cfg.get("model_type")
    mlp = "gelu" if isinstance(model_type, str) and model_type in _TWO_MATRIX_MLP_FAMILIES else "swiglu"
    experts = size("num_local_experts", "n_routed_experts", "num_experts", low=0, high=MAX_EXPERTS)
    moe = None
    if experts and experts > 1:
        expert_ffn = size("moe_intermediate_size", "intermediate_size", high=MAX_FFN)
        if expert_ffn is None:
            raise UsageError(f"{path}: an MoE config needs moe_intermediate_size or intermediate_size")
        shared = size("shared_expert_intermediate_size", low=0, high=MAX_FFN) or (
            size("n_shared_experts", low=0, high=MAX_EXPERTS, default=0) * expert_ffn)
        moe = MoESpec(
            num_experts=experts,
            top_k=size("num_experts_per_tok", "top_k", high=experts, default=2),
            expert_ffn_hidden=expert_ffn,
            shared_ffn_hidden=shared,
            dense_layers=size("first_k_dense_replace", low=0, high=layers, default=0),
        )
    tied = first("tie_word_embeddings")[1]
    return ModelSpec(
        name=str(first("_name_or_path")[1] or path.parent.name or path.stem),
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=size("num_key_value_heads", high=heads, default=heads),
        ffn_hidden=size("intermediate_size", "n_inner", high=MAX_FFN, default=4 * hidden),
        vocab=vocab,
        mlp=mlp,
        tied_embeddings=True if tied is None else bool(tied),  # absent: transformers' default, tied
        head_dim=size("head_dim", high=MAX_HEAD_DIM),
        moe=moe,
        max_seq_len=size("max_position_embeddings", "n_positions", "n_ctx", high=MAX_SEQ_LEN, default=4096),
    )
