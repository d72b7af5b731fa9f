"""Measure this device's compute and write it as a processor description that `plan --processor` reads.

Times, on one CUDA GPU or on this CPU (commbench/measure/calibrate.py says exactly how):
  GEMMs over a grid of (M, N, K) in each dtype asked (bf16 and fp16 on CUDA, fp32 on CPU);
  causal attention forward and backward for each SDPA backend that runs here (flash,
  memory-efficient, cuDNN, math) over (sequence, heads, head dim); elementwise kernels (copy, add,
  GELU, LayerNorm, softmax) as bytes per second; the cost of one tiny kernel; an AdamW step.
CUDA events time GPU work; the host clock times CPU work.

The output is a processor JSON in the format of commbench/modeling/presets/processor-*.json:
every figure {"value": ..., "source": "measured on HOST at TIME by commbench VERSION: how"},
with the raw timings under "measurements". Fractions are of the fastest GEMM measured unless
--peak-flops gives a datasheet peak.

  commbench calibrate --quick                       a small grid: seconds on a 2-core CPU
  commbench calibrate --out h100-node.json          full grid on this node's GPU
  commbench plan --model llama2-7b --gpus 8 --processor h100-node.json ...
  commbench submit --command calibrate --nodes 4 --ntasks-per-node 1 --gpus-per-node 1 -- --quick
        one task per node: each node type calibrated where it runs (JOB_DIR/processor-HOST.json)

--out may be a folder: the file is then FOLDER/processor-HOST.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
from pathlib import Path

from commbench.config_options import add_config_arguments, config_values
from commbench.data.rundir import atomic_write_text, prepare_output_folder
from commbench.dtypes import CALIBRATED_DTYPES, CALIBRATION_DTYPES, GEMM_DTYPES
from commbench.errors import UsageError
from commbench.measure.options import CalibrateConfig
from commbench.measure.progress import Progress

HELP = "measure this device's GEMM, attention, elementwise, launch and optimizer rates into a processor JSON"

PROBE_BYTES = 64 * 1024  # more than a full grid's description takes
LIMITS = {"gemm": (1, 65536), "seq": (16, 131072), "heads": (1, 256), "head_dim": (8, 256)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of CalibrateConfig, from its field docs."""
    add_config_arguments(parser, CalibrateConfig)


def config_from_args(args: argparse.Namespace) -> CalibrateConfig:
    return CalibrateConfig(**config_values(args, CalibrateConfig))


