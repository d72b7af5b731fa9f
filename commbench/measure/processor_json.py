"""A calibration's measurements (commbench/measure/calibrate.py) as a processor description (no torch).

The description has the fields and format of commbench/modeling/presets/processor-*.json (the
schema in commbench/modeling/hardware.py), every figure {"value": V, "source": S} with S opening
"measured on HOST at TIME by commbench VERSION" and then saying how V was made:
  peak_flops_bf16               the fastest GEMM measured (any dtype), unless a datasheet peak is
                                given: a CPU has no tensor-core figure, and every fraction below
                                is of this peak
  memory_bandwidth_bytes_per_s  the copy kernel's bytes (read + write) per second
  gemm_surface                  per dtype, [M, N, K, 2MNK / seconds / peak] for every shape timed
  gemm_efficiency               the same points by FLOPs alone (median fraction of shapes with
                                equal FLOPs), for the FLOPs-only curve
  attention_rates               per SDPA backend (and "sdpa": the one torch picks), forward FLOPs / forward seconds / peak and
                                BACKWARD_ATTENTION_FACTOR x forward FLOPs / backward seconds /
                                peak (backward = forward + backward run minus forward run), median
                                over the shapes, in the first dtype measured
  attention_efficiency          forward + backward together, on the backend torch picks by
                                default (flash where it runs), for models that name none
  elementwise_efficiency        median over add, GELU, LayerNorm and softmax of bytes/s over the
                                copy's bytes/s (at most 1)
  kernel_overhead_s             seconds per tiny kernel, back to back
  autograd_op_s                 forward and backward seconds per eager autograd op doing no work
                                (calibrations without that timing have none)
  optimizer_efficiency          the fp32 Adam step's traffic as the step model counts it
                                (Precision.optimizer_traffic_bytes) per second, over the copy's
  sm_count, memory_bytes        read from the device (a CPU: torch's threads, physical memory)
The raw measurements go along under "measurements", so the figures can be derived again.
"""

from __future__ import annotations

import statistics

from commbench.modeling.compute import BACKWARD_ATTENTION_FACTOR
from commbench.modeling.job import PRECISIONS

# SDPA backend -> the implementation name the step model prices (compute.ATTENTION_IMPLEMENTATIONS)
IMPLEMENTATIONS = {
    "cuda": {"flash": "flash2", "efficient": "sdpa-efficient", "cudnn": "cudnn", "math": "sdpa-math"},
    "cpu": {"flash": "sdpa-flash-cpu", "math": "sdpa-math"},
}
DEFAULT_BACKEND_ORDER = ("flash", "cudnn", "efficient", "math")  # the order torch tries them in


def measured_source(host: str, when: str, version: str) -> str:
    return f"measured on {host} at {when} by commbench {version}"


def gemm_fraction(point: dict, peak: float) -> float:
    return 2.0 * point["m"] * point["n"] * point["k"] / point["seconds"] / peak


def fastest_gemm(measurements: dict) -> float:
    return max(2.0 * p["m"] * p["n"] * p["k"] / p["seconds"] for p in measurements["gemm"])


def _fp8_figures(measurements: dict) -> tuple[float, list] | None:
    """(peak_flops_fp8: the fastest FP8 GEMM measured, its surface points as fractions of it), or None."""
    points = measurements.get("gemm_fp8")
    if not points:
        return None
    peak = fastest_gemm({"gemm": points})
    return peak, [[p["m"], p["n"], p["k"], min(1.0, gemm_fraction(p, peak))] for p in points]


def gemm_surface(measurements: dict, peak: float) -> dict:
    surface: dict[str, list] = {}
    for point in measurements["gemm"]:
        surface.setdefault(point["dtype"], []).append(
            [point["m"], point["n"], point["k"], min(1.0, gemm_fraction(point, peak))]
        )
    return surface


def gemm_curve(surface_points: list) -> list:
    """[[FLOPs, fraction], ...] sorted by FLOPs: the median fraction of the shapes of equal FLOPs."""
    by_flops: dict[float, list] = {}
    for m, n, k, fraction in surface_points:
        by_flops.setdefault(2.0 * m * n * k, []).append(fraction)
    return [[flops, statistics.median(fractions)] for flops, fractions in sorted(by_flops.items())]


def _attention_flops(point: dict) -> float:
    return 2.0 * point["batch"] * point["heads"] * point["seq"] ** 2 * point["head_dim"]


def _backend_rates(points: list, peak: float) -> dict:
    forward = [_attention_flops(p) / p["forward_s"] / peak for p in points]
    backward = [
        BACKWARD_ATTENTION_FACTOR * _attention_flops(p) / max(p["forward_backward_s"] - p["forward_s"], 1e-9) / peak
        for p in points
    ]
    return {"forward": min(1.0, statistics.median(forward)), "backward": min(1.0, statistics.median(backward))}


