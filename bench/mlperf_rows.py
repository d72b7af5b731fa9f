"""Enter MLPerf Training submissions (GPT-3 175B, Llama 3.1 405B and 8B) as rows of bench/published/runs.csv.

Run: python bench/mlperf_rows.py [--mirrors DIR] [--runs bench/published/runs.csv] [--check]

For each submission in SUBMISSIONS, from the mlcommons/training_results_v<round> repository (a bare git
mirror, read with `git show`; DIR holds mlcommons+training_results_v<round>/repo):

- the layout comes from the submission's launch config: the one its README-<system>.md names, or, where
  there is none, the only config_*.sh of the benchmark's implementations whose DGXNNODES x DGXNGPU is the
  submission's GPU count. The config is *sourced* by bash (env -i, in a copy of its implementation folder),
  so what it takes from config_common*.sh is read as the run saw it; TP, PP, interleaving, CP, micro-batch,
  FP8/FP4 switches and recipes, sequence parallelism, distributed optimizer and recomputation switches.
- the global batch, sequence length and the platform come from the result logs (MLLOG keys
  global_batch_size, max_sequence_length, submission_platform), GPU type and memory and the NICs from
  <org>/systems/<system>.json.
- the step time: where the logs carry `tracked_stats` with `train_step_time` (Llama 3.1 rounds), the median
  of those values in each result file; otherwise (GPT-3 rounds) each training block, block_start to
  block_stop (evaluation runs between blocks, outside them), divided by its steps (the block's token count,
  `epoch_count`, over global batch x sequence), median over the blocks of a file. The row's value is the
  median over the submission's result files (3 per Llama 3.1 405B / GPT-3 submission, 10 per 8B one).

A submission whose result files are byte for byte those of a submission entered before it is left out
(Nebius's H200 runs appear unchanged in v5.0 and v5.1). Rows of the sources this script writes
(`mlperf-training-v*`) are replaced in place; no other row is touched. `--check` only prints.

`--moe` writes the v6.0 MoE rows (DeepSeek-V3 671B, GPT-OSS 20B) instead: see MOE_DOC below.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "bench" / "published" / "runs.csv"
MIRRORS = Path("/work/.mirror")


@dataclass(frozen=True)
class Submission:
    round: str  # "4.0" .. "5.1"
    org: str
    system: str  # the results/ and systems/ name
    benchmark: str  # gpt3, llama31_405b, llama31_8b
    base: str = ""  # an implementation folder the submission's own builds on (its README says so)


SUBMISSIONS = [
    Submission("4.0", "NVIDIA", "eos_n64_ngc24.04_nemo", "gpt3"),
    Submission("4.0", "NVIDIA", "eos-dfw_n1344_ngc24.04_nemo", "gpt3"),
    Submission("4.0", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo", "gpt3"),
    Submission("4.0", "smc", "64xSMC-H100-SXM-80GB", "gpt3"),
    Submission("4.1", "NVIDIA", "b200_n8_preview_nemo", "gpt3"),
    Submission("4.1", "NVIDIA", "eos_n32_ngc24.09_nemo", "gpt3"),
    Submission("4.1", "NVIDIA", "eos_n64_ngc24.09_nemo", "gpt3"),
    Submission("4.1", "NVIDIA", "eos-dfw_n1452_ngc24.04_nemo", "gpt3"),
    *(Submission("5.0", "NVIDIA", f"eos-dfw_n{n}_ngc25.01_nemo", "llama31_405b") for n in (64, 256, 304, 320, 1024)),
    Submission("5.0", "NVIDIA", "tyche_ngpu256_ngc25.04_nemo", "llama31_405b"),
    Submission("5.0", "NVIDIA", "tyche_ngpu512_ngc25.04_nemo", "llama31_405b"),
    *(
        Submission("5.0", "IBM+CoreWeave+NVIDIA", f"carina_ngpu{n}_ngc25.04_nemo", "llama31_405b")
        for n in (512, 1024, 1536, 2048, 2496)
    ),
    Submission("5.0", "Nebius", "nebius_soperator_8xH200_n64_ngc25.01_nemo", "llama31_405b"),
    Submission("5.0", "Nebius", "nebius_soperator_8xH200_n128_ngc25.01_nemo", "llama31_405b"),
    Submission("5.1", "NVIDIA", "tyche_ngpu512_ngc25.09_nemo", "llama31_405b"),
    Submission("5.1", "NVIDIA", "theia_ngpu512_ngc25.09_nemo", "llama31_405b"),
    Submission("5.1", "NVIDIA", "hsg_ngpu2560_ngc25.09_nemo", "llama31_405b"),
    Submission("5.1", "NVIDIA", "hsg_ngpu5120_ngc25.09_nemo", "llama31_405b"),
    # hpg.dgxb200x8/README.md: "Please refer to the implementation directory b200_nemo for the details"; its two
    # configs source config_common*.sh that only b200_nemo holds
    Submission("5.1", "University-of-Florida", "hpg.dgxb200x8.n32", "llama31_405b", base="b200_nemo"),
    Submission("5.1", "University-of-Florida", "hpg.dgxb200x8.n56", "llama31_405b", base="b200_nemo"),
    Submission("5.1", "Nebius", "nebius_h200_n64", "llama31_405b"),
    Submission("5.1", "Nebius", "nebius_h200_n128", "llama31_405b"),
    *(
        Submission("5.1", "NVIDIA", f"{site}_ngpu{n}_ngc25.09_nemo", "llama31_8b")
        for site in ("tyche", "theia")
        for n in (8, 72, 512)
    ),
    # Llama 2 70B LoRA (issue 25): NVIDIA's submissions on H100, H200, B200, GB200 and GB300
    *(
        Submission("4.0", "NVIDIA", system, "llama2_70b_lora")
        for system in ("eos_ngc24.04_nemo", "eos_n8_ngc24.04_nemo", "eos_n128_ngc24.04_nemo", "h200_ngc24.04_nemo")
    ),
    *(
        Submission("4.1", "NVIDIA", system, "llama2_70b_lora")
        for system in (
            "eos_ngc24.09_nemo",
            "eos_n8_ngc24.09_nemo",
            "eos_n128_ngc24.09_nemo",
            "h200_ngc24.09_nemo",
            "b200_preview_nemo",
        )
    ),
    Submission("5.0", "NVIDIA", "nyx_n1_ngc25.04_nemo", "llama2_70b_lora"),
    *(Submission("5.0", "NVIDIA", f"tyche_ngpu{n}_ngc25.04_nemo", "llama2_70b_lora") for n in (8, 72, 144, 512)),
    *(
        Submission("5.1", "NVIDIA", f"{site}_ngpu{n}_ngc25.09_nemo", "llama2_70b_lora")
        for site in ("tyche", "theia")
        for n in (8, 72, 512)
    ),
]
# the model of each benchmark: commbench preset, shape columns, what the shape rests on
MODELS = {
    "gpt3": dict(
        name="gpt3-175b",
        short="gpt3-175b",
        params=175,
        shape=(96, 12288, 96, 96, 49152, 50257, "gelu", 1),
        note="GPT-3 175B as the benchmark's NeMo config sets it (96 layers, hidden 12288, 96 heads, FFN 4h, "
        "sequence 2048, hidden and attention dropout 0, layernorm1p); vocabulary: the C4 SentencePiece model "
        "c4_en_301_5Mexp2_spm, size not in the config (commbench preset gpt3-175b's 50257 assumed)",
        assumed="vocab",
    ),
    "llama31_405b": dict(
        name="custom",
        short="llama3.1-405b",
        params=405,
        shape=(126, 16384, 128, 8, 53248, 32768, "swiglu", 0),
        note="Llama 3.1 405B (NeMo Llama31Config405B, 126 layers) with the benchmark's Mixtral 8x22B "
        "tokenizer in place of the paper's (implementation README, 'List of Layers'): vocabulary 32768",
        assumed="",
    ),
    "llama31_8b": dict(
        name="llama3-8b",
        short="llama3.1-8b",
        params=8,
        shape=(32, 4096, 32, 8, 14336, 128256, "swiglu", 0),
        note="Llama 3.1 8B (NeMo Llama31Config8B; the Llama 3.1 tokenizer, vocabulary 128256; commbench "
        "preset llama3-8b, the same shape)",
        assumed="",
    ),
    "llama2_70b_lora": dict(
        name="llama2-70b",
        short="llama2-70b-lora",
        params=70,
        shape=(80, 8192, 64, 8, 28672, 32000, "swiglu", 0),
        note="Llama 2 70B (commbench preset llama2-70b: 80 layers, hidden 8192, 64 heads, 8 KV heads, FFN 28672, "
        "vocabulary 32000) fine-tuned with LoRA as the benchmark's conf/megatron_gpt_peft_tuning_config.yaml sets "
        "it: peft_scheme lora, target_modules ['attention'] (NeMo's fused QKV and output projections), "
        "adapter_dim LORA_DIM (16; the logs' lora_rank says 16), sequence MAX_SEQLEN (8192, packed GovReport)",
        assumed="",
        finetune="lora:16:qkv,o",
    ),
}
# the LoRA benchmark's configs name the layout with NeMo's short variables; the GPT/Llama 3.1 ones' names
LORA_ENV = {
    "TP": "TENSOR_MODEL_PARALLEL",
    "PP": "PIPELINE_MODEL_PARALLEL",
    "CP": "CONTEXT_PARALLEL",
    "MBS": "MICRO_BATCH_SIZE",
    "SP": "SEQ_PARALLEL",
    "VP": "INTERLEAVED_PIPELINE",
    "ACG": "ACT_CKPT_GRANULARITY",
    "LORA_DIM": "LORA_DIM",
    "MAX_SEQLEN": "MAX_SEQLEN",
    "FP8_ACTIVATION": "FP8_ACT",  # v4.x's name of activation_func_fp8_input_store's switch
    "FP8_ACT": "FP8_ACT",
    "PRE_QUANTIZED_MODEL": "PRE_QUANTIZED_MODEL",
}
# literals of the LoRA implementation's yaml and train.py the memory ledger follows (lora_cell)
LORA_LITERALS = ("disable_parameter_transpose_cache", "hidden_dropout", "attention_dropout")
# accelerator_model_name of a systems JSON -> (scorecard GPU, memory in GB as the scorecard's other rows give it)
GPUS = (
    ("GB300", "GB300", 279),
    ("GB200", "GB200", 186),
    ("B200", "B200", 180),
    ("H200", "H200", 141),
    ("H100", "H100", 80),
)
ENV_KEYS = (
    "MINIBS",
    "TENSOR_MODEL_PARALLEL",
    "PIPELINE_MODEL_PARALLEL",
    "INTERLEAVED_PIPELINE",
    "CONTEXT_PARALLEL",
    "MICRO_BATCH_SIZE",
    "DGXNNODES",
    "DGXNGPU",
    "SEQ_PARALLEL",
    "USE_DIST_OPTIMIZER",
    "FP8",
    "FP8_HYBRID",
    "FP8_RECIPE",
    "FP8_AMAX_HISTORY",
    "FP8_PARAMS",
    "FP8_PARAM_GATHER",
    "FP8_DPA",
    "FP4",
    "FP4_RECIPE",
    "FIRST_LAST_LAYERS_BF16",
    "TP_COMM_OVERLAP",
    "ASYM_PP_EMBED",
    "ASYM_PP_LOSS",
    "LAYER_CUDA_GRAPH",
    "MCORE_CUDA_GRAPH",
    "FULL_CUDA_GRAPH",
    "ACT_CKPT_GRANULARITY",
    "ACT_CKPT_METHOD",
    "ACT_CKPT_NUM_LAYERS",
    "RECOMPUTE_MODULES",
    "CPU_OFFLOADING",
    "OVERWRITTEN_NUM_LAYERS",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def repo_of(mirrors: Path, round_: str) -> Path:
    return mirrors / f"mlcommons+training_results_v{round_}" / "repo"


def launch_config(repo: Path, names: list[str], sub: Submission, gpus: int) -> tuple[str, str]:
    """(implementation folder, config file name) the submission was launched with."""
    base = f"{sub.org}/benchmarks/{sub.benchmark}/implementations/"
    readme = [n for n in names if n.startswith(base) and n.endswith(f"/README-{sub.system}.md")]
    configs = [n for n in names if n.startswith(base) and re.search(r"/config_[^/]*\.sh$", n)]
    if readme:
        named = re.search(r"config_[\w.-]+\.sh", git(repo, "show", f"HEAD:{readme[0]}")).group(0)
        mine = [c for c in configs if c.endswith("/" + named)]
        here = [c for c in mine if c.startswith(readme[0].rsplit("/", 1)[0] + "/")]
        path = (here or mine)[0]
        return path.rsplit("/", 1)[0], named
    sized = [c for c in configs if re.search(r"/config_[A-Za-z0-9]+_(\d+)x(\d+)x", c)]
    fit = [c for c in sized if _gpus_in_name(c) == gpus]
    if len(fit) != 1:
        raise SystemExit(f"{sub}: {len(fit)} configs for {gpus} GPUs: {fit}")
    return fit[0].rsplit("/", 1)[0], fit[0].rsplit("/", 1)[1]


def _gpus_in_name(path: str) -> int:
    nodes, per_node = re.search(r"/config_[A-Za-z0-9]+_(\d+)x(\d+)x", path).groups()
    return int(nodes) * int(per_node)


def sourced_env(repo: Path, folders: list[str], config: str) -> dict[str, str]:
    """The variables a shell has after `source config` in a copy of the implementation folder (laid over the
    folders it builds on, first to last), with the defaults its conf/*.yaml give (${oc.env:NAME,default})
    for those the config leaves unset."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "impl"
        for folder in folders:
            archive = subprocess.run(["git", "-C", str(repo), "archive", f"HEAD:{folder}"], capture_output=True)
            work.mkdir(exist_ok=True)
            subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
        common = work / "config_common.sh"
        if not common.exists() and (work / "configs" / "config_common.sh").exists():
            # v4.1 LoRA: the config sources ./config_common.sh, the published folder keeps it in configs/
            common.write_bytes((work / "configs" / "config_common.sh").read_bytes())
        script = f"cd {work} && source ./{config} >/dev/null 2>&1; env -0"
        out = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", script], capture_output=True).stdout
        defaults: dict[str, str] = {}
        for yaml in sorted(work.glob("conf/*.yaml")):
            for name, value in re.findall(r"oc\.env:(\w+),([^}${]+)\}", yaml.read_text(encoding="utf-8")):
                defaults.setdefault(name, value.strip())
        literals = {}
        for source in [*sorted(work.glob("conf/*.yaml")), work / "train.py"]:
            text = source.read_text(encoding="utf-8") if source.exists() else ""
            for name in LORA_LITERALS:
                found = re.search(rf"^\s*{name}\s*[:=]\s*([\w.]+)", text, re.MULTILINE)
                if found:
                    literals.setdefault(name.upper(), found.group(1))
        # v5.x train.py builds NeMo 2's llm.Llama2Config70B without dropout arguments: NeMo's LlamaConfig
        # (nemo/collections/llm/gpt/model/llama.py) sets attention_dropout and hidden_dropout to 0.0
        train = work / "train.py"
        if train.exists() and "Llama2Config70B(" in (code := train.read_text(encoding="utf-8")):
            for name in ("HIDDEN_DROPOUT", "ATTENTION_DROPOUT"):
                if name.lower() not in code:
                    literals.setdefault(name, "0.0")
    pairs = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    wanted = (*ENV_KEYS, *LORA_ENV)
    merged = {k: defaults[k] for k in wanted if k in defaults} | {k: v for k, v in pairs.items() if k in wanted}
    return {LORA_ENV.get(k, k): v for k, v in merged.items()} | literals


@dataclass
class LogFigures:
    step_s: float
    keys: dict
    how: str
    digest: str


def log_figures(text: str) -> LogFigures:
    """The step time of one result file (see the module docstring) and its MLLOG run keys."""
    keys, steps, blocks, start = {}, [], [], None
    throughput: list[float] = []
    for line in text.splitlines():
        if ":::MLLOG" not in line:
            continue
        event = json.loads(line.split(":::MLLOG", 1)[1])
        key, value, meta = event["key"], event["value"], event.get("metadata", {})
        if key in ("submission_platform", "global_batch_size", "max_sequence_length", "gradient_accumulation_steps"):
            keys[key] = value
        elif key == "tracked_stats" and isinstance(value, dict) and "train_step_time" in value:
            steps.append(float(value["train_step_time"]))
        elif key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
            # v4.x LoRA: samples over the summed train-batch time since the last evaluation (custom_callbacks.py)
            throughput.append(float(value["throughput"]))
        elif key == "block_start":
            start = event["time_ms"]
        elif key == "block_stop" and start is not None and "epoch_count" in meta:
            blocks.append((event["time_ms"] - start, meta["epoch_count"]))
            start = None
    # the same run submitted twice: same MLLOG lines (the SYSJSON lines around them may differ)
    digest = hashlib.sha256("\n".join(line for line in text.splitlines() if ":::MLLOG" in line).encode()).hexdigest()
    if steps:
        return LogFigures(statistics.median(steps), keys, f"train_step_time x{len(steps)}", digest)
    if throughput and not blocks:  # GPT-3's logs carry a throughput too; their blocks say more
        per_step = [keys["global_batch_size"] / t for t in throughput]
        return LogFigures(statistics.median(per_step), keys, f"gbs/throughput x{len(per_step)}", digest)
    tokens_per_step = keys["global_batch_size"] * keys["max_sequence_length"]
    per_block = [ms / 1000 / (count / tokens_per_step) for ms, count in blocks]
    return LogFigures(statistics.median(per_block), keys, f"{len(per_block)} blocks", digest)


def compute_precision(env: dict[str, str]) -> str:
    if env.get("FP4") == "True":
        return {"nvfp4": "nvfp4"}[env.get("FP4_RECIPE", "nvfp4")]
    if env.get("FP8") == "True":
        return {"delayed": "fp8-delayed", "tensorwise": "fp8-current", "mxfp8": "mxfp8"}[
            env.get("FP8_RECIPE", "delayed").strip("'\"")  # the LoRA yaml's default is quoted: 'delayed'
        ]
    return "bf16"


def row_for(mirrors: Path, sub: Submission, seen: dict[str, str]) -> tuple[dict | None, str]:
    repo = repo_of(mirrors, sub.round)
    names = git(repo, "ls-tree", "-r", "HEAD", "--name-only").splitlines()
    results = sorted(
        n
        for n in names
        if re.fullmatch(rf"{re.escape(f'{sub.org}/results/{sub.system}/{sub.benchmark}')}/result_[\w-]+\.txt", n)
    )
    figures = [log_figures(git(repo, "show", f"HEAD:{n}")) for n in results]
    digest = hashlib.sha256("".join(f.digest for f in figures).encode()).hexdigest()
    if digest in seen:
        return None, f"{sub.round} {sub.org}/{sub.system}: result files identical to {seen[digest]}; not entered"
    seen[digest] = f"v{sub.round} {sub.org}/{sub.system}"
    system = json.loads(git(repo, "show", f"HEAD:{sub.org}/systems/{sub.system}.json"))
    gpu, memory = next((g, m) for key, g, m in GPUS if key in system["accelerator_model_name"])
    nodes, per_node = int(system["number_of_nodes"]), int(system["accelerators_per_node"])
    folder, config = launch_config(repo, names, sub, nodes * per_node)
    base = [f"{sub.org}/benchmarks/{sub.benchmark}/implementations/{sub.base}"] if sub.base else []
    env = sourced_env(repo, [*base, folder], config)
    return build_row(sub, repo, system, gpu, memory, folder, config, env, results, figures), ""


def build_row(sub, repo, system, gpu, memory, folder, config, env, results, figures) -> dict:
    model = MODELS[sub.benchmark]
    keys = figures[0].keys
    tp, pp = int(env["TENSOR_MODEL_PARALLEL"]), int(env["PIPELINE_MODEL_PARALLEL"])
    cp = int(env.get("CONTEXT_PARALLEL", "1"))
    env.setdefault("DGXNGPU", system["accelerators_per_node"])  # the GPT-3 configs leave it to the yaml's 8
    gpus = int(env["DGXNNODES"]) * int(env["DGXNGPU"])
    dp = gpus // (tp * pp * cp)
    vpp = int(env["INTERLEAVED_PIPELINE"]) if pp > 1 and env.get("INTERLEAVED_PIPELINE", "null") != "null" else 1
    mbs, gbs = int(env["MICRO_BATCH_SIZE"]), int(keys["global_batch_size"])
    seq = int(keys.get("max_sequence_length") or env["MAX_SEQLEN"])  # the LoRA logs leave it to the yaml
    if int(keys["gradient_accumulation_steps"]) * dp * mbs != gbs:  # the logs' own check of the layout
        raise SystemExit(f"{sub}: accumulation {keys['gradient_accumulation_steps']} x dp {dp} x mbs {mbs} != {gbs}")
    precision = compute_precision(env)
    recompute = [
        k
        for k in ("ACT_CKPT_GRANULARITY", "RECOMPUTE_MODULES", "CPU_OFFLOADING")
        if env.get(k) not in (None, "", "null", "None", "False", "0")
    ]
    if recompute:
        raise SystemExit(f"{sub}: recomputation/offload set ({recompute}); enter it by hand")
    step = statistics.median(f.step_s for f in figures)
    commit = git(repo, "rev-parse", "HEAD").strip()
    submitter = "" if sub.org == "NVIDIA" else "-" + sub.org.split("+")[0].lower()
    site = "" if sub.org != "NVIDIA" else "-" + sub.system.split("_")[0]
    ident = f"mlperf{sub.round.replace('.', '')}-{gpu.lower()}-{model['short']}-{precision}-{gpus}g{site}{submitter}"
    minibs_note = (
        ""
        if int(env["MINIBS"]) * dp == gbs
        else f"; the config's MINIBS {env['MINIBS']} gives GBS {int(env['MINIBS']) * dp}, the logs say {gbs} (taken)"
    )
    flags = ", ".join(f"{k}={env[k]}" for k in ENV_KEYS[8:] if k in env)
    per_file = ", ".join(f"{f.step_s:.4g} ({f.how})" for f in figures)
    return {
        "id": ident,
        # a source of its own per round, so the split rule's positions of the rows entered before do not move
        "source": f"mlperf-training-v{sub.round}" + ("-lora" if "finetune" in model else ""),
        "reference": (
            f"mlcommons/training_results_v{sub.round} at commit {commit}: {sub.org}/results/{sub.system}/"
            f"{sub.benchmark}/result_*.txt ({len(results)} files), launch config {folder}/{config} (sourced with "
            f"the files it sources), {sub.org}/systems/{sub.system}.json"
        ),
        "published_params_b": model["params"],
        "gpu": gpu,
        "gpu_memory_gb": memory,
        "gpus_per_node": int(env["DGXNGPU"]),
        "nodes": int(env["DGXNNODES"]),
        "gpus": gpus,
        "network": f"{system['system_name']}: {system['accelerator_interconnect']}; {system['host_networking']}",
        "model": model["name"],
        **dict(
            zip(("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "mlp", "tied_embeddings"), model["shape"])
        ),
        "seq_len": seq,
        "global_batch": gbs,
        **dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=1, vpp=vpp, mbs=mbs, recompute="none"),
        "sp": int(tp > 1 and env.get("SEQ_PARALLEL", "True") not in ("False", "0")),
        "zero": int(env.get("USE_DIST_OPTIMIZER") == "True"),
        "framework": system["framework"],
        "execution": "megatron-core",
        "precision": precision,
        "metric": "iteration_s",
        "value": f"{step:.4g}",
        "flops_convention": "",
        "assumed": model["assumed"],
        "notes": (
            f"MLPerf Training v{sub.round} closed division, {sub.org}; {model['note']}; step time: median over the "
            f"{len(results)} result files of each file's median ({per_file}){minibs_note}; config: {flags}; no "
            "activation recomputation set; not priced by the planner: asymmetric pipeline split (ASYM_PP_*), CUDA "
            "graphs, FP8 parameter gather and FP8 attention where set"
        ),
        "superseded_by": "",
        # TE TP communication overlap as launched (the yaml's default is off): the scorecard passes it on
        "tp_comm_overlap": "on" if env.get("TP_COMM_OVERLAP") == "True" else "off",
        "finetune": lora_cell(model, env),
    }


def lora_cell(model: dict, env: dict[str, str]) -> str:
    """The finetune column: empty for full training, else lora:<rank>:<targets>:<settings> as the config
    sets the rank and what the memory ledger follows: base=quantised where the base is created in the
    compute format (the yaml's fp8_params follows FP8; v5.x train.py's te.fp8_model_init under FP8; the
    NVFP4 runs' PRE_QUANTIZED_MODEL replaces the weights in place), transpose_cache (the literal
    disable_parameter_transpose_cache), fp8_activation_input (FP8_ACTIVATION / FP8_ACT), model_dropout off
    where the yaml sets hidden and attention dropout to 0.0."""
    if "finetune" not in model:
        return ""
    kind, rank, targets = model["finetune"].split(":")
    yes = ("True", "1", "true")
    quantised = env.get("FP8") in yes or (env.get("FP4") in yes and env.get("PRE_QUANTIZED_MODEL") in yes)
    settings = [f"base={'quantised' if quantised else 'bf16'}"]
    if "DISABLE_PARAMETER_TRANSPOSE_CACHE" in env:
        settings.append(f"transpose_cache={'off' if env['DISABLE_PARAMETER_TRANSPOSE_CACHE'] in yes else 'on'}")
    settings.append(f"fp8_activation_input={'on' if env.get('FP8_ACT') in yes else 'off'}")
    if env.get("HIDDEN_DROPOUT") in ("0.0", "0") and env.get("ATTENTION_DROPOUT") in ("0.0", "0"):
        settings.append("model_dropout=off")
    return f"{kind}:{env.get('LORA_DIM', rank)}:{targets}:{'+'.join(settings)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=MIRRORS)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--check", action="store_true", help="print the rows, write nothing")
    parser.add_argument("--moe", action="store_true", help="the v6.0 MoE rows (bench/published/moe_mlperf_runs.csv)")
    parser.add_argument("--v6-tree", type=Path, default=V6_TREE, help="the v6.0 launch configs (see MOE_DOC)")
    args = parser.parse_args(argv)
    if args.moe:
        return moe_main(args.v6_tree, args.check)
    seen: dict[str, str] = {}
    new = []
    for sub in SUBMISSIONS:
        row, why = row_for(args.mirrors, sub, seen)
        if row is None:
            print(why, file=sys.stderr)
            continue
        new.append(row)
        print(
            f"{row['id']}: {row['value']} s/step, {row['gpu']} x{row['gpus']} tp{row['tp']} pp{row['pp']} "
            f"vpp{row['vpp']} cp{row['cp']} dp{row['dp']} mbs{row['mbs']} gbs{row['global_batch']} {row['precision']}"
        )
    if args.check:
        return 0
    with args.runs.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        added = ("tp_comm_overlap", "finetune")
        fields = list(reader.fieldnames or []) + [c for c in added if c not in (reader.fieldnames or [])]
        rows = [{**r, **{c: r.get(c) or "" for c in added}} for r in reader]
        rows = [r for r in rows if not r["source"].startswith("mlperf-training-")]
    tmp = args.runs.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows + new)
    tmp.replace(args.runs)
    return 0


# --- MLPerf Training v6.0: the MoE benchmarks (issue 26) -----------------------------------------------------
MOE_DOC = """The v6.0 MoE rows (`--moe`): DeepSeek-V3 671B (deepseekv3_671b) and GPT-OSS 20B (gpt_oss_20b), NVIDIA's
closed-division submissions, written to bench/published/moe_mlperf_runs.csv for bench/scorecard_moe.py.

mlcommons/training_results_v6.0 cannot be fetched here; the library's index holds a copy of it,
Richardyu114/training_results_v6.0 at commit eabf23a07b (V6_REPO, V6_COMMIT), read file by file with its
read_file verb. That index keeps one path for files whose text is identical, so a config an implementation
folder sources may be stored under another folder (or another submitter's, e.g. Lambda's copy of NVIDIA's
GPT-OSS configs); MoESubmission.read_at says where each config's text was read. The launch configs, the
config_common*.sh they source and the yaml lines with the defaults this script uses were copied by hand
into a directory laid out like the repository (--v6-tree, default V6_TREE; not committed: it is the
submitters' code); each copied config's byte count was checked against the index's. The config is then
*sourced* by bash exactly as for v4.0-v5.1 (sourced_env).

Step times: the result logs are 0.1-0.4 MB each and could not be copied whole. For each result file one
16,000-character window of its MLLOG lines was read (after the warm-up: steps 11-34 of DeepSeek-V3's ~50,
steps ~600-2,000 of GPT-OSS's) and every `tracked_stats` `train_step_time` logged with a
`reduced_train_loss` in it (callback_logging.py line 341 / 328: one per step for DeepSeek-V3, the mean over
32 steps for GPT-OSS) was entered in bench/published/mlperf_v6_moe_steps.txt with its samples_count. A
row's step time is the median over its files of each window's median. Files read: DeepSeek-V3 result_0..2
(the submissions have 3), GPT-OSS result_0..1 (of 10). The samples_count stride checks the global batch
(DeepSeek-V3 logs every step, GPT-OSS every LOG_EVERY_N_STEPS=32)."""
V6_SOURCE = "mlperf-training-v6.0-moe"
V6_REPO = "Richardyu114/training_results_v6.0"
V6_COMMIT = "eabf23a07b2a0c60a289ff871dc3a46fff0d0421"
V6_TREE = Path("/tmp/training_results_v6.0-index")
V6_STEPS = ROOT / "bench" / "published" / "mlperf_v6_moe_steps.txt"
MOE_RUNS = ROOT / "bench" / "published" / "moe_mlperf_runs.csv"
DSV3 = "NVIDIA/benchmarks/deepseekv3_671b/implementations/"
GPTOSS = "NVIDIA/benchmarks/gpt_oss_20b/implementations/nemo/"
MOE_ENV = (
    *ENV_KEYS,
    "EXPERT_PARALLEL",
    "EXPERT_TENSOR_PARALLEL",
    "PIPELINE_LAYOUT",
    "MTP_NUM_LAYERS",
    "SEQ_LENGTH",
    "ENCODER_SEQ_LENGTH",
    "MOE_TOKEN_DISPATCHER_TYPE",
    "MOE_FLEX_DISPATCHER_BACKEND",
    "OVERLAP_MOE_EXPERT_PARALLEL_COMM",
    "DELAY_WGRAD_COMPUTE",
    "CUDA_GRAPH_IMPLEMENTATION",
    "CUDA_GRAPH_SCOPE",
    "MOE_EXPERT_RANK_CAPACITY_FACTOR",
    "MOE_PAGED_STASH",
    "FP8_OUTPUT_PROJ",
    "USE_MNNVL",
    "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN",
    "CROSS_ENTROPY_LOSS_FUSION",
    "LOG_EVERY_N_STEPS",
    "OVERWRITTEN_NUM_LAYERS",
)


@dataclass(frozen=True)
class MoESubmission:
    system: str  # NVIDIA/results/<system>/ and NVIDIA/systems/<system>.json
    benchmark: str  # deepseekv3_671b, gpt_oss_20b
    config: str  # the config README-<system>.md names, as a path of the tree
    common: str  # the folder holding the config_common*.sh and conf/ it sources
    read_at: str  # where the index stores the config's text
    gpu: str  # systems JSON accelerator_model_name (GB200 / GB300)
    memory: str  # systems JSON accelerator_memory_capacity
    nodes: int  # systems JSON number_of_nodes (4 accelerators each)
    network: str  # systems JSON system_name; host_networking
    logged: tuple[int, int, int] | None = None  # (global batch, accumulation, sequence) read in result_0's header


_GB200 = ("GB200", "189471 MiB")
_GB300 = ("GB300", "284208 MiB")
_TYCHE = "4x ConnectX-7 IB NDR 400 Gb/s; NVLINK Gen5 1800 GB/s + NVSWITCH Gen5"
_THEIA = "4x ConnectX-8 IB XDR 800 Gb/s; NVLINK Gen5 1800 GB/s + NVSWITCH Gen5"
MOE_SUBMISSIONS = [
    MoESubmission(
        "theia_ngpu256_ngc26.04_nemo",
        "deepseekv3_671b",
        DSV3 + "theia_ngpu256_ngc26.04_nemo/config_GB300_64x4x240xtp1pp4ep32cp1_mxfp8_full_cg.sh",
        DSV3 + "tyche-hsg_ngpu512_ngc26.04_nemo",
        DSV3 + "tyche-hsg_ngpu8192_ngc26.04_nemo/config_GB300_64x4x240xtp1pp4ep32cp1_mxfp8_full_cg.sh",
        *_GB300,
        64,
        "Theia (4x NVIDIA GB300 NVL72); " + _THEIA,
        (15360, 240, 4096),
    ),
    MoESubmission(
        "theia_ngpu512_ngc26.04_nemo",
        "deepseekv3_671b",
        DSV3 + "theia_ngpu512_ngc26.04_nemo/config_GB300_128x4x120xtp1pp4ep32cp1_mxfp8_full_cg.sh",
        DSV3 + "tyche-hsg_ngpu512_ngc26.04_nemo",
        DSV3 + "theia_ngpu512_ngc26.04_nemo/config_GB300_128x4x120xtp1pp4ep32cp1_mxfp8_full_cg.sh",
        *_GB300,
        128,
        "Theia (8x NVIDIA GB300 NVL72); " + _THEIA,
    ),
    *(
        MoESubmission(
            f"tyche-hsg_ngpu{4 * nodes}_ngc26.04_nemo",
            "deepseekv3_671b",
            DSV3
            + f"tyche-hsg_ngpu{4 * nodes}_ngc26.04_nemo/config_GB200_{nodes}x4x{minibs}xtp2pp4ep32cp1_mxfp8_full_cg.sh",
            DSV3 + "tyche-hsg_ngpu512_ngc26.04_nemo",
            DSV3
            + f"tyche-hsg_ngpu{4 * nodes}_ngc26.04_nemo/config_GB200_{nodes}x4x{minibs}xtp2pp4ep32cp1_mxfp8_full_cg.sh",
            *_GB200,
            nodes,
            f"Tyche-hsg ({nodes // 16}x NVIDIA GB200 NVL72); " + _TYCHE,
            logged,
        )
        for nodes, minibs, logged in (
            (128, 240, None),
            (512, 60, (15360, 60, 4096)),
            (1024, 32, None),
            (2048, 16, None),
        )
    ),
    MoESubmission(
        "theia_ngpu8_ngc26.04_nemo",
        "gpt_oss_20b",
        GPTOSS + "config_GB300_2x4x3xtp1pp1cp1ep1_mxfp8.sh",
        GPTOSS,
        "index id 66553323555 (found by its text; the index names no path): MINIBS=3, 2 nodes x 4 GPUs, "
        "tp1pp1cp1ep1, config_common_cg.sh, as the README's config name says",
        *_GB300,
        2,
        "Theia (1x NVIDIA GB300 NVL72); " + _THEIA,
        (24, 1, 8192),
    ),
    MoESubmission(
        "theia_ngpu72_ngc26.04_nemo",
        "gpt_oss_20b",
        GPTOSS + "config_GB300_18x4x1xtp1pp1cp2ep4_mxfp8.sh",
        GPTOSS,
        "index id 66452796619 (the text of the name found by string search, WALLTIME_RUNANDTIME=40; Lambda's "
        "gb300_0513 copy differs only in WALLTIME_RUNANDTIME=480)",
        *_GB300,
        18,
        "Theia (1x NVIDIA GB300 NVL72); " + _THEIA,
        (36, 1, 8192),
    ),
    MoESubmission(
        "tyche-hsg_ngpu72_ngc26.04_nemo",
        "gpt_oss_20b",
        GPTOSS + "config_GB200_18x4x1xtp1pp1cp2ep4_mxfp8.sh",
        GPTOSS,
        "Lambda/benchmarks/gpt_oss_20b/implementations/b200_0504/config_GB200_18x4x1xtp1pp1cp2ep4_mxfp8.sh",
        *_GB200,
        18,
        "Tyche-hsg (1x NVIDIA GB200 NVL72); " + _TYCHE,
    ),
    MoESubmission(
        "theia_ngpu512_ngc26.04_nemo",
        "gpt_oss_20b",
        GPTOSS + "config_GB300_128x4x1xtp2pp1cp4ep8.sh",
        GPTOSS,
        GPTOSS + "config_GB300_128x4x1xtp2pp1cp4ep8.sh",
        *_GB300,
        128,
        "Theia (8x NVIDIA GB300 NVL72); " + _THEIA,
    ),
]
# the model each benchmark trains: the planner model, and what it rests on
MOE_MODELS = {
    "deepseekv3_671b": dict(
        family="deepseek-v3",
        model="deepseek-v3",
        short="deepseek-v3",
        note="DeepSeek-V3 671B as the benchmark's conf/model/671b.yaml sets it ('uses defaults from HuggingFace "
        "config (no architecture overrides)', MTP_NUM_LAYERS default 1): commbench preset deepseek-v3",
        fusions=("", ""),  # the implementation's pretrain.py was not read: the preset's assumption stays
    ),
    "gpt_oss_20b": dict(
        family="gpt-oss-20b",
        model="bench/published/models/mlperf-gpt-oss-20b.json",
        short="gpt-oss-20b",
        note="GPT-OSS 20B as the benchmark's pretrain.py builds it (GPTModelProvider: 24 layers, 32 experts, top-4, "
        "hidden 2880, 64 heads, 8 query groups, kv_channels 64, ffn 2880, window (127, 0) every other layer, "
        "learnable softmax, vocab_size 128256, untied): commbench preset gpt-oss-20b with its vocabulary "
        "(bench/published/models/mlperf-gpt-oss-20b.json)",
        fusions=("0", "1"),  # pretrain.py bias_dropout_fusion=False; conf/gpt_oss.yaml cross_entropy_loss_fusion True
    ),
}
MOE_FIELDS = (
    "id",
    "source",
    "half",
    "model",
    "model_config",
    "system",
    "gpus",
    "nodes",
    "gpus_per_node",
    "precision",
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
    "sp",
    "pp_layout",
    "dispatcher",
    "moe_overlap",
    "recompute_modules",
    "cuda_graph",
    "bias_dropout_fusion",
    "cross_entropy_loss_fusion",
    "step_s",
    "step_how",
    "reference",
    "network",
    "notes",
)


def tree_env(tree: Path, sub: MoESubmission) -> dict[str, str]:
    """The variables `source <config>` leaves, in a copy of the common folder with the config laid in it,
    with the yaml defaults (${oc.env:NAME,default}) of its conf/ for those it leaves unset."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "impl"
        subprocess.run(["cp", "-r", str(tree / sub.common), str(work)], check=True)
        name = sub.config.rsplit("/", 1)[1]
        (work / name).write_bytes((tree / sub.config).read_bytes())
        script = f"cd {work} && source ./{name} >/dev/null 2>&1; env -0"
        out = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", script], capture_output=True).stdout
        defaults: dict[str, str] = {}
        for yaml in sorted(work.glob("conf/**/*.yaml")):
            for key, value in re.findall(r"oc\.env:(\w+),([^}${]+)\}", yaml.read_text(encoding="utf-8")):
                defaults.setdefault(key, value.strip().strip('"'))
    pairs = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    return {k: v for k, v in (defaults | pairs).items() if k in MOE_ENV}


