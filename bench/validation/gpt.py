"""A small GPT and the four ways the validation parallelises it with torch's own APIs.

The model is shaped so that every GEMM it runs is one the step model prices, with the same FLOPs:
  - no biases (the step model ignores them);
  - a fused QKV projection whose output is laid out head by head, [head][q|k|v][head_dim], so a
    column-parallel split in contiguous halves hands each tensor-parallel rank whole heads;
  - a GELU MLP of width 4h (two matrices) and an untied output head (vocab x h).
Positions are learned (a lookup like the token embedding); attention is
F.scaled_dot_product_attention, causal.

Layouts (2 ranks):
  ddp   DistributedDataParallel, default 25 MiB buckets
  fsdp  FSDP2 fully_shard per block and at the root (reshard after forward: ZeRO-3)
  tp    tensor parallel: QKV and fc1 column-parallel, the attention output and fc2 row-parallel
        (Megatron without sequence parallelism: 2 all-reduces forward, 2 backward per block); the
        output head column-parallel with loss_parallel, the embeddings and norms replicated
  pp    pipeline parallel: 2 stages (embedding + first half of the blocks, second half + head),
        Schedule1F1B
  zero1 DDP with torch's ZeroRedundancyOptimizer (the optimizer state sharded over the 2 ranks)
  recompute  DDP with every block checkpointed (torch.utils.checkpoint: full recompute)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class GPTConfig:
    hidden: int = 512
    layers: int = 4
    heads: int = 8
    vocab: int = 2048
    seq_len: int = 256

    @property
    def ffn(self) -> int:
        return 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=False)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.qkv(x)
        # heads held here: all of them, or this tensor-parallel rank's share
        heads = qkv.shape[-1] // (3 * self.head_dim)
        q, k, v = qkv.view(b, s, heads, 3, self.head_dim).permute(3, 0, 2, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, s, heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token ids (b, s) -> logits (b, s, vocab). A pipeline stage keeps only its part: the first
    stage has the embeddings, the last the final norm and head, each a share of the blocks."""

    def __init__(
        self, cfg: GPTConfig, first: bool = True, last: bool = True, blocks: int | None = None, recompute: bool = False
    ):
        super().__init__()
        self.recompute = recompute  # full recompute: keep each block's input, rebuild the rest in backward
        self.tok = nn.Embedding(cfg.vocab, cfg.hidden) if first else None
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden) if first else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers if blocks is None else blocks))
        self.ln_f = nn.LayerNorm(cfg.hidden) if last else None
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok is not None:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        if self.head is not None:
            x = self.head(self.ln_f(x))
        return x


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
