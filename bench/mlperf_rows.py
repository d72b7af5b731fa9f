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
"""

from __future__ import annotations

import argparse
import csv
import hashlib
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
}
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
    pairs = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    wanted = (*ENV_KEYS, *LORA_ENV)
    merged = {k: defaults[k] for k in wanted if k in defaults} | {k: v for k, v in pairs.items() if k in wanted}
    return {LORA_ENV.get(k, k): v for k, v in merged.items()}


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
    """The finetune column: empty for full training, else lora:<rank>:<targets> as the config sets the rank."""
    if "finetune" not in model:
        return ""
    kind, rank, targets = model["finetune"].split(":")
    return f"{kind}:{env.get('LORA_DIM', rank)}:{targets}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=Path, default=MIRRORS)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--check", action="store_true", help="print the rows, write nothing")
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