def main(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    request = checked_request(cfg)
    out = writable_output(cfg.out, request["host"])
    from commbench.measure import calibrate as measuring

    if cfg.threads:
        measuring.torch.set_num_threads(cfg.threads)
    device = measuring.torch.device(request["device"])
    grid = request["grid"]
    fp8 = cfg.fp8
    if fp8 and (why := measuring.fp8_gemm_unavailable(device)):
        raise UsageError(f"--fp8: {why}")
    with Progress(cfg.progress, measuring.steps(grid, request["dtypes"], fp8), "calibrating", 36) as progress:
        measurements = measuring.measure(device, request["dtypes"], grid, progress.advance, fp8=fp8)
    description = describe(measurements, measuring.device_facts(device), request["host"], cfg.peak_flops)
    atomic_write_text(out, json.dumps(description, indent=1) + "\n")  # a full disk keeps the old file whole
    if cfg.json:
        json.dump(description, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_summary(description, out)
    return 0


def describe(measurements: dict, facts: dict, host: str, peak_flops: float | None) -> dict:
    from commbench import __version__
    from commbench.data.rundir import utc_now
    from commbench.measure.processor_json import processor_json

    try:
        return processor_json(measurements, facts, host, utc_now(), __version__, peak_flops)
    except ValueError as error:
        raise UsageError(str(error)) from None


def checked_request(cfg: CalibrateConfig) -> dict:
    """Everything asked, checked before any measuring starts (bad input: one line, exit 2)."""
    changes = grid_changes(cfg)
    device = resolve_device(cfg.device)
    dtypes = parse_dtypes(cfg.dtype, device)
    from dataclasses import replace

    from commbench.measure.calibrate import GRIDS  # torch is needed from here on anyway

    grid = GRIDS[(device, "quick" if cfg.quick else "full")]
    return {"device": device, "dtypes": dtypes, "grid": replace(grid, **changes), "host": socket.gethostname()}


def grid_changes(cfg: CalibrateConfig) -> dict:
    """The options checked without torch or a device (what `commbench submit` checks before queueing):
    the changes they make to the grid."""
    if cfg.dtype is not None:
        for dtype in split(cfg.dtype, "--dtype"):
            if dtype not in GEMM_DTYPES:
                raise UsageError(f"--dtype {dtype!r}: unknown; choose from {', '.join(GEMM_DTYPES)}")
    changes = {}
    if cfg.gemm_dims:
        changes["gemm_dims"] = tuple(
            bounded(int_item(item, "--gemm-dims"), "gemm", "--gemm-dims")
            for item in split(cfg.gemm_dims, "--gemm-dims")
        )
    if cfg.gemm_shapes:
        changes["gemm_shapes"] = tuple(
            shape(item, "--gemm-shapes", ("gemm", "gemm", "gemm")) for item in split(cfg.gemm_shapes, "--gemm-shapes")
        )
    if cfg.attention:
        changes["attention"] = tuple(
            shape(item, "--attention", ("seq", "heads", "head_dim")) for item in split(cfg.attention, "--attention")
        )
    if cfg.repeats is not None:
        if not 1 <= cfg.repeats <= 1000:
            raise UsageError(f"--repeats must be 1 to 1000, not {cfg.repeats}")
        changes["repeats"] = cfg.repeats
    if cfg.threads is not None and not 1 <= cfg.threads <= 1024:
        raise UsageError(f"--threads must be 1 to 1024, not {cfg.threads}")
    if cfg.peak_flops is not None and not 0 < cfg.peak_flops < 1e19:
        raise UsageError(f"--peak-flops must be a positive FLOP/s figure, not {cfg.peak_flops}")
    return changes


def resolve_device(asked: str) -> str:
    import torch

    has_gpu = torch.cuda.is_available()
    if asked == "cuda" and not has_gpu:
        raise UsageError("--device cuda: no CUDA device here (torch.cuda.is_available() is false)")
    if asked == "auto":
        return "cuda" if has_gpu else "cpu"
    return asked


def parse_dtypes(text: str | None, device: str) -> tuple[str, ...]:
    if text is None:
        return CALIBRATED_DTYPES[device]
    dtypes = tuple(dict.fromkeys(split(text, "--dtype")))
    for dtype in dtypes:
        if dtype not in CALIBRATION_DTYPES[device]:
            raise UsageError(
                f"--dtype {dtype}: not calibrated on {device} (there: {', '.join(CALIBRATION_DTYPES[device])})"
            )
    return dtypes


def split(text: str, flag: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{flag}: empty list")
    return items


def int_item(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a whole number") from None


def bounded(value: int, kind: str, flag: str) -> int:
    low, high = LIMITS[kind]
    if not low <= value <= high:
        raise UsageError(f"{flag}: {value} is out of range ({kind} {low} to {high})")
    return value


def shape(text: str, flag: str, kinds: tuple[str, ...]) -> tuple[int, ...]:
    parts = text.lower().split("x")
    if len(parts) != len(kinds):
        raise UsageError(f"{flag}: {text!r} is not {'x'.join(k.upper() for k in kinds)}")
    return tuple(bounded(int_item(part, flag), kind, flag) for part, kind in zip(parts, kinds))


def writable_output(out: str | None, host: str) -> Path:
    """The file to write, proven writable now rather than after minutes of measuring: a probe the
    size of a description is written beside it and removed (a full disk takes an empty file)."""
    path = Path(out or f"processor-{host}.json")
    if path.is_dir() or (out or "").endswith(("/", os.sep)):  # "DIR/" names a folder, made if new
        path = prepare_output_folder(path) / f"processor-{host}.json"
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        with open(probe, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except (OSError, ValueError) as error:
        raise UsageError(f"--out {path}: cannot write there ({getattr(error, 'strerror', None) or error})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return path


def print_summary(description: dict, out: Path) -> None:
    from commbench.measure.processor_json import summary_lines

    for line in summary_lines(description):
        print(line)
    print(f"written to {out} (commbench plan --processor {out})")
