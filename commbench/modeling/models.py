"""Transformer descriptions: the shapes the memory, FLOP and communication models need.

Parameter counts:
  attention   h*q + 2*h*kv + q*h          q = heads*head_dim, kv = kv_heads*head_dim (GQA/MQA: kv < q)
  MLA         (DeepSeek-V2/V3) queries h*r_q + r_q*heads*(d_nope+d_rope) (or h*heads*(d_nope+d_rope)
              without a query latent), keys/values h*(r_kv+d_rope) + r_kv*heads*(d_nope+d_v), output
              heads*d_v*h, plus the two latent norms
  MLP         2*h*f (plain: GELU, ReLU) or 3*h*f (gated: SwiGLU, GeGLU: gate, up, down)
  MoE layer   attention + experts*MLP(f_expert) + shared MLP + router h*experts
  per layer   norms and biases: `layer_extra_params` (default 2*h, two RMSNorm weights)
  model       position tables, final norm, head bias: `model_extra_params` (default h, the final norm)
  embeddings  vocab*h, plus an output head of vocab*h unless tied

Attention may be windowed on some layers (Mistral, Gemma 2/3, Phi-3): a query then attends at most
`sliding_window` keys, so those layers' attention work grows with s*w instead of s^2/2.

Presets follow the architecture tables of their papers and the published config.json files
(GPT-3: Brown et al. 2020 table 2.1; Llama 2: Touvron et al. 2023; Llama 3/3.1/3.2: Meta's
model cards and config.json; Mixtral: Jiang et al. 2024; DeepSeekMoE 16B: Dai et al. 2024 and
its config.json). Any other model comes from its config.json (commbench.modeling.model_config).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from commbench.errors import UsageError
from commbench.modeling.limits import (
    MAX_EXPERTS,
    MAX_FFN,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_PARAMS,
    MAX_SEQ_LEN,
    MAX_VOCAB,
    whole_number,
)


@dataclass(frozen=True)
class MoESpec:
    """Mixture of experts in the MLP of every layer after the first `dense_layers`."""

    num_experts: int
    top_k: int
    expert_ffn_hidden: int
    shared_ffn_hidden: int = 0  # always-on shared experts, summed (DeepSeekMoE: 2 x 1408)
    dense_layers: int = 0  # layers that keep a dense MLP (DeepSeek's first_k_dense_replace)
    capacity_factor: float | None = None  # None: dropless routing
    shared_expert_gate: bool = False  # Qwen2-MoE scales its shared expert by a learned h -> 1 gate

    def __post_init__(self) -> None:
        whole_number("moe: num_experts", self.num_experts, 1, MAX_EXPERTS)
        whole_number("moe: top_k", self.top_k, 1, self.num_experts)
        whole_number("moe: expert_ffn_hidden", self.expert_ffn_hidden, 1, MAX_FFN)
        whole_number("moe: shared_ffn_hidden", self.shared_ffn_hidden, 0, MAX_FFN)
        whole_number("moe: dense_layers", self.dense_layers, 0, MAX_LAYERS)
        if self.capacity_factor is not None and not 0 < self.capacity_factor < math.inf:
            raise UsageError(f"moe: capacity_factor must be a positive number, not {self.capacity_factor!r}")


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): keys and values are rebuilt per head from a
    shared latent of width kv_lora_rank; queries optionally from one of width q_lora_rank. Scores
    use d_nope + d_rope per head, values d_v."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: queries projected straight from the hidden state (DeepSeek-V2-Lite)

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
            whole_number(f"mla: {name}", getattr(self, name), 1, MAX_FFN)
        whole_number("mla: qk_rope_head_dim", self.qk_rope_head_dim, 0, MAX_HEAD_DIM)
        whole_number("mla: q_lora_rank", self.q_lora_rank, 0, MAX_FFN)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params(self, hidden: int, heads: int) -> int:
        if self.q_lora_rank:
            query = hidden * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        else:
            query = hidden * heads * self.qk_head_dim
        key_value = (
            hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
            + self.kv_lora_rank
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        )
        return query + key_value + heads * self.v_head_dim * hidden

    def down_projection_params(self, hidden: int) -> int:
        """The latent down-projections and their norms: Megatron keeps them whole on every TP rank."""
        query = hidden * self.q_lora_rank + self.q_lora_rank if self.q_lora_rank else 0
        return query + hidden * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank


def mtp_note(modules: int) -> str:
    """What the planner says about a model's multi-token-prediction modules."""
    return (
        f"{modules} multi-token-prediction module(s): priced as one more layer, projection and output head each "
        f"on the last stage; not in the parameter count (the published main-model count leaves them out) nor "
        f"in the memory ledger"
    )


