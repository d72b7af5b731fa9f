"""One home for every fact about an element type that more than one part of commbench needs.

Per dtype: the name commbench records (nccl-tests' spelling: float, half, bfloat16 ...), its bytes
per element, the torch dtype that measures it, whether gloo has kernels for it, the short precision
name the planner and `commbench calibrate` use (fp32, bf16, fp16), and the other spellings it is
met under: `--dtype` aliases, nccl-tests' printed type names, and the c10 ScalarType names that
torch's profiler writes into traces (record_param_comms). Every spelling names one dtype, so one
lookup serves the run options, the nccl-tests reader, the trace reader and the planner.
Torch-free: the modelling, data and trace layers import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.errors import UsageError


@dataclass(frozen=True)
class Dtype:
    """The facts of one element type."""

    name: str  # commbench's name, also the records' `dtype` (nccl-tests' spelling)
    bytes: int  # per element
    torch: str | None = None  # torch's attribute (torch.float32); None: commbench does not measure it
    gloo: bool = False  # gloo's collectives have kernels for it (torch 2.13: all but bfloat16)
    precision: str | None = None  # the short name of the planner's GEMM precisions (fp32, bf16, fp16)
    spellings: tuple[str, ...] = ()  # other names: --dtype aliases, nccl-tests and c10 type names


# measurable first, in `--dtype --help` order; then the types only read from logs and traces
DTYPES: dict[str, Dtype] = {
    dtype.name: dtype
    for dtype in (
        Dtype("float", 4, "float32", gloo=True, precision="fp32", spellings=("float32", "fp32")),
        Dtype("half", 2, "float16", gloo=True, precision="fp16", spellings=("float16", "fp16")),
        Dtype("bfloat16", 2, "bfloat16", precision="bf16", spellings=("bf16",)),
        Dtype("double", 8, "float64", gloo=True, spellings=("float64", "fp64")),
        Dtype("int8", 1, "int8", gloo=True, spellings=("char",)),
        Dtype("uint8", 1, "uint8", gloo=True, spellings=("byte",)),
        Dtype("int32", 4, "int32", gloo=True, spellings=("int",)),
        Dtype("int64", 8, "int64", gloo=True, spellings=("long",)),
        Dtype("uint32", 4),
        Dtype("uint64", 8),
        Dtype("int16", 2, spellings=("short",)),
        Dtype("uint16", 2),
        Dtype("bool", 1),
        Dtype("f8e4m3", 1, spellings=("fp8_e4m3", "float8_e4m3fn", "float8_e4m3fnuz")),
        Dtype("f8e5m2", 1, spellings=("fp8_e5m2", "float8_e5m2", "float8_e5m2fnuz")),
        Dtype("complexhalf", 4),
        Dtype("complexfloat", 8),
        Dtype("complexdouble", 16),
    )
}
_BY_SPELLING = {spelling: dtype for dtype in DTYPES.values() for spelling in (dtype.name, *dtype.spellings)}

MEASURED_DTYPES = tuple(name for name, dtype in DTYPES.items() if dtype.torch)
GLOO_DTYPES = tuple(name for name, dtype in DTYPES.items() if dtype.torch and dtype.gloo)
# the precisions a processor preset's gemm_surface is keyed by and `commbench calibrate` times
GEMM_DTYPES = ("bf16", "fp16", "fp32")
# the formats quantised GEMMs run in (commbench.modeling.recipes), bytes per element without scales;
# a processor's gemm_surface may also hold points of these (fractions of its FP8 / FP4 peak)
QUANTISED_GEMM_BYTES = {"fp8": 1.0, "fp4": 0.5}
SURFACE_DTYPES = GEMM_DTYPES + tuple(QUANTISED_GEMM_BYTES)
# what `commbench calibrate` times on each device by default: the tensor-core precisions on GPUs;
# CPUs multiply float32 far faster than the 16-bit types, so only fp32 is timed there
CALIBRATED_DTYPES = {"cpu": ("fp32",), "cuda": ("bf16", "fp16")}
CALIBRATION_DTYPES = {"cpu": ("fp32",), "cuda": GEMM_DTYPES}  # what --dtype may ask for


def lookup(spelling: str) -> Dtype | None:
    """The dtype any of its spellings names (case-insensitive), or None."""
    return _BY_SPELLING.get(spelling.lower())


def element_bytes(spelling: str) -> int | None:
    """Bytes per element of the dtype a name spells, or None for a name no table knows."""
    dtype = lookup(spelling)
    return dtype.bytes if dtype else None


def precision_bytes(short: str) -> float:
    """Bytes per element of a GEMM precision (fp32, bf16, fp16, fp8, fp4); KeyError for any other name."""
    if short in QUANTISED_GEMM_BYTES:
        return QUANTISED_GEMM_BYTES[short]
    if short not in GEMM_DTYPES:
        raise KeyError(short)
    return _BY_SPELLING[short].bytes


def canonical_dtype(spelling: str) -> str:
    """The recorded name of a dtype commbench can measure, from any of its spellings; else UsageError."""
    dtype = lookup(spelling)
    if dtype is None or dtype.torch is None:
        raise UsageError(f"unknown dtype {spelling.lower()!r}; choose from {', '.join(MEASURED_DTYPES)}")
    return dtype.name


def check_gloo_supports(name: str, where: str) -> None:
    """UsageError unless gloo can run collectives on `name`; `where` says why gloo is the backend."""
    if name not in GLOO_DTYPES:
        raise UsageError(
            f"dtype {name} is not supported by gloo ({where}); use one of {', '.join(GLOO_DTYPES)} "
            "or run on GPUs with NCCL (--backend nccl)"
        )
