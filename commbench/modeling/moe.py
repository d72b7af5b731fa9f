"""One MoE layer's compute on one rank, as Megatron-Core runs it (router, permute, grouped GEMM,
shared experts), for a batch of layouts; seconds per MoE layer per micro-batch.

With n = b*s/cp tokens of one micro-batch on a context-parallel rank, the MoE layer's input is
its sequence-parallel shard, n_l = n/tp tokens (Megatron-Core trains MoE with tp > 1 only with
sequence parallelism). With E experts, top-k, ep and etp the folded expert grid:
  router        GEMM n_l x h -> E, then softmax/sigmoid and top-k over n_l x E fp32 scores
                (ROUTER_SCORE_BYTES per score forward)
  dispatch      (comm.py) the n_l*k token copies leave for the ep ranks holding their experts, and
                the etp ranks of each expert gather what their group received
  grouped GEMM  E/ep local experts in one kernel, each on T = n_l*k*ep*etp/E tokens on average,
                of width f_e/etp: up (gate + up with SwiGLU) T x h -> f_e/etp, down back to h.
                Each expert's GEMM is priced at its own shape on the GEMM surface/curve (a small
                per-expert GEMM runs far below a dense one's efficiency), times the local experts.
                The busiest rank paces the layer (the combine waits for it): T is scaled by its
                expected load (routing.expert_load: the routing skew, capped by a capacity
                factor, exactly the capacity when padded), and dropped copies are not computed.
  permute       the copies are gathered into expert order and scattered back (read + write of
                (1 + k) x n_l tokens each way), and after the all-to-all sorted by local expert and
                back (read + write of the received tokens each way): HBM traffic
  shared        always-on shared experts: a tensor-parallel MLP over the n tokens of the TP group,
                width f_shared/tp, like a dense MLP
  host          without a full-iteration CUDA graph the dispatcher's host synchronisation on the
                token counts exposes the host's work for the layer: a fixed part and one per local
                expert (MoEExecution.cuda_graph, host_layer_s, host_expert_s)
The backward is twice the GEMMs and BACKWARD_ELEMENTWISE_FACTOR x the traffic (and the host's work),
as the dense layer's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from commbench.modeling.hardware import Processor
from commbench.modeling.job import TrainingJob
from commbench.modeling.kernels import Numbers, Pair, gemm_forward_backward
from commbench.modeling.layout import LayoutBatch
from commbench.modeling.routing import ExpertLoad, expert_load

BACKWARD_TRAFFIC = 2.0  # compute.BACKWARD_ELEMENTWISE_FACTOR: the backward moves about twice the forward's bytes
ROUTER_SCORE_BYTES = 12.0  # fp32 logits written (4), softmax read + write (8); top-k reads them once more in cache


@dataclass
class MoECompute:
    """Seconds of one MoE layer's parts per micro-batch on the pacing rank, and the shapes behind them.
    Each part is (forward, backward); router and permute include their HBM traffic."""

    router: Pair
    router_gemm: Pair
    permute: Pair  # permute + unpermute, both sorts
    experts: Pair  # the grouped GEMM of the local experts
    shared: Pair
    host: Pair  # the host's exposed work without a CUDA graph (MoEExecution)
    local_experts: np.ndarray
    tokens_per_expert: np.ndarray  # mean over experts (after drops), per micro-batch
    pacing_tokens_per_expert: np.ndarray  # on the busiest rank: the grouped GEMM's M
    expert_width: np.ndarray  # f_e / etp: the grouped GEMM's N (up) and K (down)
    local_tokens: np.ndarray  # n_l
    received_tokens: np.ndarray  # token copies the busiest rank computes (after the ETP gather)
    load: ExpertLoad

    @property
    def gemm(self) -> Pair:
        forward, backward = (self.router_gemm[i] + self.experts[i] + self.shared[i] for i in (0, 1))
        return forward, backward

    @property
    def traffic(self) -> Pair:
        """Router scores and permutes: (forward, backward) seconds of HBM traffic."""
        forward, backward = (self.router[i] - self.router_gemm[i] + self.permute[i] for i in (0, 1))
        return forward, backward

    def to_dict(self, i: int, hidden: int) -> dict[str, Any]:
        """One layout's parts, seconds per MoE layer per micro-batch, for plan --json."""

        def pair(parts: Pair) -> dict[str, float]:
            return {"forward_s": float(parts[0][i]), "backward_s": float(parts[1][i])}

        return {
            "router": pair(self.router),
            "permute": pair(self.permute),
            "grouped_gemm": {
                **pair(self.experts),
                "local_experts": float(self.local_experts[i]),
                "tokens_per_expert_mean": float(self.tokens_per_expert[i]),
                "shape_per_expert": {
                    "m": float(self.pacing_tokens_per_expert[i]),
                    "n_up": float(self.expert_width[i]),
                    "k_up": hidden,
                    "n_down": hidden,
                    "k_down": float(self.expert_width[i]),
                },
                "pacing_load_over_even": float(self.load.hottest[i]),
            },
            "shared_experts": pair(self.shared),
            "host_sync": pair(self.host),
            "dropped_token_share": float(self.load.dropped[i]),
        }


