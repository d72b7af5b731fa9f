"""One rank's distributed state for a measuring run: the process group, the backend the ranks agree
on, the device, where every rank sits, the cluster's topology and what run.json says about them.

Control traffic (agreeing on the backend, gathering identities and topologies) runs on the gloo
world group opened here; communicators under test are created on demand by `Session.group`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from commbench import __version__
from commbench.data.cluster_name import resolve_cluster
from commbench.data.rundir import utc_now
from commbench.data.schema import NodeInfo, RunInfo
from commbench.dtypes import check_gloo_supports
from commbench.errors import UsageError
from commbench.measure.cores import usable_cores
from commbench.measure.launch import RankEnv
from commbench.measure.options import RunConfig
from commbench.measure.watchdog import RankMonitor
from commbench.topology import discover_node, merge_nodes, node_name, nvlink_domain, place_ranks

# gloo's own timeout fires this much after the watchdog's, so the watchdog can name the culprit
GLOO_TIMEOUT_MARGIN_S = 30.0


@dataclass
class Session:
    """One rank's distributed state."""

    cfg: RunConfig
    env: RankEnv
    backend: str
    device: torch.device
    nodes: list[NodeInfo]
    topology: dict | None = None
    monitor: RankMonitor | None = None
    groups: dict[tuple[int, ...], object] = field(default_factory=dict)
    buffers: dict[tuple[str, torch.dtype], torch.Tensor] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        return self.env.rank

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def op_wait(self) -> Callable[[], None] | None:
        """What a host timer calls after each op to wait for it: None where ops return complete (CPU)."""
        return self.sync if self.device.type == "cuda" else None

    def group(self, ranks: tuple[int, ...]):
        """The communicator under test for these ranks; every rank creates every group, in order.
        On gloo, all the ranks are measured on the world group itself, the one a user's own loop
        uses: a second gloo group over the same ranks brings its own threads, which sit idle
        while the world group carries the control traffic and, on a loaded host, come back slow
        (gloo's event loop spins while a descheduled thread holds its lock; bench/RESULTS.md)."""
        if ranks not in self.groups:
            everyone = ranks == tuple(range(self.env.world_size))
            if everyone and self.backend == "gloo":
                self.groups[ranks] = dist.group.WORLD
            else:
                self.groups[ranks] = dist.new_group(list(ranks), backend=self.backend)
        return self.groups[ranks]

    def buffer(self, role: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """`numel` elements of this role's one allocation, grown when a row needs more: rows reuse
        their buffers, as nccl-tests' allocated once for its largest size are, so a row neither
        allocates nor has its first call fault fresh pages in (64 MiB of them cost about as much as
        the op). Contents are whatever the last row left: callers fill what they read."""
        key = (role, dtype)
        held = self.buffers.get(key)
        if held is None or held.numel() < numel:
            self.buffers.pop(key, None)  # the old one goes before the larger one comes
            held = self.buffers[key] = torch.empty(numel, dtype=dtype, device=self.device)
        return held[:numel]

    def ranks_on_my_node(self) -> int:
        return next(len(node.ranks) for node in self.nodes if self.rank in node.ranks)


def open_session(cfg: RunConfig, env: RankEnv) -> Session:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=cfg.timeout_s + GLOO_TIMEOUT_MARGIN_S),
    )
    backend = _agree_on_backend(cfg, env)
    if backend == "gloo":
        check_gloo_supports(cfg.dtype, "the backend these ranks agreed on")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    identity = (env.rank, env.local_rank, node_name(cfg.node_name))
    identities: list = [None] * env.world_size
    dist.all_gather_object(identities, identity)
    topology, domains = _cluster_topology(identity, identities)
    nodes = [
        NodeInfo(**placement.to_dict(), **_domain_key(domains.get(placement.hostname)))
        for placement in place_ranks(identities)
    ]
    session = Session(cfg=cfg, env=env, backend=backend, device=device, nodes=nodes)
    if device.type == "cpu":
        _share_cores(session)
    session.topology = topology
    return session


def _domain_key(domain: str | None) -> dict:
    """NodeInfo's nvlink_domain, written only where the host is in a multi-host NVLink domain."""
    return {"nvlink_domain": domain} if domain else {}


def _share_cores(session: Session) -> None:
    """Give each CPU rank its share of the node's cores: with torch's default (all cores per rank),
    ranks that share a node fight over cores in every copy and reduction, and times balloon."""
    if "OMP_NUM_THREADS" in os.environ:
        return  # the user decided
    torch.set_num_threads(max(1, usable_cores() // session.ranks_on_my_node()))


def _cluster_topology(identity, identities) -> tuple[dict, dict[str, str]]:
    """Local rank 0 of each node discovers it (all its GPUs are visible there) and says which
    NVLink domain it is in (topology.nvlink_domain); every rank merges. Returns the cluster view
    and the domain of each host that reported one."""
    mine = discover_node(identity[2]) if identity[1] == 0 else None
    report = (mine, nvlink_domain(mine)) if mine is not None else None
    gathered: list = [None] * len(identities)
    dist.all_gather_object(gathered, report)
    reports = [r for r in gathered if r is not None]
    domains = {topology.hostname: domain for topology, domain in reports if domain}
    return merge_nodes([topology for topology, _ in reports], identities).to_dict(), domains


def _agree_on_backend(cfg: RunConfig, env: RankEnv) -> str:
    has_gpu = torch.cuda.is_available() and dist.is_nccl_available() and env.local_rank < torch.cuda.device_count()
    flag = torch.tensor([1 if has_gpu else 0])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    everyone_has_gpu = bool(flag.item())
    if cfg.backend == "nccl" and not everyone_has_gpu:
        raise UsageError("--backend nccl needs one GPU per rank and a CUDA build of torch; some rank has none")
    if cfg.backend == "auto":
        return "nccl" if everyone_has_gpu else "gloo"
    return cfg.backend


def broadcast_str(value: str) -> str:
    """Rank 0's value of a string, on every rank."""
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def run_info(session: Session, run_id: str, kind: str) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        kind=kind,
        created=utc_now(),
        backend=session.backend,
        world_size=session.env.world_size,
        nodes=session.nodes,
        args={**json.loads(session.cfg.to_json()), "launcher": session.env.launcher},
        versions=software_versions(session.backend),
        env=captured_env(),
        topology=session.topology,
        cluster=resolve_cluster(session.cfg.cluster, os.environ, session.nodes[0].hostname if session.nodes else None),
    )


def software_versions(backend: str) -> dict:
    versions = {"commbench": __version__, "torch": torch.__version__, "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda
        if backend == "nccl":
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        versions["gpu"] = torch.cuda.get_device_name(0)
        try:
            import pynvml

            pynvml.nvmlInit()
            versions["driver"] = pynvml.nvmlSystemGetDriverVersion()
        except Exception:  # no NVML on this host: the driver version is simply unknown
            pass
    return versions


def captured_env() -> dict:
    prefixes = (
        "NCCL_",
        "GLOO_",
        "TORCH_",
        "CUDA_VISIBLE",
        "MASTER_",
        "SLURM_JOB",
        "SLURM_NNODES",
        "SLURM_NTASKS",
        "OMP_NUM",
    )
    return {key: value for key, value in sorted(os.environ.items()) if key.startswith(prefixes)}
