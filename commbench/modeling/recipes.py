"""Compute precision: the number format a job's GEMMs run in, apart from the bytes kept per parameter.

`plan --precision` says what memory holds per parameter (16, 12, 18, fp32: commbench.modeling.job);
`plan --compute-precision` says how the linear layers' GEMMs run. The names follow Transformer
Engine's recipes (transformer_engine.common.recipe; Megatron-Core's --fp8-recipe / --fp4-recipe):

  bf16           no quantisation: every GEMM in BF16
  fp8-delayed    DelayedScaling: per-tensor scales from an amax history; the amax is taken in the
                 cast kernel, so no extra pass
  fp8-current    Float8CurrentScaling ("tensorwise"): per-tensor scale from the tensor's own amax,
                 one extra read of every GEMM input before its cast
  fp8-blockwise  Float8BlockScaling (DeepSeek-V3 style): 1x128 activation tiles, 128x128 weight
                 blocks, an FP32 scale per block
  mxfp8          MXFP8BlockScaling: 32-element blocks with E8M0 scales (Blackwell only)
  nvfp4          NVFP4BlockScaling: FP4 E2M1 in 16-element blocks with E4M3 scales (Blackwell only);
                 gradients of the weight GEMM pass a random Hadamard transform first

Which GPU runs which recipe: Transformer Engine's datatype and hardware support matrix
(nvidia.github.io/TransformerEngine/support_matrix.html): per-tensor FP8 from compute capability
8.9 (Ada, Hopper, Blackwell), FP8 block scaling on 9.0 and Blackwell, MXFP8 and NVFP4 on data-centre
Blackwell (10.0, 10.3) only; Ampere (8.0) runs none of them. A processor's `compute_capability`
(processor JSON) is checked against the recipe's list; a processor without one runs only bf16.

What stays in BF16 (Megatron-Core with Transformer Engine; Megatron-Core low-precision training
guide): the attention core (dot-product attention; FP8 attention is a separate option this planner
does not price), the embedding, the output layer, the MoE router, norms and element-wise work.
Transformer layers at the start and end of the model stay in BF16 where the recipe says so
(`bf16_layer_share`: NVFP4 pretraining kept 10 of 62 blocks of its 12B model in BF16, NVIDIA,
"Pretraining Large Language Models with NVFP4", arXiv:2509.25149, 2025; the FP8 recipes keep none
unless Megatron's --first-last-layers-bf16 is given).

Quantised GEMMs run at the processor's peak in the recipe's format (peak_flops_fp8 / _fp4), at the
fraction of it the processor's GEMM curve gives (or its measured "fp8"/"fp4" gemm_surface): on
H100 a large FP8 GEMM reaches the same fraction of the FP8 peak as a BF16 one of the BF16 peak
(cuBLASLt E4M3 8192^3 at 1,599-1,630 TFLOPS = 81-82% of 1,979, 16 GPUs measured,
gitea.d-robotics.cc/han.zhao/test_gpu_scripts reports_cublaslt_fp8_crosscheck_20260524.md; BF16
maximum achievable matmul 792 of 989 = 80%, stas00/ml-engineering compute/accelerator/README.md).

Overheads, priced as HBM traffic at the processor's elementwise bandwidth (recipe_overhead_bytes):
each GEMM input is cast (read 2 bytes, write `element_bytes` plus its scales) once per use: the
activation x and the output gradient dy every micro-batch, the weight once per step (Transformer
Engine caches the cast weight over the micro-batches of a step); the backward needs each operand
along its other axis too (a transposed FP8 copy on Hopper, a column-wise quantisation for MX/NV
formats), written in the same cast kernel: `element_bytes` more per element. Current scaling reads
every input once more for its amax. NVFP4's Hadamard transform reads and writes the weight
gradient's inputs once more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.errors import UsageError

if TYPE_CHECKING:  # hardware imports this module (Processor.for_recipe)
    from commbench.modeling.hardware import Processor

_PER_TENSOR_FP8 = ("8.9", "9.0", "10.0", "10.3", "12.0")


@dataclass(frozen=True)
class ComputeRecipe:
    name: str
    te_recipe: str  # Transformer Engine's recipe class
    peak: str  # which processor peak the quantised GEMMs run at: "bf16", "fp8", "fp4"
    element_bytes: float  # bytes per quantised element, scales included
    capabilities: tuple[str, ...]  # compute capabilities that run it (TE support matrix)
    amax_passes: float = 0.0  # extra reads (2 bytes per element) of each GEMM input for its scale
    hadamard_passes: float = 0.0  # extra read + write (2 + 2 bytes) of the weight-gradient GEMM's inputs
    bf16_layer_share: float = 0.0  # share of transformer layers the recipe keeps in BF16
    bf16_layer_source: str = "Megatron-Core default: no transformer layer kept in BF16"

    @property
    def quantised(self) -> bool:
        return self.peak != "bf16"

    def bf16_parts(self) -> list[str]:
        """The parts of the model whose GEMMs stay in BF16, as `plan --json` names them."""
        if not self.quantised:
            return ["everything"]
        parts = ["attention core", "embedding", "output layer", "MoE router", "norms and element-wise"]
        if self.bf16_layer_share:
            parts.append(f"{self.bf16_layer_share:.0%} of transformer layers (first and last)")
        return parts

    def describe(self) -> dict[str, object]:
        return {
            "compute_precision": self.name,
            "recipe": self.te_recipe,
            "gemm_peak": self.peak,
            "quantised_element_bytes": self.element_bytes,
            "bf16": self.bf16_parts(),
            "bf16_layer_share": self.bf16_layer_share,
            "bf16_layer_source": self.bf16_layer_source,
        }


RECIPES: dict[str, ComputeRecipe] = {
    r.name: r
    for r in (
        ComputeRecipe("bf16", "none (BF16 autocast)", "bf16", 2.0, ()),
        ComputeRecipe("fp8-delayed", "DelayedScaling", "fp8", 1.0, _PER_TENSOR_FP8),
        ComputeRecipe("fp8-current", "Float8CurrentScaling", "fp8", 1.0, _PER_TENSOR_FP8, amax_passes=1.0),
        # one FP32 scale per 128 elements (1x128 tiles; 128x128 weight blocks are smaller still)
        ComputeRecipe("fp8-blockwise", "Float8BlockScaling", "fp8", 1.0 + 4 / 128, ("9.0", "10.0", "10.3", "12.0")),
        # one E8M0 byte per 32 elements
        ComputeRecipe("mxfp8", "MXFP8BlockScaling", "fp8", 1.0 + 1 / 32, ("10.0", "10.3")),
        # half a byte per element plus one E4M3 byte per 16
        ComputeRecipe(
            "nvfp4",
            "NVFP4BlockScaling",
            "fp4",
            0.5 + 1 / 16,
            ("10.0", "10.3"),
            hadamard_passes=1.0,
            bf16_layer_share=10 / 62,
            bf16_layer_source="NVIDIA, Pretraining Large Language Models with NVFP4 (arXiv:2509.25149, 2025): "
            "the first 2 and last 8 of 62 blocks kept in BF16",
        ),
    )
}


def checked_recipe(name: str, processor: Processor) -> ComputeRecipe:
    """The recipe if the processor's tensor cores run it; a UsageError naming both otherwise."""
    if name not in RECIPES:
        raise UsageError(f"--compute-precision must be one of {', '.join(RECIPES)}, not {name!r}")
    recipe = RECIPES[name]
    if not recipe.quantised:
        return recipe
    capability = processor.compute_capability
    if capability not in recipe.capabilities or processor_peak(processor, recipe) is None:
        has = f"compute capability {capability}" if capability else "no compute capability in its description"
        raise UsageError(
            f"{processor.name} ({has}) cannot run {name} ({recipe.te_recipe}): Transformer Engine runs it "
            f"on compute capability {', '.join(recipe.capabilities)} only"
        )
    return recipe


def processor_peak(processor: Processor, recipe: ComputeRecipe) -> float | None:
    """Dense FLOP/s of the processor in the recipe's GEMM format (None: it has none)."""
    peaks: dict[str, float | None] = {
        "bf16": processor.peak_flops,
        "fp8": processor.peak_flops_fp8,
        "fp4": processor.peak_flops_fp4,
    }
    return peaks[recipe.peak]


def cast_bytes_per_element(recipe: ComputeRecipe, transposed: bool = True) -> float:
    """HBM bytes one cast moves per element of a GEMM input: read the BF16 tensor (plus the amax
    reads), write the quantised copy (and the copy along the other axis the backward needs)."""
    if not recipe.quantised:
        return 0.0
    writes = recipe.element_bytes * (2 if transposed else 1)
    return 2.0 * (1 + recipe.amax_passes) + writes