def _block(proc: Processor, tokens: Numbers, h: int, width: Numbers, ups: int) -> Pair:
    """(forward, backward) of an MLP: `ups` up-projections h -> width, one down-projection back."""
    up_f, up_b = gemm_forward_backward(proc, tokens, width, h)
    down_f, down_b = gemm_forward_backward(proc, tokens, h, width)
    return ups * up_f + down_f, ups * up_b + down_b


def moe_compute(
    job: TrainingJob, batch: LayoutBatch, proc: Processor, n: Numbers, router_proc: Processor | None = None
) -> MoECompute:
    """The parts of one MoE layer per micro-batch, n tokens per context-parallel rank; the router's
    GEMM on `router_proc` (BF16 under every quantised recipe), the rest on `proc`."""
    model, moe = job.model, job.model.moe
    assert moe is not None, "moe_compute prices MoE layers only"
    h, ups = model.hidden, model.mlp_matrices - 1
    local = n / batch.tp
    load = expert_load(job.routing, moe.num_experts, batch.ep, job.capacity_factor, job.moe_execution.pad_to_capacity)
    local_experts = moe.num_experts / batch.ep
    even = local * moe.top_k * batch.ep * batch.etp / moe.num_experts  # copies per expert, even router
    pacing = even * load.hottest * job.expert_load
    width = moe.expert_ffn_hidden / batch.etp
    experts = tuple(local_experts * part for part in _block(proc, pacing, h, width, ups))
    shared = _block(proc, n, h, moe.shared_ffn_hidden / batch.tp, ups) if moe.shared_ffn_hidden else (0.0, 0.0)
    router_gemm = gemm_forward_backward(router_proc or proc, local, moe.num_experts, h)
    bandwidth = proc.elementwise_bandwidth
    score_traffic = local * moe.num_experts * ROUTER_SCORE_BYTES / bandwidth
    received = local_experts * pacing
    options = job.moe_execution
    host = 0.0 if options.cuda_graph else options.host_layer_s + options.host_expert_s * local_experts
    permute = job.activation_bytes * h * (2 * (1 + moe.top_k * load.kept) * local + 4 * received) / bandwidth
    zeros = np.zeros(len(batch))

    def pair(forward: Numbers, backward: Numbers) -> Pair:
        return forward + zeros, backward + zeros

    return MoECompute(
        router=pair(router_gemm[0] + score_traffic, router_gemm[1] + BACKWARD_TRAFFIC * score_traffic),
        router_gemm=pair(*router_gemm),
        permute=pair(permute, BACKWARD_TRAFFIC * permute),
        experts=pair(*experts),
        shared=pair(*shared),
        host=pair(host, BACKWARD_TRAFFIC * host),
        local_experts=local_experts + zeros,
        tokens_per_expert=even * load.kept + zeros,
        pacing_tokens_per_expert=pacing + zeros,
        expert_width=width + zeros,
        local_tokens=local + zeros,
        received_tokens=received + zeros,
        load=load,
    )
