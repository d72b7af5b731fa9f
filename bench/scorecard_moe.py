"""Score the step model on published MoE training runs, reported per model family.

Run: python bench/scorecard_moe.py [--out bench/RESULTS-moe.md]

Rows: bench/published/moe_runs.csv, every MoE row (DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B,
GPT-OSS-120B) of NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and
performance-summary-archive.md in every commit of their git history (first appearance kept; the
commit and the container heading are in the row). Separate from bench/scorecard.py's rows (another
engineer's file): same calibration rule, own source.

Calibration rule (bench/RESULTS-published.md): within the source, rows ordered by (gpus, id) and
numbered from 0; odd positions calibrate, even are held out. The calibration half fits the
constant-MFU baseline beside the model and two figures of the model, the host's exposed MoE work
per layer and per local expert (MoEExecution.host_layer_s, host_expert_s; bench/fit_moe_host.py
lists its rows); nothing is fitted to the held-out half.

Each row is priced at its own layout by build_planner(PlanSpec(...)).evaluate_layout. What the
tables do not say is taken from the row's recipe (bench/published/moe_recipes.csv: dispatcher, A2A
overlap, recompute modules, the explicit pipeline layout of DeepSeek-V3's recipes, the model's bias-dropout-add and
cross-entropy fusions) or assumed and
listed in ASSUMED: etp=1 (Bridge's MoE recipes for fine-grained experts), the distributed optimizer
(zero=1; FSDP rows zero=3), FP8 on H100 as current scaling, 64 GPUs per NVL72 rack's NVLink domain
when the GPU count is not a whole number of racks. DGX-B300 rows are priced on the dgx-b300 preset.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from commbench.errors import UsageError
from commbench.modeling.job import MEGATRON_LOSS_BYTES, Execution
from commbench.modeling.layout import Layout
from commbench.modeling.planner import Planner
from commbench.modeling.spec import PlanSpec, build_planner

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "bench" / "published" / "moe_runs.csv"
RECIPES = ROOT / "bench" / "published" / "moe_recipes.csv"  # each row's recipe (bench/moe_recipes.py)
# MLPerf Training v6.0's MoE submissions (bench/mlperf_rows.py --moe): a source of their own, split by the
# same rule within it (the `half` column, written before any prediction), layout and recipe from each launch
# config, the step time measured in the result logs
MLPERF_RUNS = ROOT / "bench" / "published" / "moe_mlperf_runs.csv"
RESULTS = ROOT / "bench" / "RESULTS-moe.md"
SOURCE = (
    "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md and performance-summary-archive.md, every "
    "commit of their history (mirror at 067f987df0, 2026-08-22)"
)
HARDWARE = {
    "DGX-H100": "dgx-h100",
    "DGX-B200": "dgx-b200",
    "DGX-B300": "dgx-b300",
    "DGX-GB200": "gb200-nvl72",
    "DGX-GB300": "gb300-nvl72",
}
# Which rows ran as one full-iteration CUDA graph, from Megatron-Bridge's own recipes at each
# container's performance-summary commit: none before 26.06 (scripts/performance/configs/*_workload_base_configs.py
# at c0b9a0003, cfeddcd94, 74695a06d, 21d102f5e: MoE rows capture at most attn/moe_router/
# moe_preprocess, the dispatcher and experts stay eager); from 26.06 (63b08b397, 8f341b04f for B300;
# perf_recipes at 381d0b825 and 4ab94dfad) the MXFP8 recipes of DeepSeek-V3, Qwen3 and GPT-OSS on
# GB200 and GB300 set cuda_graph_impl="full_iteration", on B300 only Qwen3's (DeepSeek-V3's B300 V2 and
# GPT-OSS's B300 MXFP8 recipes keep the partial TE graphs); BF16 and FP8 recipes and H100/B200 never do.
GRAPHED_FROM = (26, 6)
GRAPHED = {"DGX-GB200": None, "DGX-GB300": None, "DGX-B300": ("qwen3-235b-a22b", "qwen3-30b-a3b")}  # None: every model
FUSED_LOSS_BYTES = (12.0, 12.0)  # Execution.loss_bytes of a fused softmax + loss over fp32 logits
PRECISION = {"BF16": "bf16", "FP8": "fp8-current", "MXFP8": "mxfp8"}
ASSUMED = (
    "etp=1; zero=1 (distributed optimizer), zero=3 with FSDP; selective recompute of the modules the row's "
    "recipe names (none where it names none); the dispatcher (flex where the recipe names a DeepEP or "
    "HybridEP backend, else alltoall) and 1F1B A2A overlap from the recipe (bench/published/moe_recipes.csv), "
    "alltoall without overlap or recompute where no recipe matched; the model's bias_dropout_fusion (GPT-OSS and "
    "Qwen3 off, DeepSeek-V3 on) and cross_entropy_loss_fusion (on for all) from its bridge and recipe; "
    "FP8 = current scaling; NVL72 domain of 64 "
    "GPUs when gpus is not a multiple of 72; a full-iteration CUDA graph where the row's recipe sets one "
    "(GRAPHED_FROM), else the host's MoE work exposed; the pipeline layout the recipe sets (DeepSeek-V3: "
    "embedding and 4 or 8 layers on the first stage, 1 or 5 beside the MTP layer and the loss on the last), "
    "else Megatron-Core's even split"
)


def load_rows(path: Path = RUNS, recipes: Path = RECIPES) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    with open(recipes, newline="", encoding="utf-8") as handle:
        recipe = {r["id"]: r for r in csv.DictReader(handle)}
    for row in rows:
        found = recipe.get(row["id"], {})
        row["dispatcher"] = "flex" if found.get("moe_flex_dispatcher_backend") in ("deepep", "hybridep") else "alltoall"
        row["moe_overlap"] = "1f1b-a2a" if found.get("moe_a2a_overlap") == "1" else "none"
        row["recompute_modules"] = "+".join((found.get("recompute_modules") or "").split())
        row["pp_layout"] = found.get("pp_layout") or ""
        # the model's own fusions (bench/moe_recipes.py MODEL_FILES); '' keeps the preset's assumption
        row["bias_dropout_fusion"] = found.get("bias_dropout_fusion", "")
        row["cross_entropy_loss_fusion"] = found.get("cross_entropy_loss_fusion", "")
    for row in rows:
        for name in ("gpus", "global_batch", "mbs", "seq_len", "fsdp", "tp", "pp", "cp", "ep"):
            row[name] = int(row[name])
        row["vp"] = 1 if row["vp"] in ("n/a", "") else int(row["vp"])
        row["tokens_per_s_per_gpu"] = float(row["tokens_per_s_per_gpu"])
    return rows


def load_mlperf_rows(path: Path = MLPERF_RUNS) -> list[dict]:
    """The MLPerf v6.0 MoE rows, typed; model_spec is what the planner loads (a preset or a config.json)."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        for name in (
            "gpus",
            "global_batch",
            "mbs",
            "seq_len",
            "fsdp",
            "tp",
            "pp",
            "cp",
            "vp",
            "ep",
            "etp",
            "cuda_graph",
        ):
            row[name] = int(row[name])
        row["step_s"] = float(row["step_s"])
        config = row["model_config"]
        row["model_spec"] = str(ROOT / config) if config.endswith(".json") else config
    return rows


