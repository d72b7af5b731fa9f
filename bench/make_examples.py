"""Re-create every measured example run under results/examples/ from its command.

Each example is declared once, in EXAMPLES: its name, the `commbench` command that measures (or
imports) it, and where that runs: on this machine, or on an emulated cluster of network namespaces
(tests/cluster/emulated.py; needs root), one torchrun per node. The run goes to a scratch folder
first and replaces results/examples/<name> only once it succeeded; the command is then written into
run.json's `note`. tests/test_examples.py checks that every run directory under results/examples/
is either declared here (with that note) or marked `"synthetic": true`.

Re-running measures again, so the figures move with the machine's load; what they show does not.

    sudo python bench/make_examples.py                      # all (minutes; root for the cluster ones)
    python bench/make_examples.py example-cpu-2rank         # one or more by name
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

# at the top, so that tests/test_examples.py (which imports this script) notices when they move
from commbench.traces.analysis import analyse_traces
from commbench.traces.store import save_trace_analysis

REPO = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = REPO / "results" / "examples"
TORCHRUN_PORT = 29631


@dataclass(frozen=True)
class Cluster:
    """An emulated cluster: `shape` is EmulatedCluster's keyword arguments, `degrade` one node's change."""

    shape: dict
    ranks_per_node: int
    degrade: dict = field(default_factory=dict)  # {"node": index, and EmulatedCluster.shape() arguments}

    def describe(self) -> str:
        degraded = (
            f", then node index {self.degrade['node']} shaped with "
            + ", ".join(f"{key}={value}" for key, value in self.degrade.items() if key != "node")
            if self.degrade
            else ""
        )
        shape = ", ".join(f"{key}={value}" for key, value in self.shape.items())
        return (
            f"emulated cluster ({shape}{degraded}), one torchrun per node with --nproc-per-node {self.ranks_per_node}"
        )


@dataclass(frozen=True)
class Example:
    name: str
    command: tuple[str, ...]  # commbench's arguments; --run-id, --out and --no-progress are added
    cluster: Cluster | None = None

    def note(self) -> str:
        """What run.json's `note` says: the test compares it with this declaration."""
        where = f"on an {self.cluster.describe()}" if self.cluster else "on this machine"
        if self.command[0] == "import":
            where = "a published log; its source and licence: results/examples/SOURCES.md"
        kept = "; the analysis of DIR/rank0.json and rank1.json kept as this run" if self.command[0] == "trace" else ""
        return f"re-created by bench/make_examples.py {self.name}: commbench {' '.join(self.command)} ({where}){kept}"


NODE_NAMES_2 = ["node1", "node2"]
NODE_NAMES_3 = ["node1", "node2", "node3"]

EXAMPLES = [
    Example("example-cpu-2rank", ("run", "--nproc", "2", "-b", "1K", "-e", "4M")),
    Example("example-overlap-cpu", ("overlap", "--nproc", "2", "-b", "64K", "-e", "4M", "--gemm-size", "384")),
    Example("example-trace-ddp", ("trace", "--demo", "DIR")),
    # real GPU output published by others (MIT-0 licensed), imported: 2 nodes x 8 A100 over EFA
    Example(
        "example-nccl-tests-a100-2nodes-aws",
        ("import", "nccl-tests", "tests/fixtures/nccl_tests/real/aws_eks_a100_2nodes_mpirun_info_2.9.9.log"),
    ),
    Example(
        "example-emulated-2x2-1gbit",
        ("run", "-b", "1K", "-e", "16M"),
        Cluster({"nodes": 2, "rate": "1gbit", "names": NODE_NAMES_2}, ranks_per_node=2),
    ),
    Example(
        "example-pairwise-3nodes-slow-node3",
        ("run", "--pairwise", "-b", "8", "-e", "4M"),
        Cluster(
            {"nodes": 3, "rate": "1gbit", "per_node_rate": {2: "200mbit"}, "names": NODE_NAMES_3}, ranks_per_node=1
        ),
    ),
    Example(
        "example-pairwise-3nodes-lossy-node3",
        ("run", "--pairwise", "-b", "8", "-e", "4M", "--time-budget-ms", "20"),
        Cluster(
            {"nodes": 3, "rate": "1gbit", "names": NODE_NAMES_3}, ranks_per_node=1, degrade={"node": 2, "loss": "3%"}
        ),
    ),
]


def _commbench(example: Example, scratch: Path) -> list[str]:
    return [sys.executable, "-m", "commbench", *example.command, "--run-id", example.name, "--out", str(scratch)]


def make_local(example: Example, scratch: Path) -> Path:
    extra = ["--no-progress"] if example.command[0] == "run" else []
    subprocess.run([*_commbench(example, scratch), *extra], cwd=REPO, check=True)
    return scratch / example.name


def make_trace(example: Example, scratch: Path) -> Path:
    """`commbench trace --demo DIR` writes and analyses two ranks' traces; the analysis is kept as a run."""
    demo = scratch / "demo"
    subprocess.run([sys.executable, "-m", "commbench", "trace", "--demo", str(demo)], cwd=REPO, check=True)
    traces = [demo / "rank0.json", demo / "rank1.json"]
    return save_trace_analysis(analyse_traces([str(path) for path in traces]), scratch, traces, run_id=example.name)


def make_on_cluster(example: Example, scratch: Path) -> Path:
    sys.path.insert(0, str(REPO / "tests"))
    from cluster.emulated import EmulatedCluster, torchrun_command, wait_procs

    spec = example.cluster
    with EmulatedCluster(**spec.shape) as cluster:
        if spec.degrade:
            cluster.shape(spec.degrade["node"], **{k: v for k, v in spec.degrade.items() if k != "node"})
        procs = []
        for i in range(len(cluster.nodes)):
            program = [
                "-m",
                "commbench",
                *example.command,
                "--run-id",
                example.name,
                "--out",
                str(scratch),
                "--no-progress",
            ]
            torchrun = torchrun_command(cluster, i, TORCHRUN_PORT, program, nproc_per_node=spec.ranks_per_node)
            procs.append(
                cluster.node(i).popen(
                    torchrun,
                    env={"GLOO_SOCKET_IFNAME": "eth0"},
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        results = wait_procs(procs, timeout=1800)
    for code, out, err in results:
        if code != 0:
            raise SystemExit(f"{example.name}: a node exited {code}:\n{out[-2000:]}\n{err[-3000:]}")
    print(results[0][1])
    return scratch / example.name


def make(example: Example) -> None:
    with tempfile.TemporaryDirectory(prefix="commbench-example-") as tmp:
        scratch = Path(tmp)
        scratch.chmod(0o755)  # the cluster's ranks run as root too, but keep it readable like results/
        if example.cluster:
            made = make_on_cluster(example, scratch)
        elif example.command[0] == "trace":
            made = make_trace(example, scratch)
        else:
            made = make_local(example, scratch)
        run_file = made / "run.json"
        info = json.loads(run_file.read_text())
        info.update(synthetic=False, note=example.note())
        run_file.write_text(json.dumps(info, indent=2) + "\n")
        target = EXAMPLES_DIR / example.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(made, target)
    print(f"{target.relative_to(REPO)}: {example.note()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="examples to make (default: all)")
    args = parser.parse_args(argv)
    known = {example.name: example for example in EXAMPLES}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown example(s) {', '.join(unknown)}; known: {', '.join(known)}")
    for name in args.names or list(known):
        make(known[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
