"""Scheduler actions of `check` (and the rules every action shares: commbench/diagnose/scheduler.py)
against a stand-in Slurm: `sinfo` and `scontrol` scripts on PATH that read and write a JSON file of
nodes and log every call, so a test sees each scontrol write there is. The same rules on the real
Slurm of the emulated cluster: tests/test_slurm_health.py.

The runs graded are the shipped examples: example-cpu-2rank (host "vm") fails against the dgx-h100
preset, example-nccl-tests-h100-synthetic (host "dgx-h100-017") passes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from commbench.data.store import read_actions
from commbench.diagnose import scheduler

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "results" / "examples"
FAILING = EXAMPLES / "example-cpu-2rank"
PASSING = EXAMPLES / "example-nccl-tests-h100-synthetic"

SINFO = """#!/usr/bin/env python3
import json, os, sys
nodes = json.load(open(os.environ["FAKE_SLURM_NODES"]))
open(os.environ["FAKE_SLURM_LOG"], "a").write(json.dumps(["sinfo", *sys.argv[1:]]) + "\\n")
for name, node in nodes.items():
    for partition in node["partitions"]:
        print(f"{name}|{node['state']}|{partition}|{node['reason'] or 'none'}")
"""
SCONTROL = """#!/usr/bin/env python3
import json, os, sys
path = os.environ["FAKE_SLURM_NODES"]
nodes = json.load(open(path))
open(os.environ["FAKE_SLURM_LOG"], "a").write(json.dumps(["scontrol", *sys.argv[1:]]) + "\\n")
words = dict(arg.split("=", 1) for arg in sys.argv[2:] if "=" in arg)
node = nodes.get(words.get("NodeName"))
if sys.argv[1] != "update" or node is None:
    sys.exit("scontrol: error: Invalid node name specified")
if words.get("State") == "DRAIN":
    node["state"], node["reason"] = "drained", words["Reason"]
elif words.get("State") == "RESUME":
    node["state"], node["reason"] = "idle", ""
json.dump(nodes, open(path, "w"))
"""


def fake_slurm(tmp_path: Path, nodes: dict[str, dict]) -> dict[str, str]:
    """A bin directory with the stand-in sinfo/scontrol first on PATH; the environment to run in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("sinfo", SINFO), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for node in nodes.values():
        node.setdefault("partitions", ["debug"])
        node.setdefault("reason", "")
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "FAKE_SLURM_NODES": str(tmp_path / "nodes.json"),
        "FAKE_SLURM_LOG": str(tmp_path / "calls.jsonl"),
        "COMMBENCH_DB": str(tmp_path / "store.duckdb"),
    }


def writes(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [call for call in calls if call[:2] == ["scontrol", "update"]]


def nodes_now(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "nodes.json").read_text())


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "commbench", *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )


def fleet(n: int, **overrides) -> dict[str, dict]:
    nodes = {f"c{i}": {"state": "allocated"} for i in range(n)}
    nodes.update(overrides)
    return nodes


def test_no_scontrol_write_without_drain_and_drain_writes_the_commbench_reason(tmp_path):
    env = fake_slurm(tmp_path, fleet(10, vm={"state": "allocated"}))
    planned = cli(env, "check", str(FAILING), "--expect", "dgx-h100", "--slurm-plan")
    assert planned.returncode == 1  # the run fails; nothing was refused
    assert "# slurm dry run: scontrol update NodeName=vm State=DRAIN 'Reason=commbench: check: " in planned.stdout
    assert writes(tmp_path) == [] and nodes_now(tmp_path)["vm"]["state"] == "allocated"
    assert cli(env, "check", str(FAILING), "--expect", "dgx-h100").returncode == 1
    assert writes(tmp_path) == []

    drained = cli(env, "check", str(FAILING), "--expect", "dgx-h100", "--drain")
    assert drained.returncode == 1, drained.stdout + drained.stderr
    assert [call[2:4] for call in writes(tmp_path)] == [["NodeName=vm", "State=DRAIN"]]
    node = nodes_now(tmp_path)["vm"]
    assert node["state"] == "drained" and node["reason"].startswith("commbench: check: example-cpu-2rank failed ")
    (row,) = read_actions(env["COMMBENCH_DB"])
    assert (row["node"], row["verb"], row["evidence_run"], row["result"], row["source"]) == (
        "vm",
        "drain",
        "example-cpu-2rank",
        "done",
        "check",
    )
    assert row["command"].startswith("scontrol update NodeName=vm State=DRAIN")