def halves(rows: list[dict]) -> dict[str, str]:
    ordered = sorted(rows, key=lambda r: (r["gpus"], r["id"]))
    return {row["id"]: "calibration" if i % 2 else "held out" for i, row in enumerate(ordered)}


def published_step(row: dict) -> float:
    if "step_s" in row:  # measured in the row's logs (MLPerf)
        return row["step_s"]
    return row["global_batch"] * row["seq_len"] / (row["tokens_per_s_per_gpu"] * row["gpus"])


def spec_of(row: dict) -> PlanSpec:
    hardware = HARDWARE[row["system"]]
    domain = 64 if hardware.endswith("nvl72") and row["gpus"] > 72 and row["gpus"] % 72 else None
    return PlanSpec(
        model=row.get("model_spec", row["model"]),
        gpus=row["gpus"],
        global_batch=row["global_batch"],
        seq_len=row["seq_len"],
        hardware=hardware,
        nvlink_domain=domain,
        compute_precision=PRECISION[row["precision"]],
        execution="megatron-core",
        routing="uniform",
        dispatcher=row["dispatcher"],
        moe_overlap=row["moe_overlap"],
        cuda_graph=full_iteration_graph(row),
    )


def full_iteration_graph(row: dict) -> bool:
    """Whether the row's recipe runs the step as one CUDA graph (see GRAPHED_FROM; an MLPerf row's launch
    config says it: CUDA_GRAPH_SCOPE=full_iteration)."""
    if "cuda_graph" in row:
        return bool(row["cuda_graph"])
    version = tuple(int(part) for part in row["container"].split(".")[:2])
    if row["precision"] != "MXFP8" or row["system"] not in GRAPHED or version < GRAPHED_FROM:
        return False
    models = GRAPHED[row["system"]]
    return models is None or row["model"] in models


def layout_of(row: dict) -> Layout:
    dp = row["gpus"] // (row["tp"] * row["pp"] * row["cp"])
    return Layout(
        dp=dp,
        tp=row["tp"],
        pp=row["pp"],
        vpp=row["vp"],
        cp=row["cp"],
        ep=row["ep"],
        etp=row.get("etp", 1),
        zero=3 if row["fsdp"] else 1,
        mbs=row["mbs"],
        recompute="selective" if row["recompute_modules"] else "none",
        recompute_modules=row["recompute_modules"],
        pp_layout=row["pp_layout"],
    )