def step_windows(path: Path = V6_STEPS) -> dict[str, list[tuple[int, float]]]:
    """result-file path -> the (samples_count, train_step_time) pairs entered from its window."""
    windows: dict[str, list[tuple[int, float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _offset, _chars, *pairs = line.split()
            windows[name] = [(int(s), float(v)) for s, v in (pair.split(":") for pair in pairs)]
    return windows


def _flag(env: dict[str, str], key: str) -> bool:
    return env.get(key, "False").strip("'\"") in ("True", "true", "1")


def moe_row(tree: Path, sub: MoESubmission, windows: dict[str, list[tuple[int, float]]]) -> dict:
    env = tree_env(tree, sub)
    model = MOE_MODELS[sub.benchmark]
    tp, pp, cp = int(env["TENSOR_MODEL_PARALLEL"]), int(env["PIPELINE_MODEL_PARALLEL"]), int(env["CONTEXT_PARALLEL"])
    ep, etp = int(env["EXPERT_PARALLEL"]), int(env.get("EXPERT_TENSOR_PARALLEL", "1"))
    if sub.benchmark == "gpt_oss_20b":
        etp = 1  # pretrain.py sets expert_tensor_parallel_size=1 whatever the yaml says
    if int(env["DGXNNODES"]) != sub.nodes:
        raise SystemExit(f"{sub.system}: config DGXNNODES {env['DGXNNODES']} != systems JSON {sub.nodes} nodes")
    gpus = sub.nodes * int(env["DGXNGPU"])
    dp, mbs = gpus // (tp * pp * cp), int(env["MICRO_BATCH_SIZE"])
    gbs = int(env["MINIBS"]) * dp  # the yaml's global_batch_size: MINIBS x devices x nodes / (tp x pp x cp)
    seq = int(env.get("SEQ_LENGTH") or env["ENCODER_SEQ_LENGTH"])
    if sub.logged and sub.logged != (gbs, gbs // (dp * mbs), seq):
        raise SystemExit(
            f"{sub.system} {sub.benchmark}: log header {sub.logged} != config {(gbs, gbs // (dp * mbs), seq)}"
        )
    files = sorted(n for n in windows if n.startswith(f"NVIDIA/results/{sub.system}/{sub.benchmark}/"))
    every = int(env.get("LOG_EVERY_N_STEPS", "1"))
    medians = []
    for name in files:
        samples = [s for s, _ in windows[name]]
        strides = {b - a for a, b in itertools.pairwise(samples)}
        if strides != {gbs * every}:
            raise SystemExit(f"{name}: samples_count strides {strides} != global batch {gbs} x {every}")
        medians.append(statistics.median(v for _, v in windows[name]))
    if not medians:
        raise SystemExit(f"{sub.system} {sub.benchmark}: no step windows in {V6_STEPS.name}")
    step = statistics.median(medians)
    fp8 = _flag(env, "FP8") and ("mxfp8" in sub.config or env.get("FP8_RECIPE") == "mxfp8")
    if not fp8 or _flag(env, "FP4"):
        raise SystemExit(f"{sub.system}: not an MXFP8 config; enter its recipe by hand")
    recompute = env.get("RECOMPUTE_MODULES", "").strip("'\"")
    recompute = "" if recompute in ("", "null", "None") else "+".join(recompute.split(","))
    layout = env.get("PIPELINE_LAYOUT", "null")
    vpp = env.get("INTERLEAVED_PIPELINE", "null")
    graph = env.get("CUDA_GRAPH_SCOPE", "").strip("'\"")
    site = sub.system.split("_")[0]
    ident = f"mlperf60-{sub.gpu.lower()}-{model['short']}-mxfp8-{gpus}g-{site}"
    flags = ", ".join(f"{k}={env[k]}" for k in MOE_ENV[8:] if k in env)
    per_file = ", ".join(f"{m:.4g}" for m in medians)
    return {
        "id": ident,
        "source": V6_SOURCE,
        "half": "",
        "model": model["family"],
        "model_config": model["model"],
        "system": f"DGX-{sub.gpu}",
        "gpus": gpus,
        "nodes": sub.nodes,
        "gpus_per_node": int(env["DGXNGPU"]),
        "precision": "MXFP8",
        "global_batch": gbs,
        "mbs": mbs,
        "seq_len": seq,
        "fsdp": int(_flag(env, "USE_MCORE_FSDP")),
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "vp": 1 if vpp in ("null", "", "None") else int(vpp),
        "ep": ep,
        "etp": etp,
        "sp": int(tp > 1 and env.get("SEQ_PARALLEL", "True") not in ("False", "0")),
        "pp_layout": "" if layout in ("null", "") else layout.strip("'\""),
        "dispatcher": "flex" if env.get("MOE_TOKEN_DISPATCHER_TYPE") == "flex" else "alltoall",
        "moe_overlap": "1f1b-a2a" if _flag(env, "OVERLAP_MOE_EXPERT_PARALLEL_COMM") else "none",
        "recompute_modules": recompute,
        "cuda_graph": int(graph == "full_iteration"),
        "bias_dropout_fusion": model["fusions"][0],
        "cross_entropy_loss_fusion": model["fusions"][1],
        "step_s": f"{step:.4g}",
        "step_how": f"median over {len(files)} result files of each file's window median ({per_file}); "
        f"{sum(len(windows[n]) for n in files)} logged train_step_time values",
        "reference": (
            f"mlcommons/training_results_v6.0 as the index copy {V6_REPO} at commit {V6_COMMIT}: NVIDIA/results/"
            f"{sub.system}/{sub.benchmark}/result_*.txt ({len(files)} files read, windows in "
            f"bench/published/{V6_STEPS.name}), launch config {sub.config} (text read at {sub.read_at}; sourced with "
            f"the files it sources), NVIDIA/systems/{sub.system}.json"
        ),
        "network": sub.network,
        "notes": (
            f"MLPerf Training v6.0 closed division, NVIDIA, {sub.gpu} ({sub.memory}); {model['note']}; config: "
            f"{flags}; not priced by the planner: FP8 parameter gather, FP8 attention (FP8_DPA) and the MXFP8 "
            "output projection where set, paged stashing and the per-rank capacity factor (padding for the CUDA "
            "graph; dropless routing assumed), delayed wgrad compute"
        ),
    }


def moe_halves(rows: list[dict]) -> None:
    """The scorecard's rule within the source: ordered by (gpus, id) from 0, odd positions calibrate."""
    for i, row in enumerate(sorted(rows, key=lambda r: (r["gpus"], r["id"]))):
        row["half"] = "calibration" if i % 2 else "held out"


def moe_main(tree: Path, check: bool) -> int:
    windows = step_windows()
    rows = [moe_row(tree, sub, windows) for sub in MOE_SUBMISSIONS]
    moe_halves(rows)
    for row in rows:
        print(
            f"{row['id']}: {row['step_s']} s/step ({row['half']}), tp{row['tp']} pp{row['pp']} vp{row['vp']} "
            f"cp{row['cp']} ep{row['ep']} etp{row['etp']} mbs{row['mbs']} gbs{row['global_batch']} seq{row['seq_len']} "
            f"{row['dispatcher']} {row['moe_overlap']} graph={row['cuda_graph']} recompute={row['recompute_modules']}"
        )
    if check:
        return 0
    tmp = MOE_RUNS.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=MOE_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(MOE_RUNS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