def attention_rates(measurements: dict, peak: float, device_type: str) -> dict:
    """Per implementation the step model names: each SDPA backend that ran, and "sdpa" (torch's own
    choice, what eager torch code gets) for the first of DEFAULT_BACKEND_ORDER that ran."""
    dtype = measurements["dtypes"][0]
    rates = {}
    for backend in DEFAULT_BACKEND_ORDER:
        points = [p for p in measurements["attention"] if p["backend"] == backend and p["dtype"] == dtype]
        if points and backend in IMPLEMENTATIONS[device_type]:
            rates[IMPLEMENTATIONS[device_type][backend]] = _backend_rates(points, peak)
            rates.setdefault("sdpa", rates[IMPLEMENTATIONS[device_type][backend]])
    return rates


def attention_efficiency(measurements: dict, peak: float) -> tuple[float, str]:
    """(fraction of peak for forward + backward together, the backend it is of)."""
    dtype = measurements["dtypes"][0]
    for backend in DEFAULT_BACKEND_ORDER:
        points = [p for p in measurements["attention"] if p["backend"] == backend and p["dtype"] == dtype]
        if points:
            fractions = [
                (1 + BACKWARD_ATTENTION_FACTOR) * _attention_flops(p) / p["forward_backward_s"] / peak for p in points
            ]
            return min(1.0, statistics.median(fractions)), backend
    raise ValueError("no attention backend ran on this device")


def copy_rate(measurements: dict) -> float:
    dtype = measurements["dtypes"][0]
    return next(
        p["bytes"] / p["seconds"] for p in measurements["elementwise"] if p["kind"] == "copy" and p["dtype"] == dtype
    )


def elementwise_efficiency(measurements: dict) -> float:
    dtype, copy = measurements["dtypes"][0], copy_rate(measurements)
    rates = [
        p["bytes"] / p["seconds"] / copy
        for p in measurements["elementwise"]
        if p["kind"] != "copy" and p["dtype"] == dtype
    ]
    return min(1.0, statistics.median(rates))


def optimizer_efficiency(measurements: dict) -> float:
    optimizer = measurements["optimizer"]
    traffic = optimizer["params"] * PRECISIONS["fp32"].optimizer_traffic_bytes
    return min(1.0, traffic / optimizer["seconds"] / copy_rate(measurements))


def autograd_op(measurements: dict, figure) -> dict:
    """The autograd_op_s entry, where the calibration timed it (older measurements did not)."""
    if "autograd_op" not in measurements:
        return {}
    timed = measurements["autograd_op"]
    return {
        "autograd_op_s": figure(
            {"forward": timed["forward_s"], "backward": timed["backward_s"]},
            "one-element multiplies with requires_grad, chained: seconds per op forward "
            "(dispatch + graph) and backward (its node run)",
        )
    }


def processor_json(
    measurements: dict, facts: dict, host: str, when: str, version: str, peak_flops: float | None = None
) -> dict:
    """The processor description (presets' format) of one calibration; `peak_flops` a datasheet
    peak to take fractions of instead of the fastest GEMM measured."""
    measured = measured_source(host, when, version)
    fastest = fastest_gemm(measurements)
    if peak_flops is not None and peak_flops < fastest:
        raise ValueError(f"the peak given ({peak_flops:.4g} FLOP/s) is below a GEMM measured here ({fastest:.4g})")
    peak = peak_flops or fastest
    surface = gemm_surface(measurements, peak)
    fp8 = _fp8_figures(measurements)
    reference_dtype = measurements["dtypes"][0]
    repeats = f"median of {measurements['repeats']} runs"
    attention, default_backend = attention_efficiency(measurements, peak)
    device_type = "cuda" if facts.get("cuda") and "CPU" not in facts["name"] else "cpu"

    def figure(value, how: str) -> dict:
        return {"value": value, "source": f"{measured}: {how}"}

    return {
        "kind": "processor",
        "name": f"{facts['name']} (calibrated on {host})",
        "peak_flops_bf16": (
            {"value": peak, "source": "given to commbench calibrate (--peak-flops)"}
            if peak_flops
            else figure(peak, "the fastest GEMM measured, not a datasheet figure")
        ),
        **(
            {}
            if fp8 is None
            else {
                "peak_flops_fp8": figure(
                    fp8[0], "the fastest FP8 GEMM measured (torch._scaled_mm, E4M3), not a datasheet figure"
                )
            }
        ),
        **(
            {"compute_capability": figure(facts["compute_capability"], "torch.cuda.get_device_properties")}
            if facts.get("compute_capability")
            else {}
        ),
        "memory_bytes": figure(facts["memory_bytes"], "the device's memory as torch reports it"),
        "memory_bandwidth_bytes_per_s": figure(copy_rate(measurements), f"copy kernel, read + write bytes, {repeats}"),
        "gemm_efficiency": figure(
            gemm_curve(surface[reference_dtype]),
            f"{reference_dtype} GEMMs of the surface by FLOPs alone (median of equal FLOPs)",
        ),
        "gemm_surface": figure(
            {**surface, **({} if fp8 is None else {"fp8": fp8[1]})},
            f"torch.matmul per shape and dtype, 2MNK / seconds / peak, {repeats}"
            + ("; fp8: torch._scaled_mm (E4M3, per-tensor scales, BF16 out), of peak_flops_fp8" if fp8 else ""),
        ),
        "attention_efficiency": figure(
            attention,
            f"scaled_dot_product_attention ({default_backend}), causal, forward + backward, median over shapes",
        ),
        "attention_rates": figure(
            attention_rates(measurements, peak, device_type),
            f"scaled_dot_product_attention per backend, causal, {reference_dtype}, forward and "
            f"backward (x{BACKWARD_ATTENTION_FACTOR} forward FLOPs), median over shapes; "
            f"'sdpa' is the backend torch picks ({default_backend})",
        ),
        "elementwise_efficiency": figure(
            elementwise_efficiency(measurements), "add, GELU, LayerNorm, softmax: bytes/s over the copy's (median)"
        ),
        "kernel_overhead_s": figure(measurements["launch_s"], "one-element adds back to back, seconds per kernel"),
        **autograd_op(measurements, figure),
        "optimizer_efficiency": figure(
            optimizer_efficiency(measurements),
            "AdamW step over fp32 parameters, traffic the step model counts / seconds / memory bandwidth",
        ),
        "sm_count": figure(int(facts["sm_count"]), "the device's multiprocessors (a CPU: torch's threads)"),
        "measurements": figure({**measurements, "device": facts}, "the raw timings these figures come from"),
    }


