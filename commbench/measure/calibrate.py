"""`commbench calibrate`'s measurements: this device's compute rates, timed kernel by kernel (torch).

What is timed, on one device (a CUDA GPU or this CPU), each figure the median of `repeats` runs
after one untimed warm-up (allocator, kernel selection, cuBLAS heuristics):
  gemm         torch.matmul of (M, K) x (K, N) over a grid of shapes, per dtype (bf16 and fp16 on
               CUDA, fp32 on CPU); 2*M*N*K FLOPs each
  gemm fp8     with fp8: torch._scaled_mm of E4M3 (M, K) x (K, N) with per-tensor scales and a BF16
               output over the same shapes, the FP8 GEMM Transformer Engine's per-tensor recipes run
               (where the device has none, torch raises and calibrate says so)
  attention    scaled_dot_product_attention, causal, forward and forward + backward, for every SDPA
               backend that accepts the shape (flash, memory-efficient, cuDNN, math), over (sequence,
               heads, head dim); FLOPs counted for causal attention: 2*b*h*s^2*d forward (QK^T and AV
               at half density), 2.5x that backward
  elementwise  copy, add, GELU, LayerNorm and softmax over a buffer far larger than any cache, as
               bytes moved per second (read + write)
  launch       the cost of one tiny kernel (adding one element), back to back: what a kernel costs
               when it does no work
  autograd op  the cost of one eager autograd op that does no work: a chain of one-element
               multiplies on a tensor that requires grad, timed forward (dispatch + recording the
               graph) and backward (running the graph) apart; what eager torch pays per op
               on the thread that computes
  optimizer    a fused (else foreach) AdamW step over fp32 parameters: parameters per second
Timing: CUDA events around each run on a GPU (one synchronisation per run), the host clock on a
CPU. The validation's training script times its own layouts' shapes with the same functions
(time_linear, time_attention, time_elementwise, ...).

Nothing here decides how the figures are used: commbench/measure/processor_json.py turns them into
a processor description in the presets' format.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from commbench.dtypes import GEMM_DTYPES, lookup

# the torch dtype of each GEMM precision name (fp32, bf16, fp16)
TORCH_DTYPES = {name: getattr(torch, lookup(name).torch) for name in GEMM_DTYPES}
ELEMENTWISE_KINDS = ("copy", "add", "gelu", "layer_norm", "softmax")
ATTENTION_BACKENDS = ("flash", "efficient", "cudnn", "math")
MAX_GEMM_DIM = 65536
LAUNCH_OPS = 200  # tiny kernels per timed run of the launch figure


@dataclass(frozen=True)
class Grid:
    """What one calibration measures."""

    gemm_dims: tuple[int, ...]  # M, N and K each take every value
    attention: tuple[tuple[int, int, int], ...]  # (sequence, heads, head dim), batch 1
    elementwise_elements: int
    optimizer_params: int
    repeats: int
    gemm_shapes: tuple[tuple[int, int, int], ...] = field(default=())  # explicit (M, N, K), besides the grid

    def shapes(self) -> list[tuple[int, int, int]]:
        grid = [(m, n, k) for m in self.gemm_dims for n in self.gemm_dims for k in self.gemm_dims]
        return list(dict.fromkeys(grid + list(self.gemm_shapes)))


# --quick keeps a 2-core CPU under a minute; full mode is what a GPU is worth measuring
GRIDS = {
    ("cpu", "quick"): Grid((128, 512, 1024), ((256, 4, 64), (512, 8, 64)), 4 << 20, 4 << 20, 5),
    ("cpu", "full"): Grid(
        (64, 256, 512, 1024, 2048), ((256, 8, 64), (512, 8, 64), (1024, 8, 64), (512, 8, 128)), 8 << 20, 16 << 20, 5
    ),
    ("cuda", "quick"): Grid((256, 1024, 4096, 8192), ((1024, 16, 64), (4096, 16, 128)), 64 << 20, 64 << 20, 5),
    ("cuda", "full"): Grid(
        (128, 256, 512, 1024, 2048, 4096, 8192, 16384),
        (
            (512, 16, 64),
            (1024, 16, 64),
            (2048, 16, 64),
            (4096, 16, 64),
            (8192, 16, 64),
            (1024, 16, 128),
            (4096, 16, 128),
            (8192, 16, 128),
            (4096, 32, 128),
        ),
        256 << 20,
        256 << 20,
        10,
    ),
}


# timing -----------------------------------------------------------------------------------------
class HostClock:
    """Wall-clock seconds of an operation on the CPU."""

    def seconds(self, operation, repeats: int) -> float:
        operation()  # warm-up
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            operation()
            samples.append(time.perf_counter() - start)
        return statistics.median(samples)


class CudaClock:
    """GPU seconds of an operation from CUDA events recorded on the current stream around it."""

    def seconds(self, operation, repeats: int) -> float:
        operation()  # warm-up
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for start, end in events:
            start.record()
            operation()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(end) / 1e3 for start, end in events)


def clock_for(device: torch.device):
    return CudaClock() if device.type == "cuda" else HostClock()


# kernels -----------------------------------------------------------------------------------------
def time_gemm(clock, device, dtype, m: int, n: int, k: int, repeats: int) -> float:
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return clock.seconds(lambda: torch.matmul(a, b), repeats)


def time_scaled_gemm(clock, device, m: int, n: int, k: int, repeats: int) -> float:
    """One FP8 GEMM: E4M3 operands (the second column-major, as _scaled_mm takes it), fp32 scales, BF16 out."""
    a = torch.randn(m, k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device=device).to(torch.float8_e4m3fn).t()
    scale = torch.ones((), device=device)
    return clock.seconds(
        lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16), repeats
    )


def fp8_gemm_unavailable(device: torch.device) -> str | None:
    """Why this device cannot run an FP8 GEMM through torch._scaled_mm (None: it can)."""
    try:
        time_scaled_gemm(clock_for(device), device, 32, 32, 32, 1)
    except (RuntimeError, AttributeError, TypeError) as error:
        return f"torch._scaled_mm refuses FP8 on {device}: {str(error).splitlines()[0][:200]}"
    return None


def time_linear(clock, device, dtype, tokens: int, k: int, out: int, repeats: int) -> float:
    """Forward + both gradients of one linear layer (x: tokens x k, weight: out x k): 3 GEMMs."""
    x = torch.randn(tokens, k, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(out, k, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(tokens, out, device=device, dtype=dtype)
    return clock.seconds(lambda: torch.autograd.grad(F.linear(x, w), (x, w), grad), repeats)


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def time_attention(
    clock, device, dtype, batch: int, heads: int, seq: int, head_dim: int, repeats: int, backend: str | None = None
) -> tuple[float, float] | None:
    """(forward, forward + backward) seconds of causal SDPA on `backend` (None: torch's choice), or
    None where that backend does not take this shape, dtype or device."""
    from contextlib import nullcontext

    from torch.nn.attention import sdpa_kernel

    shape = (batch, heads, seq, head_dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    chosen = nullcontext() if backend is None else sdpa_kernel(_sdpa_backend(backend))

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        torch.autograd.grad(forward(), (q, k, v), grad)

    with chosen:
        try:
            forward_backward()  # refused here, not in the middle of timing
        except RuntimeError:
            return None
        with torch.no_grad():
            fwd = clock.seconds(forward, repeats)
        return fwd, clock.seconds(forward_backward, repeats)


def elementwise_operation(kind: str, elements: int, device, dtype):
    """(operation, bytes it moves) for one elementwise kernel over `elements` values."""
    width = 4096  # rows of a hidden-state-like width for the normalisations
    x = torch.randn(elements // width, width, device=device, dtype=dtype)
    size = x.numel() * x.element_size()
    if kind == "copy":
        target = torch.empty_like(x)
        return (lambda: target.copy_(x)), 2 * size
    if kind == "add":
        y = torch.randn_like(x)
        return (lambda: torch.add(x, y)), 3 * size
    if kind == "gelu":
        return (lambda: F.gelu(x)), 2 * size
    if kind == "layer_norm":
        weight, bias = torch.ones(width, device=device, dtype=dtype), torch.zeros(width, device=device, dtype=dtype)
        return (lambda: F.layer_norm(x, (width,), weight, bias)), 2 * size
    if kind == "softmax":
        return (lambda: torch.softmax(x, dim=-1)), 2 * size
    raise ValueError(f"unknown elementwise kernel {kind!r}")


def time_elementwise(clock, device, dtype, kind: str, elements: int, repeats: int) -> tuple[float, float]:
    """(seconds, bytes moved) of one elementwise kernel."""
    operation, moved = elementwise_operation(kind, elements, device, dtype)
    with torch.no_grad():
        return clock.seconds(operation, repeats), moved


def time_launch(clock, device, repeats: int) -> float:
    """Seconds per kernel of LAUNCH_OPS back-to-back one-element adds: the per-kernel floor."""
    x = torch.zeros(1, device=device)

    def tiny_kernels():
        for _ in range(LAUNCH_OPS):
            x.add_(1.0)

    return clock.seconds(tiny_kernels, repeats) / LAUNCH_OPS


def time_autograd_op(clock, device, repeats: int) -> tuple[float, float]:
    """(forward, backward) seconds per op of LAUNCH_OPS chained one-element multiplies with autograd."""
    x = torch.ones(1, device=device, requires_grad=True)

    def forward():
        y = x
        for _ in range(LAUNCH_OPS):
            y = y * 1.0
        return y

    graph = forward()  # kept, so that its backward can be timed again and again on its own
    return (
        clock.seconds(forward, repeats) / LAUNCH_OPS,
        clock.seconds(lambda: graph.backward(retain_graph=True), repeats) / LAUNCH_OPS,
    )


def adamw(parameters, device) -> torch.optim.Optimizer:
    """Fused AdamW where this torch has it for the device, else the multi-tensor (foreach) one."""
    try:
        return torch.optim.AdamW(parameters, lr=1e-4, fused=True)
    except (RuntimeError, ValueError):
        return torch.optim.AdamW(parameters, lr=1e-4, foreach=True)


def time_optimizer(clock, device, params: int, repeats: int) -> float:
    """Seconds of one AdamW step over `params` fp32 parameters in 16 tensors (a multi-tensor step)."""
    chunk = max(1, params // 16)
    tensors = [torch.zeros(chunk, device=device, requires_grad=True) for _ in range(16)]
    for tensor in tensors:
        tensor.grad = torch.randn_like(tensor)
    optimizer = adamw(tensors, device)
    return clock.seconds(optimizer.step, repeats)


# a whole calibration ------------------------------------------------------------------------------
def steps(grid: Grid, dtypes: tuple[str, ...], fp8: bool = False) -> int:
    """How many measurements `measure` makes (for a progress bar)."""
    return (
        len(grid.shapes()) * (len(dtypes) + fp8)
        + len(grid.attention) * len(dtypes) * len(ATTENTION_BACKENDS)
        + len(ELEMENTWISE_KINDS) * len(dtypes)
        + 3
    )


def measure(
    device: torch.device, dtypes: tuple[str, ...], grid: Grid, advance=lambda what: None, fp8: bool = False
) -> dict:
    """Every figure of one calibration as plain numbers (seconds, bytes, FLOPs); `advance(text)` is
    called after each measurement. With fp8 the GEMM grid is also timed in FP8 ("gemm_fp8")."""
    clock, repeats = clock_for(device), grid.repeats
    result = {"dtypes": list(dtypes), "gemm": [], "attention": [], "elementwise": [], "repeats": repeats}
    if fp8:
        result["gemm_fp8"] = []
        for m, n, k in grid.shapes():
            seconds = time_scaled_gemm(clock, device, m, n, k, repeats)
            result["gemm_fp8"].append({"dtype": "fp8", "m": m, "n": n, "k": k, "seconds": seconds})
            advance(f"GEMM fp8 {m}x{n}x{k}")
    for dtype in dtypes:
        for m, n, k in grid.shapes():
            seconds = time_gemm(clock, device, TORCH_DTYPES[dtype], m, n, k, repeats)
            result["gemm"].append({"dtype": dtype, "m": m, "n": n, "k": k, "seconds": seconds})
            advance(f"GEMM {dtype} {m}x{n}x{k}")
    for dtype in dtypes:
        for seq, heads, head_dim in grid.attention:
            for backend in ATTENTION_BACKENDS:
                timed = time_attention(clock, device, TORCH_DTYPES[dtype], 1, heads, seq, head_dim, repeats, backend)
                if timed is not None:
                    result["attention"].append(
                        {
                            "dtype": dtype,
                            "backend": backend,
                            "batch": 1,
                            "heads": heads,
                            "seq": seq,
                            "head_dim": head_dim,
                            "forward_s": timed[0],
                            "forward_backward_s": timed[1],
                        }
                    )
                advance(f"attention {backend} {dtype} s={seq}")
    for dtype in dtypes:
        for kind in ELEMENTWISE_KINDS:
            seconds, moved = time_elementwise(
                clock, device, TORCH_DTYPES[dtype], kind, grid.elementwise_elements, repeats
            )
            result["elementwise"].append({"dtype": dtype, "kind": kind, "bytes": moved, "seconds": seconds})
            advance(f"elementwise {kind} {dtype}")
    result["launch_s"] = time_launch(clock, device, repeats)
    advance("kernel launch")
    forward_s, backward_s = time_autograd_op(clock, device, repeats)
    result["autograd_op"] = {"forward_s": forward_s, "backward_s": backward_s}
    advance("autograd op")
    result["optimizer"] = {
        "params": grid.optimizer_params,
        "seconds": time_optimizer(clock, device, grid.optimizer_params, repeats),
    }
    advance("optimizer step")
    return result


def device_facts(device: torch.device) -> dict:
    """Name, memory and parallel units of the device measured."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {
            "name": props.name,
            "memory_bytes": float(props.total_memory),
            "sm_count": props.multi_processor_count,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "compute_capability": f"{props.major}.{props.minor}",
        }
    import os
    import platform

    memory = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return {
        "name": f"CPU {platform.processor() or platform.machine()}, {torch.get_num_threads()} thread(s)",
        "memory_bytes": memory,
        "sm_count": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda": None,
    }
