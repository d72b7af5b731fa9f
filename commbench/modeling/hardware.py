"""Hardware kept in three separate descriptions, as Calculon does: processor, network, system.

Each lives in presets/<kind>-<name>.json, and every figure there is {"value": ..., "source": ...}
so a reader can check where it came from; figures that are modelling defaults rather than
datasheet numbers say so in their source. A processor can also come from a JSON file of the same
format anywhere (load_processor("path/to/cpu.json")): a device measured rather than a preset,
such as the file `commbench calibrate` writes.

Processor JSON schema (every figure {"value": V, "source": "where V came from"}; "source" says
datasheet + column, paper + table, "measured on HOST at TIME by commbench VERSION", or "fitted on
the calibration half of bench/RESULTS-published.md"):

  required
    name                          text
    peak_flops_bf16               FLOP/s, the reference peak: dense bf16 tensor-core on a GPU, the
                                  fp32 peak on a CPU. MFU divides by it; every "fraction" below is
                                  a fraction of it, whatever the dtype
    memory_bytes                  bytes of device memory
    memory_bandwidth_bytes_per_s  bytes/s of device memory (datasheet, or a measured large copy)
    gemm_efficiency               [[FLOPs of one GEMM, fraction], ...]: the FLOPs-only curve, used
                                  where no gemm_surface is given (log-linear interpolation)
    attention_efficiency          fraction reached by attention forward and backward, used where
                                  attention_rates does not name the implementation priced
  optional (a missing field leaves the model as without it; named in parentheses)
    peak_flops_fp8                FLOP/s, dense FP8 tensor-core peak (Hopper, Blackwell; MXFP8 runs at
                                  it on Blackwell); GEMMs of an FP8 recipe are priced from it (no
                                  FP8: an FP8 recipe is refused)
    peak_flops_fp4                FLOP/s, dense FP4 tensor-core peak (Blackwell: NVFP4) (no FP4)
    power_w                       watts, the maximum thermal design power (not reported)
    compute_capability            text, the CUDA compute capability ("9.0" Hopper, "10.0" Blackwell):
                                  which Transformer Engine recipes its tensor cores run
                                  (commbench.modeling.recipes) (bf16 only)
    gemm_surface's "fp8" and "fp4" points are fractions of peak_flops_fp8 / peak_flops_fp4, the
    others of peak_flops_bf16; gemm_efficiency is read as a fraction of the peak of the format a
    GEMM runs in
    elementwise_efficiency        fraction of memory bandwidth that norms, activations and
                                  residual adds reach (1.0)
    sm_count                      integer: streaming multiprocessors (a CPU: cores) a GEMM's output
                                  tiles are spread over, one tile per SM per wave (no wave model)
    gemm_tile                     [tile_m, tile_n]: the output tile one SM computes per wave
                                  (no wave model)
    gemm_surface                  {dtype: [[M, N, K, fraction], ...]}: GEMMs C[M,N] = A[M,K] B[K,N]
                                  timed at these shapes, fraction = 2MNK / seconds / peak, as
                                  measured (wave quantisation included). dtype is "bf16", "fp16"
                                  or "fp32". Where given, a GEMM's time comes from its shape
                                  (compute.gemm_seconds) rather than from gemm_efficiency
    attention_rates               {implementation: {"forward": fraction, "backward": fraction}}
                                  for "flash2", "flash3", "cudnn", "sdpa-math", ... (the names
                                  in compute.ATTENTION_IMPLEMENTATIONS); fraction = attention FLOPs
                                  (causal pairs counted once) / seconds / peak (attention_efficiency)
    kernel_overhead_s             seconds each kernel costs beyond its work: launch, tail and
                                  the framework's dispatch, as a tiny kernel measures it (0)
    autograd_op_s                 {"forward": s, "backward": s}: what one eager autograd op costs
                                  beyond its work, forward (dispatch + recording the graph) and
                                  backward (running its node), as a tiny op with requires_grad
                                  measures it; priced instead of kernel_overhead_s by an execution
                                  whose ops run eagerly on this processor's own thread (torch-eager
                                  on CPU) (not priced)
    optimizer_efficiency          fraction of memory bandwidth a multi-tensor Adam step's traffic
                                  reaches (1.0)
    quantised_gemm_efficiency     {"fp8": factor, "fp4": factor}: the GEMM curve (or surface)
                                  multiplied by it for GEMMs run in that format, over that format's
                                  peak: how much less of its peak a quantised GEMM reaches than a
                                  BF16 one of the BF16 peak (at twice the math rate a GEMM meets the
                                  power limit at lower clocks, and MX/NV formats add scale handling)
                                  (1.0: the BF16 fraction)
    execution_gemm_efficiency     {execution preset: factor}: the GEMM efficiency (curve or surface)
                                  that framework's stack reaches on this processor, as a factor of
                                  the processor's (1.0 for an execution not named)

A system is hosts of `gpus_per_host` processors whose GPUs sit in NVLink domains of
`nvlink_domain` GPUs (the scale-up network, the `intra` tier), the domains joined by a scale-out
network (the `inter` tier). On a DGX/HGX node the domain is the host (8 and 8); on a GB200/GB300
NVL72 rack a host (compute tray) holds 4 GPUs and one NVLink domain 72, so a group of 16 ranks in
one rack talks over NVLink although it spans four hosts. The domain is a whole number of hosts.
A NIC-based network with `links_per_node` NICs per host gives each GPU
bandwidth * links_per_node / gpus_per_host when every GPU of the host talks at once, which is what
happens when all groups of a layout run their collectives together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from commbench.data.safe_read import CONFIG, load_json
from commbench.dtypes import SURFACE_DTYPES
from commbench.errors import UsageError
from commbench.scopes import NODE_TIERS

if TYPE_CHECKING:  # recipes imports this module's Processor
    from commbench.modeling.recipes import ComputeRecipe

PRESET_DIR = Path(__file__).parent / "presets"


# gemm_surface: per dtype, (M, N, K, fraction of peak) points
Surface = tuple[tuple[str, tuple[tuple[float, float, float, float], ...]], ...]


@dataclass(frozen=True)
class Processor:
    name: str
    peak_flops: float  # the JSON's peak_flops_bf16: dense bf16 tensor-core FLOP/s on a GPU, fp32 on a CPU
    memory_bytes: float
    memory_bandwidth: float  # HBM bytes/s
    gemm_curve: tuple[tuple[float, float], ...]  # (FLOPs of one GEMM, fraction of peak)
    attention_efficiency: float
    # fraction of memory_bandwidth that norms, activation functions and residual adds reach: they
    # are priced as memory traffic, and a processor whose activation functions are compute-bound
    # (a CPU evaluating erf) moves their bytes slower than a copy; 1.0 unless measured
    elementwise_efficiency: float = 1.0
    # the kernel-by-kernel figures (see the schema above); None / empty: not described
    sm_count: int | None = None
    gemm_tile: tuple[int, int] | None = None
    gemm_surface: Surface = ()
    attention_rates: tuple[tuple[str, float, float], ...] = ()  # (implementation, forward, backward)
    kernel_overhead_s: float = 0.0
    autograd_op_s: tuple[float, float] = (0.0, 0.0)  # (forward, backward) of one eager autograd op
    optimizer_efficiency: float = 1.0
    execution_gemm_efficiency: tuple[tuple[str, float], ...] = ()
    quantised_gemm_efficiency: tuple[tuple[str, float], ...] = ()  # (format "fp8"/"fp4", factor on the curve)
    # the dtype the job's GEMMs run in, which picks the gemm_surface points they are priced from
    # (TrainingJob sets it from its precision; a bf16 job on an fp32-only surface falls back to the curve)
    gemm_dtype: str = "bf16"
    peak_flops_fp8: float | None = None  # dense FP8 tensor-core FLOP/s; None: the processor has no FP8
    peak_flops_fp4: float | None = None  # dense FP4 tensor-core FLOP/s; None: no FP4
    power_w: float | None = None  # maximum thermal design power
    compute_capability: str | None = None  # CUDA compute capability; None: not a CUDA GPU, or not described
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def for_dtype(self, dtype: str) -> Processor:
        """This processor pricing GEMMs in `dtype`."""
        return self if dtype == self.gemm_dtype else replace(self, gemm_dtype=dtype)

    def for_recipe(self, recipe: ComputeRecipe) -> Processor:
        """This processor running GEMMs quantised by `recipe` (commbench.modeling.recipes): at the
        peak of the recipe's format, priced from that format's surface points where measured."""
        if not recipe.quantised:
            return self
        from commbench.modeling.recipes import processor_peak

        peak = processor_peak(self, recipe)
        if peak is None:  # checked_recipe refuses such a recipe before a processor is priced with it
            raise UsageError(f"{self.name} has no {recipe.peak} peak for {recipe.name}")
        quantised = replace(self, peak_flops=peak, gemm_dtype=recipe.peak)
        return quantised.with_gemm_scale(dict(self.quantised_gemm_efficiency).get(recipe.peak, 1.0))

    def for_execution(self, execution: str) -> Processor:
        """This processor as the named execution's stack sees it (execution_gemm_efficiency)."""
        return self.with_gemm_scale(dict(self.execution_gemm_efficiency).get(execution, 1.0))

    def with_gemm_scale(self, scale: float) -> Processor:
        """This processor with every GEMM efficiency (curve and surface) multiplied by `scale`, capped at 1."""
        if scale == 1.0:
            return self
        curve = tuple((flops, min(1.0, e * scale)) for flops, e in self.gemm_curve)
        surface = tuple(
            (dtype, tuple((m, n, k, min(1.0, e * scale)) for m, n, k, e in points))
            for dtype, points in self.gemm_surface
        )
        return replace(self, gemm_curve=curve, gemm_surface=surface)

    def surface(self, dtype: str) -> np.ndarray | None:
        """The gemm_surface points of one dtype as an array of rows (M, N, K, fraction), or None."""
        for name, points in self.gemm_surface:
            if name == dtype:
                return np.asarray(points, dtype=float)
        return None

    def attention_rate(self, implementation: str) -> tuple[float, float]:
        """(forward, backward) fraction of peak of one attention implementation; attention_efficiency
        for both where the processor does not describe it."""
        for name, forward, backward in self.attention_rates:
            if name == implementation:
                return forward, backward
        return self.attention_efficiency, self.attention_efficiency

    @property
    def elementwise_bandwidth(self) -> float:
        return self.memory_bandwidth * self.elementwise_efficiency

    def gemm_efficiency(self, flops: float | np.ndarray) -> np.ndarray:
        """Fraction of peak one GEMM of `flops` reaches: log-linear interpolation of the curve."""
        points = np.asarray(self.gemm_curve)
        efficiency: np.ndarray = np.interp(np.log10(np.maximum(flops, 1.0)), np.log10(points[:, 0]), points[:, 1])
        return efficiency

    def gemm_time(self, flops: float | np.ndarray) -> np.ndarray:
        seconds: np.ndarray = flops / (self.peak_flops * self.gemm_efficiency(flops))
        return seconds