def summary_lines(description: dict) -> list[str]:
    """A few lines saying what was measured, for the terminal."""
    value = {key: entry["value"] for key, entry in description.items() if isinstance(entry, dict) and "value" in entry}
    lines = [
        f"{description['name']}",
        f"  peak (fastest GEMM or given): {value['peak_flops_bf16'] / 1e12:.3f} TFLOP/s; "
        f"copy bandwidth {value['memory_bandwidth_bytes_per_s'] / 1e9:.1f} GB/s; "
        f"elementwise {value['elementwise_efficiency']:.2f} of it; optimizer {value['optimizer_efficiency']:.2f} of it",
        f"  kernel overhead {value['kernel_overhead_s'] * 1e6:.2f} us; attention (default backend) "
        f"{value['attention_efficiency']:.2f} of peak",
    ]
    if "autograd_op_s" in value:
        op = value["autograd_op_s"]
        lines.append(
            f"  eager autograd op: {op['forward'] * 1e6:.2f} us forward, {op['backward'] * 1e6:.2f} us backward"
        )
    for dtype, points in value["gemm_surface"].items():
        fractions = [point[3] for point in points]
        lines.append(f"  GEMM {dtype}: {len(points)} shapes, {min(fractions):.2f} to {max(fractions):.2f} of peak")
    for name, rates in value["attention_rates"].items():
        lines.append(f"  attention {name}: forward {rates['forward']:.2f}, backward {rates['backward']:.2f} of peak")
    return lines


def _keyed(points: list, key_fields: tuple[str, ...]) -> dict:
    return {tuple(point[name] for name in key_fields): point for point in points}


KEYS = {
    "gemm": ("dtype", "m", "n", "k"),
    "attention": ("dtype", "backend", "batch", "heads", "seq", "head_dim"),
    "elementwise": ("dtype", "kind", "bytes"),
}
SECONDS = {"gemm": ("seconds",), "attention": ("forward_s", "forward_backward_s"), "elementwise": ("seconds",)}


def combine(calibrations: list[dict], statistic=statistics.median) -> dict:
    """One set of measurements from several of the same device (ranks timing at once: max, the pace
    of the slowest; calibrations taken at different times: median): every timing that more than one
    calibration has is replaced by `statistic` of its values; the others are kept as they are."""
    first = calibrations[0]
    combined = {"dtypes": first["dtypes"], "repeats": first["repeats"]}
    for kind, key_fields in KEYS.items():
        groups: dict = {}
        for calibration in calibrations:
            for key, point in _keyed(calibration[kind], key_fields).items():
                groups.setdefault(key, []).append(point)
        combined[kind] = [
            {**points[0], **{name: statistic([p[name] for p in points]) for name in SECONDS[kind]}}
            for points in groups.values()
        ]
    combined["launch_s"] = statistic([c["launch_s"] for c in calibrations])
    timed = [c["autograd_op"] for c in calibrations if "autograd_op" in c]
    if timed:
        combined["autograd_op"] = {name: statistic([t[name] for t in timed]) for name in ("forward_s", "backward_s")}
    combined["optimizer"] = {
        "params": first["optimizer"]["params"],
        "seconds": statistic([c["optimizer"]["seconds"] for c in calibrations]),
    }
    return combined
