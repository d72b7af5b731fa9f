"""The memory ledger's items: each named, inside the allocator or outside it, with what it is and
where its figure comes from; what the ledger leaves out; the runtime figures it uses. No numpy:
`commbench plan --help` lists these (memory.py prices them)."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 2**20


@dataclass(frozen=True)
class LedgerItem:
    name: str
    inside_allocator: bool  # counted by torch.cuda.max_memory_allocated
    what: str  # what it is and where its figure comes from


LEDGER = (
    LedgerItem(
        "parameters",
        True,
        "working weights of the stage, param bytes each (ZeRO-3: sharded; with "
        "--fp8-param-gather the quantised primary weights, the recipe's element bytes each); under LoRA the "
        "frozen base plus the adapters (16-bit); with --lora-base quantised (TE fp8_model_init, NeMo's "
        "fp8_params) the base's linear weights at the recipe's element bytes, twice where a column-wise copy "
        "is held (Hopper FP8 with the transpose cache; NVFP4, MXFP8), the rest 16-bit",
    ),
    LedgerItem(
        "quantised weights",
        True,
        "a quantised compute precision: Transformer Engine's cached copies of the "
        "linear weights in the recipe's format, row- and column-wise (one copy with --fp8-param-gather; "
        "ZeRO-3: of the two layers gathered); 0 in bf16 and for a quantised LoRA base (its weights are them)",
    ),
    LedgerItem(
        "gradients",
        True,
        "main gradients, grad bytes each (precision 18: Megatron's fp32 main grads with "
        "gradient-accumulation fusion, in the contiguous buffer its distributed optimizer reduce-scatters "
        "into; ZeRO-2: sharded); where the framework creates them in backward (torch, DeepSpeed), present "
        "at the activation peak only once the stage has run a backward in the step",
    ),
    LedgerItem(
        "optimizer", True, "fp32 master weights and Adam m, v (ZeRO-1: sharded); allocated at the first optimizer step"
    ),
    LedgerItem(
        "grad_buckets",
        True,
        "gradient-reduce buffers beside the gradients: none with Megatron's contiguous "
        "buffer (reduced in place); PyTorch DDP's flat bucket copies (gradient_as_bucket_view=False, its "
        "default) hold every replicated gradient again; DeepSpeed two buckets of bucket_bytes in flight",
    ),
    LedgerItem(
        "param_gather",
        True,
        "ZeRO-3 parameter-gather buffers: the gathered weights of the layer computed "
        "and the prefetched next one, and one layer's unsharded gradients before their reduce-scatter",
    ),
    LedgerItem(
        "activations",
        True,
        "tensors kept for backward: per layer per micro-batch (Korthikanti et al. 2022) "
        "x the stage's layers x its in-flight micro-batches under 1F1B or interleaved 1F1B; per recompute mode: none, "
        "selective with Megatron's --recompute-modules (layout key recompute_modules=core_attn+mlp+layernorm+moe_act"
        "+mla_up_proj, default core_attn), full uniform (layer inputs only) or full block (recompute_layers=N "
        "per chunk); under LoRA a frozen linear layer keeps no input (Transformer Engine saves it only for a "
        "weight that requires grad) and each adapter keeps its dropped-out input (activation bytes + a 1-byte "
        "mask) and its rank-wide A output; --fp8-activation-input keeps the MLP activation's input at 1 byte",
    ),
    LedgerItem("recompute_buffer", True, "full recompute: one layer's activations rebuilt during its backward"),
    LedgerItem(
        "logits",
        True,
        "last stage: the output layer's input (h per token) and its logits, one micro-batch: "
        "the logits in the activation dtype and the fp32 copy the unfused vocab-parallel cross entropy keeps "
        "(Megatron-Core without --cross-entropy-loss-fusion saves its fp32 softmax)",
    ),
    LedgerItem(
        "attention_workspace",
        True,
        "unfused attention: one layer's raw b*heads*s*S/t scores before the "
        "softmax; FlashAttention-2's backward: its fp32 dq accumulator (b*s*q_dim/t x 4 bytes, "
        "flash_attn csrc flash_api.cpp mha_bwd)",
    ),
    LedgerItem(
        "moe_dispatch",
        True,
        "one MoE layer in flight: the token dispatcher's send and receive buffers "
        "(k x kept x the rank's tokens out; the busiest rank's received copies in, after the ETP gather) "
        "and the combine's of the same sizes, in the activation dtype",
    ),
    LedgerItem(
        "gemm_workspace",
        True,
        "cuBLAS workspace 32 MiB per GEMM stream (NVIDIA's cuBLAS docs, "
        "cublasSetWorkspace: 32 MiB recommended on Hopper and later; 4 MiB before, so A100 is over by 28 MiB) "
        "on the compute stream, plus Transformer Engine's own 32 MiB with megatron-core",
    ),
    LedgerItem(
        "cuda_context",
        False,
        "CUDA context with the kernels of cuBLAS, cuDNN and NCCL loaded: assumed "
        "0.5 GB (not measured here: this machine has no GPU)",
    ),
    LedgerItem(
        "nccl_buffers",
        False,
        "NCCL_BUFFSIZE (4 MiB, NCCL's documented default) x channels x peers per "
        "communicator: collectives' communicators (tp, dp, edp) an assumed 16 channels x 2 ring/tree "
        "peers, point-to-point ones (pp, cp ring, ep all-to-all) an assumed 2 channels per peer",
    ),
    LedgerItem(
        "allocator_reserve",
        False,
        "the caching allocator's reserved but unallocated memory (fragmentation): "
        "assumed 5% of the allocator peak (not measured here)",
    ),
)
LEDGER_ITEMS = tuple(item.name for item in LEDGER)
ALLOCATOR_ITEMS = tuple(item.name for item in LEDGER if item.inside_allocator)
OUTSIDE_ITEMS = tuple(item.name for item in LEDGER if not item.inside_allocator)
# what the ledger does not price yet: `plan --help` lists these
NOT_MODELLED = {
    "fp8_scales": "the quantised recipes' scale tensors and amax histories (small beside the copies)",
    "activation_offloading": "Megatron's activation offloading to host memory (--cpu-offloading and its fine-grained "
    "variant): the ledger keeps every activation on the device",
    "fused_cross_entropy": "--cross-entropy-loss-fusion: the ledger keeps the unfused fp32 copy of the logits",
    "fp8_attention": "Transformer Engine's FP8 attention (fp8_dot_product_attention with NVTE_FP8_DPA_BWD): the "
    "ledger keeps Q, K, V and the attention output at the activation width, not in FP8",
    "lora_dropout_variants": "LoRA dropout kernels that keep no mask (NeMo's NEMO_LORA_MEMORY_SAVING_DROPOUT, "
    "NEMO_LORA_USE_THUNDER_DROPOUT as the MLPerf v4.1-v5.1 configs set them): the ledger keeps PyTorch "
    "dropout's 1-byte mask",
}
# when the allocator peaks: at the backward start of the last in-flight micro-batch, or in the optimizer step
PEAK_MOMENTS = ("backward start", "optimizer step")

CUDA_CONTEXT_BYTES = 0.5e9
NCCL_BUFFSIZE = 4 * MiB
NCCL_RING_CHANNELS = 16
NCCL_RING_PEERS = 2
NCCL_P2P_CHANNELS = 2
FRAGMENTATION = 0.05
CUBLAS_WORKSPACE = 32 * MiB
TE_WORKSPACE = 32 * MiB
