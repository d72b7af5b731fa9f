"""Read each MoE scorecard row's Megatron-Bridge recipe: dispatcher, A2A overlap, recompute, pipeline layout.

Run: python bench/moe_recipes.py [--mirror GIT_DIR] [--out bench/published/moe_recipes.csv]

For each row of bench/published/moe_runs.csv, the recipe file its container's performance summary
was published with (scripts/performance/configs/<family>/<family>_workload_base_configs.py at the
summary commit in CONTAINER_COMMIT) is evaluated with a stand-in for Bridge's WorkloadBaseConfig,
and the config named <MODEL>_PRETRAIN_CONFIG_<GPU>_<PRECISION>_V<n> whose pipeline, expert,
micro-batch and global-batch sizes are the row's is taken. 26.06.01 and 26.08 have no such file
(the recipes became code in src/megatron/bridge/perf_recipes, 2026-06-25); their rows take the
26.06 file's config, said so in the `source` column. Rows with no matching config keep the
scorecard's assumptions (`config` empty). The pipeline layout is the config's pp_layout, or for
DeepSeek-V3 the one its model recipe's set_deepseek_v3_pipeline_model_parallel_layout (read from the
same commit and run on the row's pp and vp) sets, which puts the embedding and 4 (pp=16) or 8 (pp=8)
layers on the first stage and only 1 or 5 layers beside the MTP layer and the loss on the last; '' is
Megatron-Core's even split. bias_dropout_fusion and cross_entropy_loss_fusion are the model's, from its
bridge and model recipe at the same commit (MODEL_FILES). The output is committed so the scorecard needs
no mirror.
"""

from __future__ import annotations

import argparse
import ast
import csv
import itertools
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "bench" / "published" / "moe_runs.csv"
OUT = ROOT / "bench" / "published" / "moe_recipes.csv"
MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
# the commit that published each container's rows (docs/performance-summary.md history)
CONTAINER_COMMIT = {
    "26.02": "c0b9a0003",
    "26.02.01": "cfeddcd94",
    "26.04": "74695a06d",
    "26.04.01": "21d102f5e",
    "26.06": "63b08b397",
    "26.06.01": "63b08b397",  # recipes moved to perf_recipes: the 26.06 file stands in
    "26.08": "63b08b397",
}
B300_26_06 = "8f341b04f"  # the B300 rows of 26.06 were published apart
FAMILY = {
    "deepseek-v3": ("deepseek/deepseek", "DEEPSEEK_V3"),
    "qwen3-235b-a22b": ("qwen/qwen3", "QWEN3_235B_A22B"),
    "qwen3-30b-a3b": ("qwen/qwen3", "QWEN3_30B_A3B"),
    "gpt-oss-120b": ("gpt_oss/gpt_oss", "GPT_OSS_120B"),
}
GPU = {"DGX-H100": "H100", "DGX-B200": "B200", "DGX-B300": "B300", "DGX-GB200": "GB200", "DGX-GB300": "GB300"}
PRECISION = {"BF16": "BF16", "FP8": "FP8_CS", "MXFP8": "FP8_MX"}
FIELDS = (
    "id",
    "source",
    "config",
    "moe_flex_dispatcher_backend",
    "moe_a2a_overlap",
    "recompute_modules",
    "pp_layout",
    "bias_dropout_fusion",
    "cross_entropy_loss_fusion",
)
# Two fusions each family's model sets outside the workload configs, read from the same commit: the
# model bridge's provider (bias_dropout_fusion; Megatron-Core's TransformerConfig default, False, where
# it sets none) and the model recipe (cross_entropy_loss_fusion; GPTModelProvider's default, True,
# where it sets none). Megatron-Core's GPT layer passes bias_dropout_fusion as the `fused` flag of its
# bias-dropout-add; cross_entropy_loss_fusion picks the fused vocab-parallel cross entropy.
MODEL_FILES = {
    "deepseek-v3": ("deepseek/deepseek_v3_bridge.py", "deepseek/deepseek_v3.py"),
    "qwen3-235b-a22b": ("qwen/qwen3_moe_bridge.py", "qwen/qwen3_moe.py"),
    "qwen3-30b-a3b": ("qwen/qwen3_moe_bridge.py", "qwen/qwen3_moe.py"),
    "gpt-oss-120b": ("gpt_oss/gpt_oss_bridge.py", "gpt_oss/gpt_oss.py"),
}
FUSION_DEFAULTS = {"bias_dropout_fusion": False, "cross_entropy_loss_fusion": True}
# DeepSeek-V3's recipes (scripts/performance/configs/deepseek/deepseek_llm_pretrain.py) take the config's
# pp_layout where it names one, else call this function of the model recipe, whose map of (pp, vp) to
# an explicit layout is the same at every summary commit; it is read from the commit, not copied here
DEEPSEEK_LAYOUT = (
    "src/megatron/bridge/recipes/deepseek/deepseek_v3.py",
    "set_deepseek_v3_pipeline_model_parallel_layout",
)
DEEPSEEK_MTP_LAYERS = 1  # DeepSeek-V3's num_nextn_predict_layers (config.json), which the recipe keeps
LAYOUT_SYMBOLS = {"embedding": "E", "decoder": "t", "mtp": "m", "loss": "L"}


class _Config(dict):
    """Bridge's WorkloadBaseConfig as the recipe files use it: keyword fields, defaults below."""

    def __init__(self, **fields):
        defaults = {"pipeline_model_parallel_size": 1, "expert_model_parallel_size": 1, "micro_batch_size": 1}
        super().__init__({**defaults, **fields})