@dataclass(frozen=True)
class Network:
    name: str
    bandwidth: float  # bytes/s each way, per GPU (links_per_node None) or per NIC
    efficiency: float  # busbw / link rate reached by large collectives
    latency: float  # seconds added to every collective on this network
    links_per_node: int | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def ranks_per_link(self, gpus_per_host: int) -> int:
        """GPUs of a host that share one of its links (1 with a NIC per GPU or per-GPU bandwidth)."""
        return 1 if not self.links_per_node else max(1, gpus_per_host // self.links_per_node)

    def busbw_per_rank(self, gpus_per_host: int) -> float:
        """Bus bandwidth (bytes/s) one rank gets when all ranks of its host communicate at once."""
        share = 1.0 if self.links_per_node is None else min(1.0, self.links_per_node / gpus_per_host)
        return self.bandwidth * self.efficiency * share


@dataclass(frozen=True)
class System:
    name: str
    processor: Processor
    gpus_per_host: int  # GPUs one host (a Slurm node, a compute tray) holds; NIC shares are per host
    intra: Network  # the scale-up network inside one NVLink domain
    inter: Network  # the scale-out network between domains
    nvlink_domain: int = 0  # GPUs in one NVLink domain, a whole number of hosts; 0: the host

    def __post_init__(self) -> None:
        if self.nvlink_domain == 0:
            object.__setattr__(self, "nvlink_domain", self.gpus_per_host)
        if self.nvlink_domain < self.gpus_per_host or self.nvlink_domain % self.gpus_per_host:
            raise UsageError(
                f"an NVLink domain of {self.nvlink_domain} GPUs is not a whole number of {self.gpus_per_host}-GPU hosts"
            )

    @property
    def domain_is_host(self) -> bool:
        return self.nvlink_domain == self.gpus_per_host

    def with_inter(self, network: Network) -> System:
        return replace(self, inter=network, name=f"{self.name} + {network.name}")

    def with_gpus_per_host(self, gpus_per_host: int) -> System:
        """Hosts of another size; where the domain was the host it stays the host (a DGX with 4
        GPUs per node has 4-GPU domains), else the domain is kept if the new hosts divide it."""
        domain = gpus_per_host if self.domain_is_host else self.nvlink_domain
        return replace(self, gpus_per_host=gpus_per_host, nvlink_domain=domain)

    def with_nvlink_domain(self, nvlink_domain: int) -> System:
        return replace(self, nvlink_domain=nvlink_domain)

    def with_processor(self, processor: Processor) -> System:
        return replace(self, processor=processor, name=f"{self.name} with {processor.name}")


def _read(kind: str, name: str) -> dict[str, Any]:
    # the name picks one of the preset files; it never becomes a path of its own (a long or odd one
    # would make the file system, not this message, answer)
    names = preset_names(kind)
    if name.lower() not in names:
        raise UsageError(f"unknown {kind} {name!r}: presets are {', '.join(names)}")
    preset: dict[str, Any] = json.loads((PRESET_DIR / f"{kind}-{name.lower()}.json").read_text(encoding="utf-8"))
    return preset


def _values(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Split {"x": {"value": v, "source": s}} into ({"x": v}, {"x": s}); plain entries pass through."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, entry in raw.items():
        if isinstance(entry, dict) and "value" in entry:
            values[key], sources[key] = entry["value"], entry.get("source", "")
        else:
            values[key] = entry
    return values, sources


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem.split("-", 1)[1] for p in PRESET_DIR.glob(f"{kind}-*.json"))


def load_processor(name_or_path: str) -> Processor:
    """A preset by name, or a JSON file in the presets' format (a name ending in .json)."""
    if not str(name_or_path).endswith(".json"):
        return _preset_processor(name_or_path)
    path = Path(name_or_path)
    try:
        document = load_json(path, CONFIG)  # safe_read: regular file, size cap, depth and integer limits
    except ValueError:  # a name no file system takes
        raise UsageError(f"processor file {path} not found or not readable text") from None
    try:
        return processor_from_json(document)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise UsageError(
            f"{path}: not a processor description ({type(error).__name__}: {_short_error(error)}); "
            "see presets/processor-*.json"
        ) from None


def _short_error(error: Exception) -> str:
    """A KeyError's missing key (a name the format defines); any other error's text could quote a
    value of the file, so only its type is told."""
    return f"missing {error}" if isinstance(error, KeyError) else "a value of the wrong type or range"


@cache
def _preset_processor(name: str) -> Processor:
    return processor_from_json(_read("processor", name))


def processor_from_json(raw: dict[str, Any]) -> Processor:
    values, sources = _values(raw)
    return Processor(
        name=values["name"],
        peak_flops=float(values["peak_flops_bf16"]),
        memory_bytes=float(values["memory_bytes"]),
        memory_bandwidth=float(values["memory_bandwidth_bytes_per_s"]),
        gemm_curve=tuple((float(f), float(e)) for f, e in values["gemm_efficiency"]),
        attention_efficiency=float(values["attention_efficiency"]),
        elementwise_efficiency=_fraction(values.get("elementwise_efficiency", 1.0), "elementwise_efficiency"),
        sm_count=_positive_int(values["sm_count"], "sm_count") if "sm_count" in values else None,
        gemm_tile=_gemm_tile(values["gemm_tile"]) if "gemm_tile" in values else None,
        gemm_surface=_gemm_surface(values.get("gemm_surface", {})),
        attention_rates=_attention_rates(values.get("attention_rates", {})),
        kernel_overhead_s=_non_negative(values.get("kernel_overhead_s", 0.0), "kernel_overhead_s"),
        autograd_op_s=_autograd_op(values.get("autograd_op_s", {"forward": 0.0, "backward": 0.0})),
        optimizer_efficiency=_fraction(values.get("optimizer_efficiency", 1.0), "optimizer_efficiency"),
        execution_gemm_efficiency=tuple(
            (str(name), _fraction(factor, f"execution_gemm_efficiency[{name!r}]"))
            for name, factor in sorted(values.get("execution_gemm_efficiency", {}).items())
        ),
        quantised_gemm_efficiency=tuple(
            (str(name), _scale_factor(factor, f"quantised_gemm_efficiency[{name!r}]"))
            for name, factor in sorted(values.get("quantised_gemm_efficiency", {}).items())
        ),
        peak_flops_fp8=_optional_positive(values, "peak_flops_fp8"),
        peak_flops_fp4=_optional_positive(values, "peak_flops_fp4"),
        power_w=_optional_positive(values, "power_w"),
        compute_capability=str(values["compute_capability"]) if values.get("compute_capability") else None,
        sources=sources,
    )


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


def _optional_positive(values: dict[str, Any], name: str) -> float | None:
    if values.get(name) is None:
        return None
    value = float(values[name])
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a finite number > 0, not {value}")
    return value


def _non_negative(value: Any, name: str) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):  # also refuses nan
        raise ValueError(f"{name} must be a finite number >= 0, not {number}")
    return number