def recipe_execution(row: dict, preset: Execution) -> Execution:
    """The megatron-core preset with the row's model fusions from its recipe: bias_dropout_fusion
    off -> bias, dropout, residual add and norm apart (fused_norm_residual False);
    cross_entropy_loss_fusion on -> the fused softmax + loss (12 B per logit each way)."""
    changes: dict = {}
    if row.get("bias_dropout_fusion") in ("0", "1"):
        changes["fused_norm_residual"] = row["bias_dropout_fusion"] == "1"
    if row.get("cross_entropy_loss_fusion") == "1":
        changes["loss_bytes"] = FUSED_LOSS_BYTES
    elif row.get("cross_entropy_loss_fusion") == "0":
        changes["loss_bytes"] = MEGATRON_LOSS_BYTES
    if not changes:
        return preset
    said = ", ".join(f"{name}={value}" for name, value in changes.items())
    return replace(preset, assumes=f"{preset.assumes}; from the row's recipe: {said}", **changes)


def row_planner(row: dict) -> Planner:
    """The planner of the row's spec, its execution carrying the recipe's fusions."""
    planner = build_planner(spec_of(row))
    job = replace(planner.job, execution=recipe_execution(row, planner.job.execution))
    return Planner(job, planner.cluster)


def predict(row: dict) -> dict:
    """The model's step for the row, or why it cannot be priced."""
    if row["system"] not in HARDWARE:
        return {"not_scored": f"no hardware preset for {row['system']}"}
    try:
        planner = row_planner(row)
        result, reason = planner.evaluate_layout(layout_of(row))
    except UsageError as exc:
        return {"not_scored": str(exc)}
    flops = planner.job.model.model_flops_per_token(row["seq_len"]) * row["global_batch"] * row["seq_len"]
    peak = planner.cluster.system.processor.peak_flops
    return {"step_s": result.step_s, "fits": reason is None, "flops": flops, "peak": peak}