def test_resume_undoes_only_commbench_drains_never_an_admins(tmp_path):
    env = fake_slurm(tmp_path, fleet(3, **{"dgx-h100-017": {"state": "drained", "reason": "commbench: check: slow"}}))
    resumed = cli(env, "check", str(PASSING), "--expect", "dgx-h100", "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert writes(tmp_path) == [["scontrol", "update", "NodeName=dgx-h100-017", "State=RESUME"]]
    assert nodes_now(tmp_path)["dgx-h100-017"]["state"] == "idle"

    env = fake_slurm(
        tmp_path / "admin", fleet(3, **{"dgx-h100-017": {"state": "drained", "reason": "bad DIMM, ticket 4411"}})
    )
    kept = cli(env, "check", str(PASSING), "--expect", "dgx-h100", "--resume")
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert writes(tmp_path / "admin") == []
    assert nodes_now(tmp_path / "admin")["dgx-h100-017"] == {
        "state": "drained",
        "reason": "bad DIMM, ticket 4411",
        "partitions": ["debug"],
    }
    assert "left alone: dgx-h100-017: drained by someone else (bad DIMM, ticket 4411): not resumed" in kept.stdout


def test_the_cap_refuses_three_of_four_and_drains_nothing():
    nodes = scheduler.parse_sinfo("".join(f"n{i}|allocated|debug*|none\n" for i in range(4)))
    plan = scheduler.plan_drain({"n0": "slow", "n1": "slow", "n2": "slow"}, nodes)
    assert plan.refusal and "over the cap --max-drain 10% (at most 1 node)" in plan.refusal
    assert "3 of the 4 nodes of partition debug" in plan.refusal
    scheduler.carry_out(plan, act=True)  # nothing planned is left to run: every action carries the refusal
    assert all(action.result == plan.refusal for action in plan.actions) and scheduler.failed(plan)
    one = scheduler.plan_drain({"n2": "slow"}, nodes)  # one node of a small partition may always go
    assert one.refusal is None and [a.node for a in one.actions] == ["n2"]
    assert scheduler.plan_drain({"n0": "x", "n1": "x"}, nodes, cap=0.5).refusal is None
    assert scheduler.plan_drain({"n0": "x"}, nodes, cap=0.0).refusal  # 0%: nothing may be drained


def test_the_last_idle_node_is_kept_unless_asked():
    nodes = scheduler.parse_sinfo("a|idle|p|none\nb|allocated|p|none\nc|drained|p|commbench: x\n")
    kept = scheduler.plan_drain({"a": "slow"}, nodes, cap=1.0)
    assert kept.actions[0].result.startswith("refused: a is one of the last 1 idle node(s) of partition p")
    assert scheduler.plan_drain({"a": "slow"}, nodes, cap=1.0, keep_idle=0).actions[0].result == "planned"
    assert scheduler.plan_drain({"c": "slow"}, nodes, cap=1.0).actions == []  # already drained: left as it is


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    env = fake_slurm(tmp_path, fleet(4))
    for args in (
        ["--drain", "--max-drain", "150%"],
        ["--drain", "--max-drain", "-5%"],
        ["--drain", "--keep-idle", "-1"],
    ):
        bad = cli(env, "check", str(FAILING), "--expect", "dgx-h100", *args)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, (args, bad.stderr)
    unknown = cli(env, "check", str(FAILING), "--expect", "dgx-h100", "--drain")  # host "vm" is not in this fleet
    assert unknown.returncode == 2 and unknown.stderr.strip().splitlines() == [
        "commbench check: error: vm: Slurm knows no such node (sinfo -N lists 4 nodes)"
    ]
    no_slurm = {**env, "PATH": "/nonexistent"}
    gone = subprocess.run(
        [sys.executable, "-m", "commbench", "check", str(FAILING), "--expect", "dgx-h100", "--drain"],
        capture_output=True,
        text=True,
        env=no_slurm,
        timeout=120,
        check=False,
    )
    assert gone.returncode == 2 and len(gone.stderr.strip().splitlines()) == 1
    assert "sinfo and scontrol not found on PATH" in gone.stderr
    assert writes(tmp_path) == []


def test_health_bad_input_is_one_line_and_exit_2(tmp_path):
    env = fake_slurm(tmp_path, fleet(2))
    cases = [
        (
            {**env, "PATH": "/nonexistent"},
            ["--nic-rate", "1gbit", "--nic-peer", "127.0.0.2", "--slurm"],
            "sinfo and scontrol not found on PATH",
        ),
        (env, ["--checks", "nic", "--nic-rate", "1gbit"], "--checks nic needs --nic-peer ADDR"),
        (env, ["--nic-rate", "fast", "--nic-peer", "127.0.0.2"], "bad rate 'fast'"),
        (env, ["--checks", "disk", "--baseline", "x.json"], "choose from intra, nic"),
        (env, [], "give what to grade against"),
        (env, ["--slurm", "--nic-rate", "1gbit", "--max-drain", "101%"], "between 0% and 100%"),
    ]
    for run_env, args, message in cases:
        bad = subprocess.run(
            [sys.executable, "-m", "commbench", "health", *args],
            capture_output=True,
            text=True,
            env=run_env,
            timeout=120,
            check=False,
        )
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and message in bad.stderr, (
            args,
            bad.stderr,
        )
    assert writes(tmp_path) == []


def test_health_fails_a_nic_only_when_the_nic_was_the_limit():
    """A NIC figure the host could not push harder is a lower bound: low, it is inconclusive, never a failure."""
    from commbench.commands.health import _grade
    from commbench.measure.health import Figure

    line_rate = (1.0, "line rate --nic-rate 1 Gbit/s")
    shaped = _grade(Figure("nic eth0 egress", 0.30, "Gbit/s", bound="link"), line_rate, 0.5)
    busy = _grade(Figure("nic eth0 egress", 0.22, "Gbit/s", bound="sender"), line_rate, 0.5)
    full = _grade(Figure("nic eth0 egress", 0.95, "Gbit/s", bound="link"), line_rate, 0.5)
    assert (shaped["status"], busy["status"], full["status"]) == ("FAIL", "inconclusive", "pass")
    assert shaped["line"] == (
        "FAIL nic eth0 egress: 0.3 Gbit/s, 30% of the expected 1 (limit 50%; line rate --nic-rate 1 Gbit/s)"
    )
    assert _grade(Figure("intra gloo loopback", None, "GB/s", note="timed out"), None, 0.3)["status"] == "FAIL"


def test_health_expects_every_gpu_pair_of_a_preset_at_its_nvlink_rate():
    from commbench.commands.health import _preset
    from commbench.modeling.hardware import load_system

    system = load_system("dgx-h100")
    expected = _preset("dgx-h100")
    assert len(expected) == system.gpus_per_host * (system.gpus_per_host - 1)
    rate, source = expected["intra gpu0->gpu7"]
    assert rate == system.intra.bandwidth * system.intra.efficiency / 1e9 and source.startswith("preset ")


def test_an_older_store_gains_the_actions_table_in_place(tmp_path):
    import duckdb

    from commbench.data.store import STORE_SCHEMA_VERSION, ingest, query, record_actions

    db = tmp_path / "old.duckdb"
    ingest(db, [FAILING])
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE actions")
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.close()
    assert read_actions(db) == []  # a reader of the older file sees no actions, and no error
    record_actions(
        db,
        [
            {
                "when": "2026-12-01T10:00:00Z",
                "node": "vm",
                "verb": "drain",
                "verdict": "check: slow",
                "evidence_run": "example-cpu-2rank",
                "command": "scontrol update NodeName=vm State=DRAIN",
                "result": "done",
                "source": "check",
            }
        ],
    )
    assert [(row["node"], str(row["when"])) for row in read_actions(db)] == [("vm", "2026-12-01 10:00:00")]
    assert query(db, "SELECT value FROM meta WHERE key = 'schema_version'")[1] == [(str(STORE_SCHEMA_VERSION),)]
    assert query(db, "SELECT run_id FROM runs")[1] == [("example-cpu-2rank",)]  # the runs stay


def test_health_names_each_gpu_pairs_path_from_nvml(monkeypatch):
    from commbench.measure import health
    from commbench.topology import nvml
    from commbench.topology.model import Gpu, NvLink

    gpus = [
        Gpu(
            index=i,
            pci_bus_id=f"0000:0{i}:00.0",
            nvlinks=[
                NvLink(
                    link=0,
                    active=True,
                    remote_pci_bus_id="0000:01:00.0" if i == 0 else "0000:00:00.0",
                    remote_type="GPU",
                )
            ]
            if i < 2
            else [],
        )
        for i in range(3)
    ]
    view = nvml.NvmlView(
        gpus=gpus, pcie_words={("0000:00:00.0", "0000:02:00.0"): "SYS", ("0000:02:00.0", "0000:00:00.0"): "SYS"}
    )
    monkeypatch.setattr(nvml, "read_gpus", lambda: view)
    paths = health.pair_paths()
    assert (paths[(0, 1)], paths[(1, 0)], paths[(0, 2)], paths[(1, 2)]) == ("NV1", "NV1", "SYS", "PCIe (level unknown)")
