"""The published-runs data file (bench/published/runs.csv) keeps its shape, its units and, above
all, the exact source of every row: a figure whose origin is lost is not a published figure."""

from __future__ import annotations

import csv
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from commbench.modeling.recipes import RECIPES

RUNS = Path(__file__).resolve().parents[1] / "bench" / "published" / "runs.csv"

REQUIRED = (
    "id",
    "source",
    "reference",
    "published_params_b",
    "gpu",
    "gpu_memory_gb",
    "gpus_per_node",
    "nodes",
    "gpus",
    "network",
    "model",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "mlp",
    "tied_embeddings",
    "seq_len",
    "global_batch",
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "vpp",
    "mbs",
    "recompute",
    "sp",
    "zero",
    "framework",
    "execution",
    "precision",
    "metric",
    "value",
    "flops_convention",
    "assumed",
    "notes",
)
WHOLE_NUMBERS = (
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
)
METRICS = {  # published figure -> plausible range in its unit
    "iteration_s": (0.01, 10_000.0),  # seconds per optimizer step
    "tokens_per_s": (100.0, 1e9),  # tokens per second, whole job
    "tokens_per_s_per_gpu": (1.0, 1e6),  # tokens per second per GPU
    "tflops_per_gpu": (1.0, 2_000.0),  # achieved TFLOP/s per GPU
}
GPUS = ("A100", "H100", "H200", "B200", "GB200", "GB300")  # one hardware preset each (bench/scorecard.py HARDWARE)
FLOPS_CONVENTIONS = {"narayanan2021-recompute", "narayanan2021-model", "megatron2024", "palm"}
# a source names where the figure is: a commit, a paper with its table or figure, or a URL
LOCATOR = re.compile(r"commit [0-9a-f]{40}|Table \d+|Figure \d+|https?://\S+")


