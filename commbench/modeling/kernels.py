"""Kernel costs: one GEMM from its shape, attention by implementation, elementwise traffic by fusion.

GEMM C[M,N] = A[M,K] B[K,N] (2MNK FLOPs). A shape the processor's gemm_surface measured in the
GEMM's dtype (the processor's gemm_dtype: the job's compute dtype) is priced at its measured
fraction of peak, wave quantisation included. Any other shape: its output is cut into tiles (the processor's gemm_tile),
one per SM (sm_count) per wave, so the last wave may leave SMs idle: the wave factor is
tiles / (waves * SMs), and a tile the output only partly fills still costs a whole tile (tile_fill).
The processor's efficiency curve (or its measured gemm_surface, reduced to
the same curve) is read as the efficiency of a GEMM whose waves are full; a GEMM reaches
curve(FLOPs / wave factor) * wave factor of peak. A GEMM can also be bound by memory: it moves at
least its three matrices once. A processor without sm_count and gemm_tile (and no surface) has its
GEMMs priced by FLOPs alone on gemm_efficiency, as before the kernel model.

Attention implementations (compute.ATTENTION_IMPLEMENTATIONS):
  fused ("flash2", "flash3", "cudnn", "sdpa")  causal pairs only, at the processor's rate for the
      implementation (attention_rates; attention_efficiency where it has none); the backward does
      2.5x the forward's FLOPs (FlashAttention-2: five matmuls against two)
  "unfused"  the Megatron-LM path of 2021-2022: QK^T and AV as batched GEMMs over every
      (query, key) pair (the mask is applied after), plus scale + mask + softmax and dropout over
      b*heads*s*S score elements as memory traffic (fp16/bf16 scores, a 1-byte dropout mask)
"""

from __future__ import annotations

import numpy as np

from commbench.dtypes import precision_bytes
from commbench.modeling.hardware import Processor

# a GEMM dimension or batch: one number, or an array of them (results broadcast)
Numbers = float | np.ndarray
# (forward, backward) seconds of one part of a layer, one entry per layout
Pair = tuple[np.ndarray, np.ndarray]

# score-element traffic of the unfused path, bytes per element at 2-byte scores: the fused
# scale-mask-softmax kernel reads and writes the scores (4), dropout reads them, writes them and
# a 1-byte mask (5); the backward reads the mask and the gradient and writes it (5), the
# softmax's backward reads output and gradient and writes the input gradient (6)
UNFUSED_SCORE_BYTES_FORWARD = 9.0
UNFUSED_SCORE_BYTES_BACKWARD = 11.0
FLASH_BACKWARD_FLOPS = 2.5


def wave_factor(proc: Processor, m: Numbers, n: Numbers, batch: Numbers = 1.0) -> float | np.ndarray:
    """Fraction of the SM slots a GEMM's waves use (1.0 without sm_count and gemm_tile)."""
    if not proc.sm_count or not proc.gemm_tile:
        return 1.0
    tile_m, tile_n = proc.gemm_tile
    tiles = np.ceil(np.asarray(m, dtype=float) / tile_m) * np.ceil(np.asarray(n, dtype=float) / tile_n) * batch
    used: np.ndarray = tiles / (np.ceil(tiles / proc.sm_count) * proc.sm_count)
    return used


def tile_fill(proc: Processor, m: Numbers, n: Numbers) -> float | np.ndarray:
    """Fraction of the computed tiles' area the output fills (1.0 without gemm_tile): a GEMM computes
    whole tiles, so M = 192 on 128-row tiles costs the work of 256 rows (and never less than M = 128)."""
    if not proc.gemm_tile:
        return 1.0
    tile_m, tile_n = proc.gemm_tile
    m, n = np.asarray(m, dtype=float), np.asarray(n, dtype=float)
    filled: np.ndarray = m * n / (np.ceil(m / tile_m) * tile_m * np.ceil(n / tile_n) * tile_n)
    return filled


def full_wave_curve(proc: Processor, dtype: str) -> np.ndarray:
    """(FLOPs, efficiency with full waves) points, sorted: the measured surface of `dtype`
    de-quantised, else gemm_curve."""
    points = proc.surface(dtype)
    if points is None:
        return np.asarray(proc.gemm_curve, dtype=float)
    m, n, k, fraction = points.T
    factor = wave_factor(proc, m, n)
    fill = tile_fill(proc, m, n)
    flops = 2 * m * n * k / fill / factor
    efficiency = np.minimum(1.0, fraction / fill / factor)
    # shapes of equal FLOPs: their median, as calibrate's gemm_efficiency (interpolation needs one per FLOPs)
    unique = np.unique(flops)
    return np.column_stack([unique, [np.median(efficiency[flops == f]) for f in unique]])


def kernel_described(proc: Processor) -> bool:
    """Whether the processor has what the shape-based GEMM needs (else GEMMs are priced by FLOPs)."""
    return bool((proc.sm_count and proc.gemm_tile) or proc.gemm_surface)


def measured_fraction(proc: Processor, m: Numbers, n: Numbers, k: Numbers, dtype: str) -> np.ndarray:
    """The surface's fraction of peak where (M, N, K) is a shape it measured in `dtype`, NaN elsewhere."""
    m, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (m, n, k)))
    points = proc.surface(dtype)
    if points is None:
        return np.full(m.shape, np.nan)
    same = (m[..., None] == points[:, 0]) & (n[..., None] == points[:, 1]) & (k[..., None] == points[:, 2])
    return np.where(same.any(axis=-1), points[:, 3][np.argmax(same, axis=-1)], np.nan)


def gemm_seconds(
    proc: Processor,
    m: Numbers,
    n: Numbers,
    k: Numbers,
    batch: Numbers = 1.0,
    element_bytes: float | None = None,
    dtype: str | None = None,
) -> np.ndarray:
    """Seconds of one (batched) GEMM of shape (M, N, K) on `proc`, in `dtype` (the processor's
    gemm_dtype unless given; element_bytes follow it); arrays broadcast."""
    dtype = dtype or proc.gemm_dtype
    element_bytes = element_bytes or precision_bytes(dtype)
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    flops = 2 * m * n * k * batch
    if not kernel_described(proc):
        return proc.gemm_time(flops)
    factor = wave_factor(proc, m, n, batch) * tile_fill(proc, m, n)
    curve = full_wave_curve(proc, dtype)
    efficiency = np.interp(np.log10(np.maximum(flops / factor, 1.0)), np.log10(curve[:, 0]), curve[:, 1]) * factor
    if np.ndim(batch) == 0 and batch == 1.0:  # the surface holds single GEMMs, not batched ones
        measured = measured_fraction(proc, m, n, k, dtype)
        efficiency = np.where(np.isnan(measured), efficiency, measured)
    compute = flops / (proc.peak_flops * efficiency)
    memory = element_bytes * batch * (m * k + k * n + m * n) / proc.memory_bandwidth
    seconds: np.ndarray = np.maximum(compute, memory)
    return seconds


def gemm_forward_backward(proc: Processor, m: Numbers, n: Numbers, k: Numbers, frozen: bool = False) -> Pair:
    """(forward, backward) seconds of a linear layer: y[M,N] = x[M,K] w[K,N]; the backward computes
    the input gradient (M, K, N) and, unless the weight is frozen (LoRA's base), the weight gradient (K, N, M)."""
    forward = gemm_seconds(proc, m, n, k)
    backward = gemm_seconds(proc, m, k, n)
    if not frozen:
        backward = backward + gemm_seconds(proc, k, n, m)
    return forward, backward