def score(rows: list[dict], mfu: float | None = None) -> tuple[list[dict], float]:
    """Each row priced; the constant-MFU baseline at `mfu`, or (None) the calibration half's median MFU.
    A row's half is its stored one (MLPerf rows) or the position rule's within the rows given."""
    rule = halves(rows)
    half = {row["id"]: row.get("half") or rule[row["id"]] for row in rows}
    records = []
    for row in rows:
        out = predict(row)
        published = published_step(row)
        record = {**row, "half": half[row["id"]], "published_s": published, **out}
        if "step_s" in out:
            record["error"] = out["step_s"] / published - 1
            record["published_mfu"] = out["flops"] / (row["gpus"] * out["peak"] * published)
        records.append(record)
    calibration = [r for r in records if r["half"] == "calibration" and "step_s" in r]
    # the baseline: step = FLOPs / (GPUs x peak x one MFU), the MFU the calibration half's median
    if mfu is None:
        mfus = sorted(r["published_mfu"] for r in calibration)
        mfu = mfus[len(mfus) // 2] if mfus else float("nan")
    for r in records:
        if "step_s" in r:
            r["baseline_error"] = r["flops"] / (r["gpus"] * r["peak"] * mfu) / r["published_s"] - 1
    return records, mfu


def stats(errors: list[float]) -> str:
    if not errors:
        return "no rows"
    mape = sum(abs(e) for e in errors) / len(errors)
    signed = sum(errors) / len(errors)
    return f"MAPE {mape:.1%}, mean signed {signed:+.1%}, worst {max(errors, key=abs):+.1%} ({len(errors)} rows)"


def report(records: list[dict], mfu: float) -> str:
    lines = [
        "# MoE scorecard: the step model on Megatron-Bridge's published MoE runs",
        "",
        f"Source: {SOURCE}. Command: `python bench/scorecard_moe.py`. Rows are published measurements "
        f"(tokens/s/GPU turned into seconds per step through the row's global batch and sequence); "
        f"the model's two host figures (MoE host work per layer and per local expert) are fitted on the calibration "
        f"half only (`python bench/fit_moe_host.py`), nothing on the held-out half; assumed where the tables are "
        f"silent: {ASSUMED}.",
        "",
        f"Constant-MFU baseline: MFU {mfu:.1%} (median of the calibration half's published MFUs, "
        f"PaLM FLOPs over each preset's BF16 peak).",
        "",
        "| family | half | model | baseline |",
        "|---|---|---|---|",
    ]
    by_family = defaultdict(list)
    for r in records:
        if "step_s" in r:
            by_family[r["model"]].append(r)
    for family in sorted(by_family):
        for half in ("held out", "calibration"):
            chosen = [r for r in by_family[family] if r["half"] == half]
            lines.append(
                f"| {family} | {half} | {stats([r['error'] for r in chosen])} "
                f"| {stats([r['baseline_error'] for r in chosen])} |"
            )
    for half in ("held out", "calibration"):
        chosen = [r for rs in by_family.values() for r in rs if r["half"] == half]
        lines.append(
            f"| all | {half} | {stats([r['error'] for r in chosen])} | {stats([r['baseline_error'] for r in chosen])} |"
        )
    lines += [
        "",
        "| row | half | published s | model s | model error | baseline error | fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if "step_s" in r:
            lines.append(
                f"| {r['id']} | {r['half']} | {r['published_s']:.2f} | {r['step_s']:.2f} | {r['error']:+.1%} "
                f"| {r['baseline_error']:+.1%} | {'yes' if r['fits'] else 'no'} |"
            )
        else:
            lines.append(f"| {r['id']} | {r['half']} | {r['published_s']:.2f} | not scored: {r['not_scored']} | | | |")
    return "\n".join(lines) + "\n"


def mlperf_report(mlperf: list[dict], bridge: list[dict], mfu: float) -> str:
    """The MLPerf v6.0 MoE rows: per family and half, the model beside the baseline (at the Megatron-Bridge
    calibration half's MFU, not refitted), then every MoE row's held-out half with and without them."""
    lines = [
        "## MLPerf Training v6.0 MoE rows (issue 26): the model on NVIDIA's DeepSeek-V3 and GPT-OSS 20B runs",
        "",
        f"Rows: bench/published/moe_mlperf_runs.csv (`python bench/mlperf_rows.py --moe`; bench/published/SOURCES.md), "
        f"the step time measured in each submission's result logs, layout and recipe from its launch config. The "
        f"model is the one scored above, nothing refitted (the scores of the model as it stood when the rows were "
        f"entered, 0e8ed7b, are in the hand-written part below); the baseline keeps the MFU above ({mfu:.1%}).",
        "",
        "| family | half | model | baseline |",
        "|---|---|---|---|",
    ]
    scored = [r for r in mlperf if "step_s" in r]
    for family in sorted({r["model"] for r in scored}):
        for half in ("held out", "calibration"):
            chosen = [r for r in scored if r["model"] == family and r["half"] == half]
            lines.append(
                f"| {family} | {half} | {stats([r['error'] for r in chosen])} "
                f"| {stats([r['baseline_error'] for r in chosen])} |"
            )
    lines += [
        "",
        "Held-out MoE rows per family, without and with the MLPerf rows:",
        "",
        "| family | Megatron-Bridge only | with MLPerf v6.0 | baseline, with MLPerf v6.0 |",
        "|---|---|---|---|",
    ]
    both = [r for r in bridge + mlperf if "step_s" in r and r["half"] == "held out"]
    for family in sorted({r["model"] for r in both}) + ["all"]:
        chosen = [r for r in both if family in ("all", r["model"])]
        before = [r["error"] for r in chosen if r.get("source") != "mlperf-training-v6.0-moe"]
        lines.append(
            f"| {family} | {stats(before)} | {stats([r['error'] for r in chosen])} "
            f"| {stats([r['baseline_error'] for r in chosen])} |"
        )
    lines += [
        "",
        "| row | half | measured s | model s | model error | baseline error | fits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in mlperf:
        if "step_s" in r:
            lines.append(
                f"| {r['id']} | {r['half']} | {r['published_s']:.3f} | {r['step_s']:.3f} | {r['error']:+.1%} "
                f"| {r['baseline_error']:+.1%} | {'yes' if r['fits'] else 'no'} |"
            )
        else:
            lines.append(f"| {r['id']} | {r['half']} | {r['published_s']:.3f} | not scored: {r['not_scored']} | | | |")
    return "\n".join(lines) + "\n"


HAND_WRITTEN = "## What this says"  # where RESULTS-moe.md's hand-written analysis begins; kept as it is


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    records, mfu = score(load_rows(args.runs))
    mlperf, _ = score(load_mlperf_rows(), mfu)
    text = report(records, mfu) + "\n" + mlperf_report(mlperf, records, mfu)
    if args.out.exists() and HAND_WRITTEN in (old := args.out.read_text(encoding="utf-8")):
        text += "\n" + old[old.index(HAND_WRITTEN) :]
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(text.split("\n\n| row")[0])
    print(mlperf_report(mlperf, records, mfu).split("\n\n| row")[0])
    return 0 if not math.isnan(mfu) else 1


if __name__ == "__main__":
    sys.exit(main())