def read_rows(path: Path = RUNS) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def problems(rows: list[dict]) -> list[str]:
    """Every way the rows break the file's contract, one line each (empty: the file is sound)."""
    found = []
    if not rows:
        return ["no rows"]
    missing = [c for c in REQUIRED if c not in rows[0]]
    if missing:
        return [f"missing columns: {', '.join(missing)}"]
    ids = [r["id"] for r in rows]
    found += [f"duplicate id {i}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    for row in rows:
        found += [f"{row['id'] or '?'}: {p}" for p in row_problems(row)]
    return found


def row_problems(row: dict) -> list[str]:
    found = []
    for column in ("id", "source", "reference", "framework", "precision", "network"):
        if not row[column].strip():
            found.append(f"empty {column}")
    if row["reference"].strip() and not LOCATOR.search(row["reference"]):
        found.append(f"reference names no commit, table, figure or URL: {row['reference']!r}")
    if row["gpu"] not in GPUS:
        found.append(f"gpu must be exactly one of {', '.join(GPUS)}, not {row['gpu']!r}")
    if row["precision"] in RECIPES and RECIPES[row["precision"]].quantised and row["gpu"] == "A100":
        found.append(f"an A100 has no {row['precision']} tensor cores")
    for column in WHOLE_NUMBERS:
        if not row[column].isdigit() or int(row[column]) < 1:
            found.append(f"{column} must be a whole number >= 1, not {row[column]!r}")
    if found:
        return found
    n = {c: int(row[c]) for c in WHOLE_NUMBERS}
    if n["tp"] * n["pp"] * n["dp"] * n["cp"] != n["gpus"]:
        found.append("tp*pp*dp*cp != gpus")
    if n["global_batch"] % (n["dp"] * n["mbs"]):
        found.append("global_batch is not a multiple of dp*mbs")
    if n["nodes"] * n["gpus_per_node"] < n["gpus"]:
        found.append("nodes*gpus_per_node < gpus")
    if n["heads"] % n["kv_heads"]:
        found.append("kv_heads does not divide heads")
    for column, allowed in (
        ("mlp", {"gelu", "swiglu"}),
        ("recompute", {"none", "selective", "full"}),
        ("sp", {"0", "1"}),
        ("tied_embeddings", {"0", "1"}),
        ("zero", {"0", "1", "2", "3"}),
    ):
        if row[column] not in allowed:
            found.append(f"{column} must be one of {sorted(allowed)}, not {row[column]!r}")
    if row.get("tp_comm_overlap", "") not in ("", "on", "off"):
        found.append(f"tp_comm_overlap must be on, off or empty (the execution's), not {row['tp_comm_overlap']!r}")
    found += metric_problems(row)
    found += size_problems(row, n)
    return found


def parameters(row: dict, n: dict) -> float:
    """Weights of the row's shape: attention (q = hidden), the MLP's 2 or 3 matrices, norms, embeddings."""
    h, kv = n["hidden"], n["kv_heads"] * n["hidden"] // n["heads"]
    mlp = (3 if row["mlp"] == "swiglu" else 2) * h * n["ffn"]
    return n["layers"] * (2 * h * h + 2 * h * kv + mlp + 2 * h) + n["vocab"] * h * (2 - int(row["tied_embeddings"]))


def size_problems(row: dict, n: dict) -> list[str]:
    """The transcribed shape must give the size the source states: a cross-check of the shape columns
    (4%: sources round, and count position embeddings and biases that this sum leaves out)."""
    try:
        published = float(row["published_params_b"]) * 1e9
    except ValueError:
        return [f"published_params_b {row['published_params_b']!r} is not a number"]
    shape = parameters(row, n)
    return (
        []
        if abs(shape / published - 1) <= 0.04
        else [f"the shape gives {shape / 1e9:.2f}B parameters, the source says {published / 1e9:g}B"]
    )


def metric_problems(row: dict) -> list[str]:
    if row["metric"] not in METRICS:
        return [f"metric must be one of {sorted(METRICS)}, not {row['metric']!r}"]
    try:
        value = float(row["value"])
    except ValueError:
        return [f"value {row['value']!r} is not a number"]
    low, high = METRICS[row["metric"]]
    found = [] if low <= value <= high else [f"{row['metric']} {value} outside {low}..{high}"]
    if row["metric"] == "tflops_per_gpu" and row["flops_convention"] not in FLOPS_CONVENTIONS:
        found.append(f"a TFLOP/s figure needs a flops_convention of {sorted(FLOPS_CONVENTIONS)}")
    return found


def test_every_row_is_sound_and_sourced():
    assert problems(read_rows()) == []


def test_coverage_at_least_40_rows_4_sources_every_gpu():
    rows = read_rows()
    assert len(rows) >= 40
    assert len({r["source"] for r in rows}) >= 4
    assert {r["gpu"] for r in rows} == set(GPUS)


@pytest.mark.parametrize(
    "column, value",
    [
        ("reference", ""),
        ("reference", "some paper"),
        ("source", " "),
        ("gpu", "A100,H100"),
        ("value", "fast"),
        ("metric", "mfu_percent"),
        ("hidden", "4608"),
        ("published_params_b", ""),
        ("tp_comm_overlap", "yes"),
    ],
)
def test_a_row_that_loses_its_source_or_units_is_caught(column, value):
    """Checked on the first row of every source, so a source added later is covered too."""
    rows = read_rows()
    firsts = {}
    for index, row in enumerate(rows):
        firsts.setdefault(row["source"], index)
    for index in firsts.values():
        broken = rows.copy()
        broken[index] = {**rows[index], column: value}
        assert any(line.startswith(rows[index]["id"]) or line.startswith("?") for line in problems(broken)), rows[
            index
        ]["id"]


def committed_halves(results: Path = RUNS.parents[1] / "RESULTS-published.md") -> dict[str, str]:
    """The calibration / held-out table committed in the results file before any prediction."""
    halves = {}
    for line in results.read_text(encoding="utf-8").split("<!-- scorecard results")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and ":" in cells[1] and ":" in cells[2]:
            for half, cell in (("calibration", cells[1]), ("held-out", cells[2])):
                halves.update({i.strip(): half for i in cell.split(":", 1)[1].split(",")})
    return halves


def scorecard_module():
    spec = importlib.util.spec_from_file_location("scorecard", RUNS.parents[1] / "scorecard.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_the_scorecard_splits_rows_as_the_committed_rule_says():
    scorecard = scorecard_module()
    halves = scorecard.split_halves(scorecard.load_runs(RUNS))
    assert halves == committed_halves()
    assert sum(h == "calibration" for h in halves.values()) <= len(halves) / 2
