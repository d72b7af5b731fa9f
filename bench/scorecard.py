"""Score commbench's step model against published training runs.

Run: python bench/scorecard.py [--runs bench/published/runs.csv] [--out bench/RESULTS-published.md]

Every row of the runs file (see bench/published/SOURCES.md) becomes a PlanSpec, the typed input
`commbench plan` builds too: the matching hardware preset (A100 -> dgx-a100, H100 -> dgx-h100),
the closest execution preset commbench has, the model as a preset name or a config.json written
from the row's shape. build_planner(spec).evaluate_layout prices the row's own layout (not the
planner's best), and the step time is compared with the published one. Published figures
that are a throughput are turned into seconds per step the way their source counts: tokens/s
from the global batch, TFLOP/s per GPU through the source's own FLOP formula.

Next to the model stands the simplest baseline (bench/published/SOURCES.md, models.md): step =
model FLOPs / (GPUs x peak x one MFU), the MFU fitted on the calibration half only. The
calibration rule is the one committed at the top of the results file before any prediction;
this script rewrites only what follows its marker line.

The PNG plot needs plotly with kaleido (pip install kaleido) and a Chromium; without them the
same figure is written as an HTML file and the script says so.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import UsageError
from commbench.modeling.hardware import load_system
from commbench.modeling.job import EXECUTIONS
from commbench.modeling.layout import Layout
from commbench.modeling.recipes import RECIPES, processor_peak
from commbench.modeling.spec import PlanSpec, build_planner

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "bench" / "published" / "runs.csv"
RESULTS = ROOT / "bench" / "RESULTS-published.md"
PLOT = ROOT / "bench" / "published" / "predicted-vs-published.png"
MARKER = "<!-- scorecard results: everything below is written by bench/scorecard.py -->"
HARDWARE = {
    "A100": "dgx-a100",
    "H100": "dgx-h100",
    "H200": "h200",  # the MLPerf v5.0 H200 rows (Nebius), issue 25 stop 4
    "B200": "dgx-b200",
    "GB200": "gb200-nvl72",
    "GB300": "gb300-nvl72",
}
# the execution class a row names -> commbench execution presets to try, closest first (a row
# priced by a stand-in says so)
EXECUTION_CHOICES = {
    "megatron-2021": ("megatron-2021", "megatron"),
    "megatron-core": ("megatron-core", "megatron"),
    "torch-fsdp": ("torch-fsdp", "fsdp", "megatron"),
    # FlashAttention-2's GPT training code: flash attention with Megatron-style fused kernels and DDP
    # (ZeRO-1); megatron-core has those fusions (its cross entropy is Megatron's unfused one)
    "flash-attention-training": ("megatron-core",),
}
# sources entered after the first compute fit (bench/RESULTS-published.md, calibration rule): first
# predicted by the model frozen then; the refit of 2026-12-01 (stop 22) fits their calibration half
# like every source's, and the report still lists them apart, with the older sources' figures without them
ADDED_AFTER_FIT = ("dgxc-benchmarking",)
# sources entered after the refit, predicted by the model frozen then, never fitted to (neither half, nor the
# baseline); their held-out half counts in the held-out figures as the rule assigns it. The Megatron-Bridge
# sources (megatron-bridge-perf-summary and megatron-bridge-<container>) left this list with issue 25's fit of
# the quantised GEMM factors (bench/fit_compute.py stage 3), as declared before their rows were predicted
# torchtitan-fp8 and nemo-24.07-perf-summary (issue 25, stop 3): entered frozen, never fitted to
# the MLPerf Training sources (issue 25, stop 4: bench/mlperf_rows.py): entered frozen, never fitted to
# their Llama 2 70B LoRA rows (issue 25, finetune column): sources of their own, entered frozen, never fitted to
MLPERF_SOURCES = tuple(f"mlperf-training-v{r}{kind}" for kind in ("", "-lora") for r in ("4.0", "4.1", "5.0", "5.1"))
NEVER_FITTED = ("flash-attention-2", "torchtitan-fp8", "nemo-24.07-perf-summary", *MLPERF_SOURCES)
INT_COLUMNS = (
    "gpu_memory_gb",
    "gpus_per_node",
    "nodes",
    "gpus",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "seq_len",
    "global_batch",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "sp",
    "zero",
    "tied_embeddings",
)


# ---- the data ---------------------------------------------------------------------------
def load_runs(path: Path) -> list[dict]:
    """The rows with their numbers as numbers; an unreadable file or cell is a UsageError naming it."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: not a readable runs file ({exc})") from None
    for number, row in enumerate(rows, start=2):  # line 1 is the header
        try:
            for column in INT_COLUMNS:
                row[column] = int(row[column])
            row["value"] = float(row["value"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{path}, line {number}: a missing or non-numeric cell ({exc})") from None
    return rows


def scored(rows: list[dict]) -> list[dict]:
    """The rows the scorecard prices: all but those a later correction of their source replaced or
    withdrew (`superseded_by`); those keep their positions in split_halves, so no other row moves half."""
    return [r for r in rows if not r.get("superseded_by")]


def split_halves(rows: list[dict]) -> dict[str, str]:
    """The committed rule: per source, rows ordered by (gpus, id); odd positions calibrate, even are held out."""
    half = {}
    for source in sorted({r["source"] for r in rows}):
        ordered = sorted((r for r in rows if r["source"] == source), key=lambda r: (r["gpus"], r["id"]))
        for position, row in enumerate(ordered):
            half[row["id"]] = "calibration" if position % 2 else "held-out"
    return half


# ---- FLOP counts (per optimizer step) -------------------------------------------------------
def megatron2024_flops(row: dict) -> float:
    """Megatron-LM's num_floating_point_operations (commit f2e5db402c): model FLOPs, no recompute."""
    h, L, s = row["hidden"], row["layers"], row["seq_len"]
    q_ratio = 1.0  # query projection = hidden for every shape here (head_dim = hidden / heads)
    gated = 1.5 if row["mlp"] == "swiglu" else 1.0
    projections = (1 + row["kv_heads"] / row["heads"]) * q_ratio
    weights = projections + row["ffn"] / h * gated + row["vocab"] / (2 * L * h)
    if not row.get("finetune"):
        return 12 * row["global_batch"] * s * L * h * h * (weights + s / h * q_ratio)
    # LoRA: a frozen weight's GEMM has no weight gradient (2 of its 3 passes); attention's own matmuls keep all
    # three; each adapter (rank r on QKV and O) trains fully: 6 FLOPs per adapter parameter per token
    rank = row["finetune"].split(":")[1]
    kv = h * row["kv_heads"] // row["heads"]
    adapters = L * int(rank) * ((h + h + 2 * kv) + (h + h))
    frozen = 12 * row["global_batch"] * s * L * h * h * (weights * 2 / 3 + s / h * q_ratio)
    return frozen + 6 * adapters * row["global_batch"] * s


def narayanan2021_recompute_flops(row: dict) -> float:
    """Narayanan et al. SC21: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), full recomputation counted."""
    h, L, s, V = row["hidden"], row["layers"], row["seq_len"], row["vocab"]
    return 96 * row["global_batch"] * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def palm_flops(row: dict) -> float:
    """PaLM appendix B: 6 x matmul parameters (no input embedding, output head counted) + 12 l q s, per token."""
    h, q = row["hidden"], row["hidden"]  # query width = hidden for every shape here
    kv = row["kv_heads"] * h // row["heads"]
    mlp_matrices = 3 if row["mlp"] == "swiglu" else 2
    matmul = row["layers"] * (2 * h * q + 2 * h * kv + mlp_matrices * h * row["ffn"]) + row["vocab"] * h
    per_token = 6 * matmul + 12 * row["layers"] * q * row["seq_len"]
    return per_token * row["global_batch"] * row["seq_len"]


def narayanan2021_model_flops(row: dict) -> float:
    """SC21's count without the recomputed forward (x 3/4): how FlashAttention's training code counts."""
    return 0.75 * narayanan2021_recompute_flops(row)


FLOPS = {
    "megatron2024": megatron2024_flops,
    "narayanan2021-recompute": narayanan2021_recompute_flops,
    "narayanan2021-model": narayanan2021_model_flops,
    "palm": palm_flops,
}


def published_step_seconds(row: dict) -> float:
    """The published figure as seconds per optimizer step."""
    if row["metric"] == "iteration_s":
        return row["value"]
    if row["metric"] == "tokens_per_s":
        return row["global_batch"] * row["seq_len"] / row["value"]
    if row["metric"] == "tokens_per_s_per_gpu":
        return row["global_batch"] * row["seq_len"] / (row["value"] * row["gpus"])
    if row["metric"] == "tflops_per_gpu":
        return FLOPS[row["flops_convention"]](row) / (row["gpus"] * row["value"] * 1e12)
    raise ValueError(f"{row['id']}: unknown metric {row['metric']!r}")


# ---- the model's prediction ---------------------------------------------------------------
def model_argument(row: dict, folder: Path) -> str:
    """What PlanSpec.model takes for this row: its preset name, or the path of a
    config.json written into `folder` from the row's shape (GPT-2 family: two-matrix GELU MLP)."""
    if row["model"] != "custom":
        return row["model"]
    config = {
        "_name_or_path": row["id"],
        "model_type": "gpt2" if row["mlp"] == "gelu" else "llama",
        "hidden_size": row["hidden"],
        "num_hidden_layers": row["layers"],
        "num_attention_heads": row["heads"],
        "num_key_value_heads": row["kv_heads"],
        "intermediate_size": row["ffn"],
        "vocab_size": row["vocab"],
        "tie_word_embeddings": bool(row["tied_embeddings"]),
        "max_position_embeddings": row["seq_len"],
    }
    path = folder / f"{row['id']}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def execution_for(row: dict) -> tuple[str, str | None]:
    """(commbench execution preset, a note when it is a stand-in for the row's execution class)."""
    for name in EXECUTION_CHOICES[row["execution"]]:
        if name in EXECUTIONS:
            note = None if name == row["execution"] else f"execution {row['execution']} priced as commbench's '{name}'"
            return name, note
    raise UsageError(f"{row['id']}: no commbench execution preset for {row['execution']}")


def layout_of(row: dict) -> Layout:
    return Layout(
        dp=row["dp"],
        tp=row["tp"],
        pp=row["pp"],
        vpp=row["vpp"],
        cp=row["cp"],
        ep=row["ep"],
        zero=row["zero"],
        mbs=row["mbs"],
        recompute=row["recompute"],
        sp=bool(row["sp"]),
    )


@dataclass
class Prediction:
    step_s: float | None  # None: the model cannot express the row
    mfu: float | None
    execution: str
    notes: list[str]


def job_domain(row: dict) -> int | None:
    """The NVLink domain a row's job ran in: the preset's, except where a job on NVL72 racks is no
    whole number of racks (128 GPUs): then the largest whole number of hosts up to the rack that
    divides the job (64: two racks of 64 used), an assumption the row's notes do not state."""
    system = load_system(HARDWARE[row["gpu"]])
    if row["gpus"] <= system.nvlink_domain or row["gpus"] % system.nvlink_domain == 0:
        return None
    hosts = [n for n in range(system.nvlink_domain, 0, -system.gpus_per_host) if row["gpus"] % n == 0]
    return hosts[0] if hosts else None


def compute_precision_of(row: dict) -> str:
    """The row's GEMM recipe: its precision cell where that names one (fp8-current, mxfp8, ...), else bf16."""
    return row["precision"] if row["precision"] in RECIPES else "bf16"


# the finetune cell's recipe settings (bench/mlperf_rows.py lora_cell) -> PlanSpec fields
FINETUNE_SETTINGS = {
    "base": "lora_base",
    "transpose_cache": "transpose_cache",
    "fp8_activation_input": "fp8_activation_input",
    "model_dropout": "model_dropout",
}


def finetune_of(row: dict) -> dict:
    """PlanSpec's --finetune, --lora-rank, --lora-targets from the row's finetune cell
    (lora:<rank>:<targets>[:<setting>=<value>+...], the memory settings its launch config sets:
    base, transpose_cache, fp8_activation_input, model_dropout; empty: full training)."""
    if not row.get("finetune"):
        return {}
    kind, rank, targets, *settings = row["finetune"].split(":")
    spec: dict = dict(finetune=kind, lora_rank=int(rank), lora_targets=targets)
    for pair in settings[0].split("+") if settings else []:
        name, value = pair.split("=")
        spec[FINETUNE_SETTINGS[name]] = value == "on" if name == "fp8_activation_input" else value
    return spec


def predict(row: dict, folder: Path, processor: str | None = None) -> Prediction:
    """The row's step time on its hardware preset (or with `processor`, a processor JSON file, in its place)."""
    notes = []
    try:
        execution, note = execution_for(row)
        notes += [note] if note else []
        spec = PlanSpec(
            model=model_argument(row, folder),
            gpus=row["gpus"],
            global_batch=row["global_batch"],
            seq_len=row["seq_len"],
            hardware=HARDWARE[row["gpu"]],
            gpus_per_node=row["gpus_per_node"],
            precision="12" if row["precision"] == "bf16 pure" else "16",
            execution=execution,
            processor=processor,
            compute_precision=compute_precision_of(row),
            nvlink_domain=job_domain(row),
            tp_comm_overlap=row.get("tp_comm_overlap") or None,  # as launched, where the source says (MLPerf)
            **finetune_of(row),
        )
        planner = build_planner(spec)
        result, too_big = planner.evaluate_layout(layout_of(row))
    except UsageError as exc:
        return Prediction(None, None, "", [f"not predicted: {exc}"])
    if too_big:
        notes.append(f"the memory model says it does not fit: {too_big}")
    return Prediction(result.step_s, result.mfu, execution, notes)


# ---- the baseline -------------------------------------------------------------------------
def peak_flops(row: dict) -> float:
    return load_system(HARDWARE[row["gpu"]]).processor.peak_flops


def baseline_peak(row: dict) -> float:
    """The peak the baseline's one MFU is a fraction of: the processor's peak in the format the row's GEMMs
    run in (BF16; FP8 for FP8 and MXFP8 recipes; FP4 for NVFP4), so FP8 rows are not held to the BF16 peak."""
    processor = load_system(HARDWARE[row["gpu"]]).processor
    return processor_peak(processor, RECIPES[compute_precision_of(row)]) or processor.peak_flops


def implied_mfu(row: dict, step_s: float) -> float:
    return megatron2024_flops(row) / (row["gpus"] * baseline_peak(row) * step_s)


def fit_baseline_mfu(rows: list[dict], published: dict[str, float]) -> float:
    """One MFU for every row: the geometric mean of the calibration rows' implied MFU (least squares in log time)."""
    logs = [math.log(implied_mfu(r, published[r["id"]])) for r in rows]
    return math.exp(sum(logs) / len(logs))


# ---- statistics and the report --------------------------------------------------------------
def error_stats(errors: list[float]) -> str:
    if not errors:
        return "-"
    mape = sum(abs(e) for e in errors) / len(errors)
    signed = sum(errors) / len(errors)
    return f"{mape:.1%} / {signed:+.1%} (n={len(errors)})"


def git_state() -> str:
    def run(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    # the files this script writes do not count: they change on every run
    outputs = [f":(exclude){path.relative_to(ROOT)}" for path in (RESULTS, PLOT, PLOT.with_suffix(".html"))]
    dirty = (
        " (with uncommitted changes)"
        if run("status", "--porcelain", "--untracked-files=no", "--", ".", *outputs)
        else ""
    )
    return f"{run('rev-parse', 'HEAD')}{dirty}"


def write_plot(records: list[dict]) -> str:
    """Predicted against published, log-log, one colour per source; PNG if kaleido can export, else HTML."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for source in sorted({r["source"] for r in records}):
        mine = [r for r in records if r["source"] == source and r["predicted"] is not None]
        fig.add_trace(
            go.Scatter(
                x=[r["published"] for r in mine],
                y=[r["predicted"] for r in mine],
                mode="markers",
                name=source,
                text=[r["id"] for r in mine],
                marker=dict(symbol=["circle" if r["half"] == "held-out" else "circle-open" for r in mine], size=9),
            )
        )
    values = [v for r in records if r["predicted"] for v in (r["published"], r["predicted"])]
    low, high = min(values) / 1.5, max(values) * 1.5
    for factor, dash in ((1.0, "solid"), (0.8, "dot"), (1.2, "dot")):
        fig.add_trace(
            go.Scatter(
                x=[low, high],
                y=[low * factor, high * factor],
                mode="lines",
                showlegend=factor == 1.0,
                name="predicted = published (dotted: +-20%)",
                line=dict(color="grey", dash=dash),
            )
        )
    fig.update_layout(
        title="commbench step model vs published runs (filled: held out, open: calibration half)",
        xaxis=dict(type="log", title="published seconds per step"),
        yaxis=dict(type="log", title="predicted seconds per step"),
        width=1000,
        height=750,
    )
    try:
        fig.write_image(str(PLOT))
        return PLOT.name
    except Exception as exc:  # kaleido or a browser missing: an interactive file still shows the same figure
        html = PLOT.with_suffix(".html")
        fig.write_html(str(html), include_plotlyjs="cdn")
        print(f"no PNG export ({type(exc).__name__}: {exc}); wrote {html}", file=sys.stderr)
        return html.name


def fittable_rows(rows: list[dict]) -> list[dict]:
    """The rows any figure may be fitted to: the scored calibration half, less the sources never fitted."""
    half = split_halves(rows)
    return [r for r in scored(rows) if half[r["id"]] == "calibration" and r["source"] not in NEVER_FITTED]


def score(rows: list[dict]) -> tuple[list[dict], float]:
    half = split_halves(rows)  # over every row, superseded ones included: the rule's positions
    rows = scored(rows)
    published = {r["id"]: published_step_seconds(r) for r in rows}
    mfu = fit_baseline_mfu(fittable_rows(rows), published)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        predictions = {row["id"]: predict(row, Path(folder)) for row in rows}
    for row in rows:
        prediction = predictions[row["id"]]
        pub = published[row["id"]]
        base = megatron2024_flops(row) / (row["gpus"] * baseline_peak(row) * mfu)
        records.append(
            {
                "id": row["id"],
                "source": row["source"],
                "gpu": row["gpu"],
                "half": half[row["id"]],
                "row": row,
                "published": pub,
                "predicted": prediction.step_s,
                "model_mfu": prediction.mfu,
                "error": None if prediction.step_s is None else prediction.step_s / pub - 1,
                "baseline": base,
                "baseline_error": base / pub - 1,
                "execution": prediction.execution,
                "notes": prediction.notes,
            }
        )
    return records, mfu


def summary_lines(records: list[dict]) -> list[str]:
    groups = [("overall", lambda r: True)]
    groups += [(f"GPU {g}", lambda r, g=g: r["gpu"] == g) for g in HARDWARE if any(r["gpu"] == g for r in records)]
    groups += [
        (f"compute {c}", lambda r, c=c: compute_precision_of(r["row"]) == c)
        for c in RECIPES
        if any(compute_precision_of(r["row"]) == c for r in records)
    ]
    groups += [(f"source {s}", lambda r, s=s: r["source"] == s) for s in sorted({r["source"] for r in records})]
    lines = [
        "| group | model: held out | model: calibration | model: all | baseline: held out | baseline: all |",
        "|---|---|---|---|---|---|",
    ]
    for name, keep in groups:
        mine = [r for r in records if keep(r) and r["error"] is not None]
        held = [r for r in mine if r["half"] == "held-out"]
        cal = [r for r in mine if r["half"] == "calibration"]
        lines.append(
            f"| {name} | {error_stats([r['error'] for r in held])} | {error_stats([r['error'] for r in cal])} "
            f"| {error_stats([r['error'] for r in mine])} | {error_stats([r['baseline_error'] for r in held])} "
            f"| {error_stats([r['baseline_error'] for r in mine])} |"
        )
    return lines


def added_after_fit_lines(records: list[dict]) -> list[str]:
    """The rows of sources entered after the first fit, apart: their held-out half is out of sample."""
    mine = [r for r in records if r["source"] in ADDED_AFTER_FIT and r["error"] is not None]
    if not mine:
        return []
    held = [r for r in mine if r["half"] == "held-out"]
    cal = [r for r in mine if r["half"] == "calibration"]
    others = [
        r
        for r in records
        if r["source"] not in ADDED_AFTER_FIT + NEVER_FITTED and r["error"] is not None and r["half"] == "held-out"
    ]
    lines = [
        "### Added after the fit",
        "",
        f"Rows of {', '.join(f'`{s}`' for s in ADDED_AFTER_FIT)}: entered after the first compute fit and predicted "
        "by the model frozen then (RESULTS-published, reading of the scorecard); since the refit of 2026-12-01 their "
        "calibration half is fitted to like every source's, their held-out half is not (the held-out ones count in the "
        "held-out figures above). MAPE / mean signed error (rows):",
        "",
        "| rows | MAPE / signed |",
        "|---|---|",
        f"| all added rows | {error_stats([r['error'] for r in mine])} |",
        f"| added, held-out half | {error_stats([r['error'] for r in held])} |",
        f"| added, calibration half (fitted to since the refit) | {error_stats([r['error'] for r in cal])} |",
        f"| held out, the first fit's sources only (the scorecard before them) | {error_stats([r['error'] for r in others])} |",
        "",
        "| id | half | GPUs | layout | published s/step | predicted s/step | error | published MFU (PaLM) | model MFU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in mine:
        row = r["row"]
        published_mfu = palm_flops(row) / (row["gpus"] * peak_flops(row) * r["published"])
        lines.append(
            f"| {r['id']} | {r['half']} | {row['gpu']} x{row['gpus']} | {layout_of(row)} | {r['published']:.3g} "
            f"| {r['predicted']:.3g} | {r['error']:+.1%} | {published_mfu:.1%} | {r['model_mfu']:.1%} |"
        )
    return lines + [""]


def row_lines(records: list[dict]) -> list[str]:
    lines = [
        "| id | half | GPUs | layout | published (as published) | published s/step | predicted s/step | error "
        "| model MFU | baseline s/step | baseline error | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    units = {
        "iteration_s": "s/step",
        "tokens_per_s": "tokens/s",
        "tokens_per_s_per_gpu": "tokens/s/GPU",
        "tflops_per_gpu": "TFLOP/s/GPU",
    }
    for r in records:
        row = r["row"]
        layout = layout_of(row)
        pred = "-" if r["predicted"] is None else f"{r['predicted']:.3g}"
        err = "-" if r["error"] is None else f"{r['error']:+.1%}"
        mfu = "-" if r["model_mfu"] is None else f"{r['model_mfu']:.1%}"
        notes = "; ".join(r["notes"] + ([f"assumed: {row['assumed']}"] if row["assumed"] else []))
        lines.append(
            f"| {r['id']} | {r['half']} | {row['gpu']} x{row['gpus']} | {layout} | {row['value']:g} "
            f"{units[row['metric']]} | {r['published']:.3g} | {pred} | {err} | {mfu} | {r['baseline']:.3g} "
            f"| {r['baseline_error']:+.1%} | {notes} |"
        )
    return lines


def report(records: list[dict], mfu: float, plot_name: str, command: str) -> str:
    unpredicted = [r for r in records if r["predicted"] is None]
    executions = sorted({r["execution"] for r in records if r["execution"]})
    stand_ins = sum(r["execution"] not in ("", r["row"]["execution"]) for r in records)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        MARKER,
        "",
        "## Scorecard",
        "",
        f"Made by `{command}` on {now}, host {platform.node()}, git commit {git_state()}.",
        "These are predictions (deterministic, no timing on this machine), compared with figures published "
        "by others; every row's source is in `bench/published/runs.csv` and `bench/published/SOURCES.md`.",
        "",
        "Error = predicted / published - 1 on seconds per optimizer step: **negative means the model is too "
        "fast** (optimistic). Cells: MAPE / mean signed error (rows).",
        "",
        "Hardware presets: "
        + ", ".join(f"{gpu} rows on `{preset}`" for gpu, preset in HARDWARE.items())
        + f" (preset networks, not the sources' fabrics). Execution presets used: {', '.join(executions)}"
        + (
            f"; {stand_ins} rows name an execution class commbench has no preset for, and say which preset stood in."
            if stand_ins
            else "."
        ),
        f"Baseline: step = model FLOPs (Megatron's count, `megatron2024`) / (GPUs x preset peak in the row's GEMM "
        f"format (BF16, FP8, FP4) x {mfu:.1%}); "
        f"that one MFU is the geometric mean of the implied MFU of the calibration half (the rows the model's "
        f"figures are fitted on, plus the Llama 3 one; not {', '.join(NEVER_FITTED)}), the only figure fitted here.",
        "",
        *summary_lines(records),
        "",
        f"![predicted against published]({Path('published') / plot_name})",
        "",
    ]
    lines += added_after_fit_lines(records)
    if unpredicted:
        lines += ["### Not predicted", ""] + [f"- {r['id']}: {'; '.join(r['notes'])}" for r in unpredicted] + [""]
    lines += ["### Every row", "", *row_lines(records), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        records, mfu = score(load_runs(args.runs))
        plot_name = write_plot(records)
        command = "python bench/scorecard.py" + "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
        write_report(args.out, report(records, mfu, plot_name, command))
    except UsageError as exc:
        print(f"scorecard: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(summary_lines(records)))
    return 0


def write_report(path: Path, text: str) -> None:
    """Replace what follows the marker, keeping the calibration rule above it as committed."""
    try:
        head = path.read_text(encoding="utf-8").split(MARKER)[0] if path.exists() else ""
        path.write_text(head + text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the results ({exc})") from None


if __name__ == "__main__":
    sys.exit(main())