def _autograd_op(value: dict[str, Any]) -> tuple[float, float]:
    return (
        _non_negative(value["forward"], "autograd_op_s.forward"),
        _non_negative(value["backward"], "autograd_op_s.backward"),
    )


def _gemm_tile(value: Any) -> tuple[int, int]:
    tile_m, tile_n = value
    return _positive_int(tile_m, "gemm_tile[0]"), _positive_int(tile_n, "gemm_tile[1]")


def _gemm_surface(value: dict[str, Any]) -> Surface:
    surface = []
    for dtype, points in sorted(value.items()):
        if dtype not in SURFACE_DTYPES:
            raise ValueError(f"gemm_surface dtype {dtype!r} is not one of {', '.join(SURFACE_DTYPES)}")
        rows = []
        for m, n, k, fraction in points:
            m_, n_, k_ = (float(_positive_int(d, "gemm_surface shape")) for d in (m, n, k))
            rows.append((m_, n_, k_, _fraction(fraction, "gemm_surface fraction")))
        if not rows:
            raise ValueError(f"gemm_surface[{dtype!r}] has no points")
        surface.append((dtype, tuple(rows)))
    return tuple(surface)


def _attention_rates(value: dict[str, Any]) -> tuple[tuple[str, float, float], ...]:
    return tuple(
        (
            str(name),
            _fraction(rates["forward"], f"attention_rates[{name!r}].forward"),
            _fraction(rates["backward"], f"attention_rates[{name!r}].backward"),
        )
        for name, rates in sorted(value.items())
    )


