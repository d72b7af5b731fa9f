"""The planner's rankings make sense, with preset and with measured bandwidth tables."""

import argparse
import json
import re

import pytest

from commbench.commands import plan as plan_command
from commbench.errors import UsageError
from commbench.modeling.cluster import Cluster
from commbench.modeling.hardware import load_network, load_system
from commbench.modeling.job import TrainingJob
from commbench.modeling.layout import Layout, parse_layout
from commbench.modeling.measured import MeasuredNetwork
from commbench.modeling.models import PRESETS
from commbench.modeling.network import PresetNetwork, busbw_factor
from commbench.modeling.planner import Planner

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")


def planner(model, gpus, global_batch, seq, inter=None, cost=None, system="dgx-h100"):
    sysm = load_system(system)
    if inter:
        sysm = sysm.with_inter(load_network(inter))
    return Planner(TrainingJob(PRESETS[model], seq, global_batch), Cluster(gpus, sysm, cost or PresetNetwork(sysm)))


def write_run(path, intra_gbps, inter_gbps, nodes=8, gpus_per_node=8, latency_us=(8.0, 20.0)):
    """A synthetic run directory with the schema's fields: intra groups of 8, inter groups of 2..nodes."""
    path.mkdir(parents=True)
    info = {
        "schema_version": 1,
        "run_id": path.name,
        "created": "2025-01-01T00:00:00+00:00",
        "backend": "nccl",
        "world_size": nodes * gpus_per_node,
        "complete": True,
        "nodes": [
            {
                "hostname": f"n{i}",
                "node_id": i,
                "ranks": list(range(i * gpus_per_node, (i + 1) * gpus_per_node)),
                "local_ranks": list(range(gpus_per_node)),
            }
            for i in range(nodes)
        ],
    }
    (path / "run.json").write_text(json.dumps(info))
    lines = []
    groups = [("intra", gpus_per_node, intra_gbps, latency_us[0])]
    groups += [("inter", n, inter_gbps, latency_us[1]) for n in (2, 4, nodes)]
    for scope, n, busbw, lat in groups:
        for op in OPS:
            for size in (2**k for k in range(10, 31, 2)):
                factor = busbw_factor(op, n)
                time_us = lat + size * factor / (busbw * 1e9) * 1e6
                lines.append(
                    json.dumps(
                        {
                            "op": op,
                            "scope": scope,
                            "group_size": n,
                            "n_groups": 1,
                            "size_bytes": size,
                            "count": size // 2,
                            "dtype": "bfloat16",
                            "in_place": False,
                            "iters": 20,
                            "time_us": time_us,
                            "time_us_p10": time_us,
                            "time_us_p90": time_us,
                            "time_us_min": time_us,
                            "time_us_max": time_us,
                            "cv": 0.01,
                            "algbw_gbps": size / time_us / 1e3,
                            "busbw_gbps": size / time_us / 1e3 * factor,
                            "busbw_factor": factor,
                        }
                    )
                )
    (path / "records.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_1b_on_8_gpus_ranks_plain_data_parallel_first():
    best = planner("llama3.2-1b", 8, 256, 2048).rank(3).ranked[0].layout
    assert (best.dp, best.tp, best.pp, best.cp) == (8, 1, 1, 1)
    assert best.zero <= 1  # the seeds' first step: it fits, so DDP (or ZeRO-1, see test_modeling_decision_path)


def test_7b_on_8_h100_never_ranks_unsharded_ddp():
    p = planner("llama2-7b", 8, 64, 4096)
    plan = p.rank(10)
    assert all(not (r.layout.dp == 8 and r.layout.zero == 0) for r in plan.ranked)
    result, reason = p.evaluate_layout(parse_layout("dp=8,zero=0", 8))
    assert reason is not None and "optimizer" in reason
    assert result.memory["total"] > 80e9


def test_70b_on_64_h100_keeps_tensor_parallel_inside_a_node():
    plan = planner("llama3-70b", 64, 256, 4096).rank(5)
    assert all(r.layout.tp <= 8 for r in plan.ranked)
    assert plan.fitting < plan.screened  # some layouts were dropped for memory


def test_slow_inter_node_table_keeps_tp_inside_and_faster_table_moves_ranking(tmp_path):
    fallback = PresetNetwork(load_system("dgx-h100"))
    slow = MeasuredNetwork(write_run(tmp_path / "slow", intra_gbps=360, inter_gbps=1.0), fallback)
    fast = MeasuredNetwork(write_run(tmp_path / "fast", intra_gbps=360, inter_gbps=45), fallback)
    slow_planner = planner("llama3-70b", 64, 256, 4096, cost=slow)
    slow_plan = slow_planner.rank(5)
    fast_plan = planner("llama3-70b", 64, 256, 4096, cost=fast).rank(5)
    assert all(r.layout.tp <= 8 for r in slow_plan.ranked)
    slow_best, fast_best = slow_plan.ranked[0], fast_plan.ranked[0]
    assert fast_best.tokens_per_s > slow_best.tokens_per_s
    # the slow fabric favours pipelining across nodes over data parallelism across them...
    assert slow_best.layout.pp >= fast_best.layout.pp and slow_best.layout.dp <= fast_best.layout.dp
    # ...and the fast fabric's winner loses its place on the slow one
    fast_winner_on_slow, _ = slow_planner.evaluate_layout(fast_best.layout)
    assert fast_winner_on_slow.tokens_per_s < slow_best.tokens_per_s
    assert slow.warnings == [] and fast.warnings == [], slow.warnings + fast.warnings


def test_faster_preset_fabric_helps_data_parallel_heavy_layouts():
    layout = parse_layout("dp=64,zero=3,recompute=full", 64)
    eth, _ = planner("llama3-70b", 64, 256, 4096, inter="eth-25g").evaluate_layout(layout)
    ndr, _ = planner("llama3-70b", 64, 256, 4096, inter="ib-ndr").evaluate_layout(layout)
    assert ndr.tokens_per_s > 3 * eth.tokens_per_s
    assert eth.categories["dp"] > ndr.categories["dp"]


def test_model_too_big_for_the_cluster_says_why():
    with pytest.raises(UsageError, match=r"does not fit on 8 GPUs.*needs .* GB > 80 GB.*at least \d+ GPUs"):
        planner("llama3.1-405b", 8, 64, 4096).rank(3)


def plan_args(*argv: str) -> argparse.Namespace:
    """`commbench plan ARGV --json` as the command line parses it."""
    parser = argparse.ArgumentParser()
    plan_command.add_arguments(parser)
    return parser.parse_args([*argv, "--json"])


def test_plan_command_exit_codes_and_json(capsys, tmp_path):
    args = plan_args("--model", "llama2-7b", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096", "--top", "3")
    assert plan_command.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["ranked"]) == 3 and out["layouts_per_second"] > 0
    args.layout, args.timeline = "tp=2,dp=4,zero=1,recompute=selective", str(tmp_path / "timeline.json")
    assert plan_command.main(args) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["fits"] and one["layout"].startswith("tp=2")
    events = json.loads((tmp_path / "timeline.json").read_text())
    assert events and set(events[0]) == {"stream", "start_us", "dur_us", "name", "category"}
    args.layout, args.timeline = "dp=8", None
    assert plan_command.main(args) == 1  # does not fit
    capsys.readouterr()
    args.model = "llama3.1-405b"
    args.layout = None
    with pytest.raises(UsageError):
        plan_command.main(args)


def test_plan_reads_a_measured_run_directory(tmp_path, capsys):
    run = write_run(tmp_path / "run", intra_gbps=300, inter_gbps=40)
    args = plan_args(
        "--model",
        "llama3-8b",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--bandwidth",
        str(run),
        "--global-batch",
        "64",
        "--seq-len",
        "4096",
        "--slowdown",
        "0.1",
        "--top",
        "3",
    )
    assert plan_command.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["network"].startswith("measured")
    assert out["ranked"][0]["tokens_per_s"] > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ("tp=8,pp=4,dp=2,mbs=1,zero=5", "zero"),
        ("tp=3", "divide"),
        ("tp=8,bogus=1", "bad layout item"),
        ("tp=2,dp=8", "uses 16 GPUs"),
        ("vpp=2", "vpp > 1 needs pp > 1"),
    ],
)
def test_bad_layout_strings_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        parse_layout(text, 8)


def test_layout_string_round_trips():
    layout = parse_layout("tp=8,pp=4,dp=2,mbs=1,zero=1,recompute=selective", 64)
    assert layout == Layout(dp=2, tp=8, pp=4, zero=1, recompute="selective")
    assert parse_layout(str(layout), 64) == layout


@pytest.mark.parametrize(
    "model, gpus, seq, text, refusal",
    [
        # 12 divides mixtral-8x22b's 48 heads but neither divides its 8 KV heads nor is a multiple of them
        ("mixtral-8x22b", 24, 4096, "tp=12,dp=2", "KV heads"),
        # the load-balanced ring cuts the sequence into 2*cp chunks: 4097 tokens do not split into 4
        ("llama3-8b", 8, 4097, "cp=2,dp=4", "2*cp"),
    ],
)
def test_evaluate_layout_refuses_what_the_search_refuses(model, gpus, seq, text, refusal):
    p = planner(model, gpus, 64, seq)
    layout = parse_layout(text, gpus)
    assert p._shape(layout.tp, layout.pp, layout.cp, 1) == []  # the search never produces it
    with pytest.raises(UsageError, match=re.escape(refusal)):
        p.evaluate_layout(layout)