def causal_pairs(seq_len: float, window: int | None) -> float:
    """(query, key) pairs one causal sequence scores: s^2/2, or s*w - w^2/2 when each query sees at
    most w keys (w < s)."""
    if window is None or window >= seq_len:
        return seq_len * seq_len / 2
    return seq_len * window - window * window / 2


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int  # dense MLP width (the dense layers of an MoE model)
    vocab: int
    mlp: str = "swiglu"  # "swiglu" (gated: gate, up, down) or "gelu" (plain: up, down)
    tied_embeddings: bool = False
    head_dim: int | None = None  # None: hidden // heads
    moe: MoESpec | None = None
    max_seq_len: int = 4096
    mla: MLASpec | None = None
    sliding_window: int | None = None  # keys a query sees on the windowed layers
    windowed_layers: int = 0  # how many layers use the window (the rest attend to the whole sequence)
    layer_extra_params: int | None = None  # norms and biases per layer; None: 2*hidden (two RMSNorms)
    model_extra_params: int | None = None  # positions, final norm, head bias; None: hidden (final norm)
    embedding_dim: int | None = None  # token embedding width when narrower than hidden (OPT-350m); None: hidden
    activation: str = ""  # as the config names it, for the description
    mtp_layers: int = 0  # multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers), training only
    notes: tuple[str, ...] = ()  # what the planner does not model about this model

    def __post_init__(self) -> None:
        if self.mlp not in ("swiglu", "gelu"):
            raise UsageError(f"model {self.name}: mlp must be swiglu or gelu, not {self.mlp!r}")
        for name, high in (
            ("hidden", MAX_HIDDEN),
            ("layers", MAX_LAYERS),
            ("heads", MAX_HEADS),
            ("kv_heads", MAX_HEADS),
            ("ffn_hidden", MAX_FFN),
            ("vocab", MAX_VOCAB),
            ("max_seq_len", MAX_SEQ_LEN),
        ):
            whole_number(f"model {self.name}: {name}", getattr(self, name), 1, high)
        if self.head_dim is not None:
            whole_number(f"model {self.name}: head_dim", self.head_dim, 1, MAX_HEAD_DIM)
        elif self.heads > self.hidden:
            raise UsageError(f"model {self.name}: {self.heads} heads leave no width per head of hidden={self.hidden}")
        if self.heads % self.kv_heads:
            raise UsageError(f"model {self.name}: {self.heads} heads do not split into {self.kv_heads} KV groups")
        if self.moe and self.moe.dense_layers > self.layers:
            raise UsageError(
                f"model {self.name}: {self.moe.dense_layers} dense layers, more than its {self.layers} layers"
            )
        if self.sliding_window is not None:
            whole_number(f"model {self.name}: sliding_window", self.sliding_window, 1, MAX_SEQ_LEN)
        whole_number(f"model {self.name}: windowed_layers", self.windowed_layers, 0, self.layers)
        whole_number(f"model {self.name}: mtp_layers", self.mtp_layers, 0, MAX_LAYERS)
        # every size is bounded above, but their products could still be absurd (and leave int64)
        if self.total_params > MAX_PARAMS:
            raise UsageError(
                f"model {self.name}: {self.total_params:.3g} parameters, more than the {MAX_PARAMS:.0e} modelled"
            )

    # shapes ---------------------------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Width per head of queries and keys (MLA: no-position part + rotary part)."""
        return self.mla.qk_head_dim if self.mla else (self.head_dim or self.hidden // self.heads)

    @property
    def v_head_dim(self) -> int:
        return self.mla.v_head_dim if self.mla else (self.head_dim or self.hidden // self.heads)

    @property
    def q_dim(self) -> int:
        """Query width entering the attention core."""
        return self.heads * self.qk_head_dim

    @property
    def kv_dim(self) -> int:
        """Key width entering the attention core (MLA rebuilds one key per head from the latent)."""
        return (self.heads if self.mla else self.kv_heads) * self.qk_head_dim

    @property
    def v_dim(self) -> int:
        return (self.heads if self.mla else self.kv_heads) * self.v_head_dim

    @property
    def attention_out_dim(self) -> int:
        """Width of the attention output, the output projection's input."""
        return self.heads * self.v_head_dim

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
        if self.mla:
            return self.mla.params(self.hidden, self.heads)
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim

    @property
    def tp_replicated_params_per_layer(self) -> int:
        """Weights of one layer that tensor parallelism copies instead of splitting (MLA's latents)."""
        return self.mla.down_projection_params(self.hidden) if self.mla else 0

    def mlp_params(self, ffn: int) -> int:
        return self.mlp_matrices * self.hidden * ffn

    @property
    def layer_extras(self) -> int:
        return 2 * self.hidden if self.layer_extra_params is None else self.layer_extra_params

    @property
    def model_extras(self) -> int:
        return self.hidden if self.model_extra_params is None else self.model_extra_params

    @property
    def dense_layer_params(self) -> int:
        return self.attention_params + self.mlp_params(self.ffn_hidden) + self.layer_extras

    @property
    def expert_params_per_layer(self) -> int:
        """Routed experts of one MoE layer (the part expert parallelism shards)."""
        return self.moe.num_experts * self.mlp_params(self.moe.expert_ffn_hidden) if self.moe else 0

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer without its routed experts: attention, shared experts, router, norms."""
        if not self.moe:
            return 0
        return (
            self.attention_params
            + self.mlp_params(self.moe.shared_ffn_hidden)
            + self.hidden * (self.moe.num_experts + self.moe.shared_expert_gate)
            + self.layer_extras
        )

    @property
    def embedding_params(self) -> int:
        return self.vocab * (self.embedding_dim or self.hidden)

    @property
    def output_params(self) -> int:
        return 0 if self.tied_embeddings else self.embedding_params

    @property
    def expert_params(self) -> int:
        return self.moe_layers * self.expert_params_per_layer

    @property
    def total_params(self) -> int:
        return (
            self.dense_layers * self.dense_layer_params
            + self.moe_layers * self.moe_layer_params
            + self.expert_params
            + self.embedding_params
            + self.output_params
            + self.model_extras
        )

    @property
    def active_params(self) -> int:
        """Parameters one token passes through: all but the routed experts it is not sent to."""
        if not self.moe:
            return self.total_params
        unused = self.moe.num_experts - self.moe.top_k
        return self.total_params - self.moe_layers * unused * self.mlp_params(self.moe.expert_ffn_hidden)

    # attention work -------------------------------------------------------------------------
    def attention_pairs(self, seq_len: float) -> float:
        """Causal (query, key) pairs of one sequence, averaged over the layers (windowed or not)."""
        windowed = self.windowed_layers * causal_pairs(seq_len, self.sliding_window)
        return (windowed + (self.layers - self.windowed_layers) * causal_pairs(seq_len, None)) / self.layers

    @property
    def score_flops_per_pair(self) -> int:
        """Forward FLOPs of one (query, key) pair over all heads: QK^T over the query-key width
        and AV over the value width, 2 FLOPs per multiply-add."""
        return 2 * self.heads * (self.qk_head_dim + self.v_head_dim)

    def attention_score_flops_per_token(self, seq_len: int) -> float:
        """Forward attention-core FLOPs per token over all layers, causal, averaged over a sequence."""
        return self.layers * self.score_flops_per_pair * self.attention_pairs(seq_len) / seq_len

    @property
    def attention_projection_params(self) -> int:
        """Attention weights one token multiplies through per layer (projections, not norms)."""
        return self.attention_params - (self.mla.kv_lora_rank + self.mla.q_lora_rank if self.mla else 0)

    def model_flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token as MFU counts them (PaLM, Chowdhery et al. 2022, appendix B):
        6 x the matmul parameters a token uses (the input embedding is a lookup, not a matmul;
        the output projection is one, tied or not) + 6 x the per-token score FLOPs of every layer
        over the keys it sees (12 * layers * q_dim * seq with plain attention, as PaLM counts it)."""
        matmul_params = self.active_params - self.embedding_params + self.embedding_params * self.tied_embeddings
        keys = (
            self.windowed_layers * min(seq_len, self.sliding_window or seq_len)
            + (self.layers - self.windowed_layers) * seq_len
        )
        return 6.0 * matmul_params + 3.0 * self.score_flops_per_pair * keys

    def describe(self) -> str:
        kind = f"MoE {self.moe.num_experts}e top-{self.moe.top_k}" if self.moe else "dense"
        attention = f"MLA kv_lora={self.mla.kv_lora_rank}" if self.mla else f"heads={self.heads}/{self.kv_heads} kv"
        activation = f" ({self.activation})" if self.activation else ""
        window = (
            f", window {self.sliding_window} on {self.windowed_layers}/{self.layers} layers"
            if self.windowed_layers
            else ""
        )
        return (
            f"{self.name}: {self.total_params / 1e9:.2f}B params ({kind}), h={self.hidden}, "
            f"L={self.layers}, {attention}, ffn={self.ffn_hidden} {self.mlp}{activation}, "
            f"vocab={self.vocab}{' tied' if self.tied_embeddings else ''}{window}"
        )


def _llama(
    name: str, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int, seq: int, tied: bool = False
) -> ModelSpec:
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
        replace(
            _llama("mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 32768),
            moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden=14336),
        ),
        replace(
            _llama("deepseek-moe-16b", 2048, 28, 16, 16, 10944, 102400, 4096),
            moe=MoESpec(num_experts=64, top_k=6, expert_ffn_hidden=1408, shared_ffn_hidden=2 * 1408, dense_layers=1),
        ),
        # MoE models as their published config.json files describe them, exactly as commbench's config
        # reader makes them (tests/fixtures/models/moe_presets.json holds the configs and their sources;
        # tests/test_moe_presets.py checks the two agree)
        # deepseek-ai/DeepSeek-V3 config.json (tests/fixtures/models/real/deepseek-v3, see its SOURCES.json
        # entry)
        ModelSpec(
            name="deepseek-v3",
            hidden=7168,
            layers=61,
            heads=128,
            kv_heads=128,
            ffn_hidden=18432,
            vocab=129280,
            moe=MoESpec(num_experts=256, top_k=8, expert_ffn_hidden=2048, shared_ffn_hidden=2048, dense_layers=3),
            max_seq_len=163840,
            mla=MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, q_lora_rank=1536),
            layer_extra_params=14336,
            model_extra_params=7168,
            activation="silu",
            mtp_layers=1,
            notes=(mtp_note(1),),
        ),
        # Qwen/Qwen3-235B-A22B config.json; shape as reproduced by zyzshishui/slime
        # scripts/models/qwen3-235B-A22B.sh (Megatron flags) and the Qwen3 model card (94 layers, 64/4
        # heads, 128 experts, 8 active)
        ModelSpec(
            name="qwen3-235b-a22b",
            hidden=4096,
            layers=94,
            heads=64,
            kv_heads=4,
            ffn_hidden=12288,
            vocab=151936,
            head_dim=128,
            moe=MoESpec(num_experts=128, top_k=8, expert_ffn_hidden=1536),
            max_seq_len=40960,
            layer_extra_params=8448,
            model_extra_params=4096,
            activation="silu",
        ),
        # Qwen/Qwen3-30B-A3B config.json; shape as reproduced by zyzshishui/slime
        # scripts/models/qwen3-30B-A3B.sh (Megatron flags)
        ModelSpec(
            name="qwen3-30b-a3b",
            hidden=2048,
            layers=48,
            heads=32,
            kv_heads=4,
            ffn_hidden=6144,
            vocab=151936,
            head_dim=128,
            moe=MoESpec(num_experts=128, top_k=8, expert_ffn_hidden=768),
            max_seq_len=40960,
            layer_extra_params=4352,
            model_extra_params=2048,
            activation="silu",
        ),
        # mistralai/Mixtral-8x22B-v0.1 config.json (transformers 4.40.0.dev0), as copied in two public test
        # suites found by code search
        ModelSpec(
            name="mixtral-8x22b",
            hidden=6144,
            layers=56,
            heads=48,
            kv_heads=8,
            ffn_hidden=16384,
            vocab=32000,
            moe=MoESpec(num_experts=8, top_k=2, expert_ffn_hidden=16384),
            max_seq_len=65536,
            layer_extra_params=12288,
            model_extra_params=6144,
            activation="silu",
        ),
        # meta-llama/Llama-4-Maverick-17B-128E config.json text_config, as copied in a TensorRT-LLM unit
        # test (LLAMA_4_MAVERICK_TWO_LAYER_CONFIG, num_hidden_layers reduced there from 48, restored here);
        # the vision tower is not modelled
        ModelSpec(
            name="llama4-maverick",
            hidden=5120,
            layers=48,
            heads=40,
            kv_heads=8,
            ffn_hidden=16384,
            vocab=202048,
            head_dim=128,
            moe=MoESpec(num_experts=128, top_k=1, expert_ffn_hidden=8192, shared_ffn_hidden=8192, dense_layers=24),
            max_seq_len=1048576,
            layer_extra_params=10240,
            model_extra_params=5120,
            activation="silu",
        ),
        # openai/gpt-oss-120b config.json (mxfp4 quantization_config left out), as copied in a public test
        # suite found by code search
        ModelSpec(
            name="gpt-oss-120b",
            hidden=2880,
            layers=36,
            heads=64,
            kv_heads=8,
            ffn_hidden=2880,
            vocab=201088,
            head_dim=64,
            moe=MoESpec(num_experts=128, top_k=4, expert_ffn_hidden=2880),
            max_seq_len=131072,
            sliding_window=128,
            windowed_layers=18,
            layer_extra_params=13760,
            model_extra_params=2880,
            activation="silu",
        ),
        # openai/gpt-oss-20b config.json (mxfp4 quantization_config left out), as stored in a public repository's
        # copy found by the library's string search (2026-12-02); OpenAI's model card gives 20.91B / 3.61B
        ModelSpec(
            name="gpt-oss-20b",
            hidden=2880,
            layers=24,
            heads=64,
            kv_heads=8,
            ffn_hidden=2880,
            vocab=201088,
            head_dim=64,
            moe=MoESpec(num_experts=32, top_k=4, expert_ffn_hidden=2880),
            max_seq_len=131072,
            sliding_window=128,
            windowed_layers=12,
            layer_extra_params=13760,
            model_extra_params=2880,
            activation="silu",
        ),
    )
}