def _scale_factor(value: Any, name: str) -> float:
    """A factor on a curve of fractions: above 0, at most 2 (the scaled curve is capped at 1 anyway)."""
    number = float(value)
    if not 0 < number <= 2:  # also refuses nan
        raise ValueError(f"{name} must be in (0, 2], not {number}")
    return number


def _fraction(value: Any, name: str) -> float:
    number = float(value)
    if not 0 < number <= 1:  # also refuses nan
        raise ValueError(f"{name} must be in (0, 1], not {number}")
    return number


@cache
def load_network(name: str) -> Network:
    values, sources = _values(_read("network", name))
    return Network(
        name=values["name"],
        bandwidth=float(values["bandwidth_bytes_per_s"]),
        efficiency=float(values["efficiency"]),
        latency=float(values["latency_s"]),
        links_per_node=values.get("links_per_node"),
        sources=sources,
    )


@cache
def load_system(name: str) -> System:
    values, _ = _values(_read("system", name))
    networks = {tier: load_network(values[f"{tier}_network"]) for tier in NODE_TIERS}
    return System(
        name=values["name"],
        processor=load_processor(values["processor"]),
        gpus_per_host=int(values["gpus_per_host"]),
        nvlink_domain=int(values["nvlink_domain"]),
        **networks,
    )