def _replace(config: dict, **fields) -> _Config:
    return _Config(**{**config, **fields})


def recipe_configs(mirror: Path, commit: str, family: str) -> dict[str, dict]:
    path = f"scripts/performance/configs/{family}_workload_base_configs.py"
    text = git_show(mirror, commit, path)
    source = "\n".join(line for line in text.splitlines() if not line.startswith(("from ", "import ")))
    scope: dict = {"WorkloadBaseConfig": _Config, "replace": _replace}
    exec(compile(source, path, "exec"), scope)  # a public recipe file of plain assignments, read as data
    return {name: value for name, value in scope.items() if isinstance(value, _Config)}


def git_show(mirror: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(mirror), "show", f"{commit}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def deepseek_layout(mirror: Path, commit: str, pp: int, vp: int) -> str:
    """The layout DeepSeek-V3's model recipe at `commit` sets for (pp, vp), in Megatron-Core's string
    form ('' where its map has none: Megatron-Core's even split)."""
    path, name = DEEPSEEK_LAYOUT
    tree = ast.parse(git_show(mirror, commit, path))
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    for argument in function.args.args:  # its type hints (GPTModelProvider, typing) are not needed to run it
        argument.annotation = None
    function.returns = None
    scope: dict = {}
    exec(compile(ast.Module(body=[function], type_ignores=[]), path, "exec"), scope)  # a public recipe function
    model = SimpleNamespace(
        mtp_num_layers=DEEPSEEK_MTP_LAYERS,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vp,
        pipeline_model_parallel_layout=None,
    )
    scope[name](model)
    stages = model.pipeline_model_parallel_layout or []
    return "|".join(_run_lengths([LAYOUT_SYMBOLS[part] for part in stage]) for stage in stages)


def _run_lengths(symbols: list[str]) -> str:
    """['E', 't', 't'] -> 'Et*2' (the layout string's x*n repeat)."""
    runs = [(symbol, len(list(group))) for symbol, group in itertools.groupby(symbols)]
    return "".join(symbol if count == 1 else f"{symbol}*{count}" for symbol, count in runs)


def pipeline_layout(mirror: Path, commit: str, row: dict, config: dict) -> str:
    """The row's explicit pipeline layout: the config's pp_layout, else DeepSeek-V3's map ('' if none)."""
    if config.get("pp_layout"):
        return str(config["pp_layout"])
    if row["model"] != "deepseek-v3" or not config:
        return ""
    vp = 1 if row["vp"] in ("n/a", "") else int(row["vp"])
    return deepseek_layout(mirror, commit, int(row["pp"]), vp)


def matching(row: dict, configs: dict[str, dict]) -> tuple[str, dict] | None:
    model_key = FAMILY[row["model"]][1]
    prefix = f"{model_key}_PRETRAIN_CONFIG_{GPU[row['system']]}_{PRECISION[row['precision']]}_V"
    found = [
        (name, config)
        for name, config in sorted(configs.items())
        if name.startswith(prefix)
        and (config["pipeline_model_parallel_size"], config["expert_model_parallel_size"], config["micro_batch_size"])
        == (int(row["pp"]), int(row["ep"]), int(row["mbs"]))
        and config.get("global_batch_size") in (None, int(row["global_batch"]))
    ]
    return found[-1] if found else None  # the latest version of the recipe when several match


def model_fusions(mirror: Path, commit: str, model: str) -> dict[str, int]:
    """bias_dropout_fusion from the model's bridge, cross_entropy_loss_fusion from its recipe, at
    `commit` (1/0), each the default in FUSION_DEFAULTS where the file assigns none; a file that
    assigns both values is refused rather than guessed."""
    bridge, recipe = MODEL_FILES[model]
    texts = {
        "bias_dropout_fusion": git_show(mirror, commit, f"src/megatron/bridge/models/{bridge}"),
        "cross_entropy_loss_fusion": git_show(mirror, commit, f"src/megatron/bridge/recipes/{recipe}"),
    }
    found = {}
    for name, text in texts.items():
        values = set(re.findall(rf"\.{name} = (True|False)", text))
        if len(values) > 1:
            raise SystemExit(f"{model} at {commit}: {name} is set both ways; read it by hand")
        found[name] = int(values.pop() == "True") if values else int(FUSION_DEFAULTS[name])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=MIRROR)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with open(RUNS, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    cache: dict[tuple[str, str], dict] = {}
    out = []
    for row in rows:
        commit = B300_26_06 if row["system"] == "DGX-B300" and row["container"] == "26.06" else None
        commit = commit or CONTAINER_COMMIT[row["container"]]
        family = FAMILY[row["model"]][0]
        if (commit, family) not in cache:
            cache[(commit, family)] = recipe_configs(args.mirror, commit, family)
        hit = matching(row, cache[(commit, family)])
        name, config = hit if hit else ("", {})
        out.append(
            {
                "id": row["id"],
                "source": f"NVIDIA-NeMo/Megatron-Bridge@{commit} scripts/performance/configs/{family}_workload_base_configs.py",
                "config": name,
                "moe_flex_dispatcher_backend": config.get("moe_flex_dispatcher_backend") or "",
                "moe_a2a_overlap": int(bool(config.get("moe_a2a_overlap"))) if hit else "",
                "recompute_modules": " ".join(config.get("recompute_modules") or []),
                "pp_layout": pipeline_layout(args.mirror, commit, row, config),
                **model_fusions(args.mirror, commit, row["model"]),
            }
        )
    tmp = args.out.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(out)
    tmp.replace(args.out)
    print(f"{sum(1 for r in out if r['config'])} of {len(out)} rows matched a recipe config; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
