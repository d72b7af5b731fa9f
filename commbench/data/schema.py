"""The one results schema shared by every writer and reader.

A run directory `<out>/<run_id>/` holds:
  run.json       RunInfo: who ran what, where, with which software; `complete` is false until
                 the run ends well, and `reason` says why it did not.
  records.jsonl  one Record per line: one (op, scope, group size, size, dtype, in/out-of-place) row.
  records.csv    the same records, columns in Record field order.
  samples.jsonl  (sweeps, optional) per-iteration samples of each record: see commbench/data/samples.py.
Rows are appended to the three as they are measured, never rewritten (commbench/data/rundir.py);
a last line cut mid-write is dropped by every reader.

Version history (bump SCHEMA_VERSION and note it here when a field changes meaning or goes away;
adding an optional field keeps the version):
  1  first release; later, optional run.json fields `synthetic` and `note` (defaults false, none);
     later, optional record fields `time_stat` (default 'slowest-rank median', what older rows are) and
     `time_us_mean` (absent in older rows); the percentiles, min, max and cv may be null (imported
     rows that did not report them; older imports copied the mean into them); later, optional record fields
     `uniform_time_us_p10` and `uniform_time_us_p90` (all_to_allv rows; absent in older rows, read as null);
     later, optional record field `stop_reason` (why the timed loop stopped; absent in older rows, read as null).
     Each new record field adds a column to the results database's records table: see
     STORE_SCHEMA_VERSION in commbench/data/store.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from commbench.scopes import Scope, describe

SCHEMA_VERSION = 1


class Record(BaseModel):
    """One measured row, comparable with one nccl-tests row (one column group of it)."""

    model_config = ConfigDict(extra="allow")

    op: str = Field(
        description="collective: all_reduce, all_gather, reduce_scatter, all_to_all, all_to_allv, sendrecv, "
        "broadcast, pingpong"
    )
    scope: Scope = Field("world", description=f"which ranks form a group: {describe()}")
    group_size: int = Field(description="ranks in one communicator (n in the busbw factor)")
    n_groups: int = Field(1, description="groups measured at the same time (intra/inter scopes)")
    size_bytes: int = Field(description="nccl-tests 'size': max(send, receive) bytes of one rank")
    count: int = Field(description="nccl-tests 'count': elements passed to the collective call")
    dtype: str = Field(description="element type, nccl-tests spelling: float, half, bfloat16, double, int32 ...")
    redop: str = Field("none", description="reduction op (sum) or 'none'")
    root: int = Field(-1, description="root rank for rooted ops, else -1")
    in_place: bool = Field(description="output buffer is the input buffer")
    direction: Literal["uni", "bi"] | None = Field(
        None, description="pingpong only: one way at a time, or both ranks sending at once"
    )
    iters: int = Field(description="timed iterations per rank")
    warmup: int = Field(0, description="untimed warm-up iterations before timing")
    stop_reason: Literal["converged", "budget", "fixed"] | None = Field(
        None,
        description="why the timed loop stopped: converged (the median's 95% confidence interval came within "
        "--ci-pct), budget (--time-budget-ms or --max-iters spent first), fixed (-n, or a tool that "
        "always runs a fixed count: overlap, nccl-tests); null in runs written before it was kept",
    )
    timer: Literal["cuda_event", "host", "imported"] = Field("host", description="what measured each iteration")
    time_us: float = Field(description="reported per-op time (us): the statistic time_stat names")
    time_stat: str = Field(
        "slowest-rank median",
        description="which statistic time_us is: 'slowest-rank median' "
        "(commbench's rows: median over iterations of the slowest rank) or 'rank-averaged mean' "
        "(imported nccl-tests rows: nccl-tests' mean per op, averaged over ranks)",
    )
    time_us_mean: float | None = Field(
        None,
        description="mean per-op time (us) over the iterations of the rank "
        "time_us is from (imported rows: nccl-tests' rank-averaged mean); what a step "
        "pays on average, so the planner prices collectives from it; absent in older runs",
    )
    time_us_p10: float | None = Field(
        description="10th percentile of the per-iteration times; null where the "
        "source did not report it (imported rows without nccl-tests' -I)"
    )
    time_us_p90: float | None = Field(description="90th percentile, null as time_us_p10")
    time_us_min: float | None = Field(description="fastest iteration, null as time_us_p10")
    time_us_max: float | None = Field(description="slowest iteration, null as time_us_p10")
    cv: float | None = Field(
        description="coefficient of variation (stdev/mean) of the per-iteration times; null "
        "where the source did not report it"
    )
    time_us_mean_nccl: float | None = Field(
        None, description="nccl-tests' figure: mean per-op time averaged over ranks"
    )
    algbw_gbps: float = Field(description="size_bytes / time_us, GB/s = 1e9 B/s")
    busbw_gbps: float = Field(description="algbw x the op's busbw factor for group_size")
    busbw_factor: float
    aggregate_busbw_gbps: float | None = Field(
        None, description="busbw x n_groups: what all groups of the scope moved together"
    )
    wrong: int = Field(
        0, description="wrong elements found by the correctness check, summed over ranks; -1 = not checked"
    )
    slowest_rank: int | None = Field(None, description="global rank whose median time was reported")
    pair: list[int] | None = Field(None, description="scope pair: the two global ranks measured")
    pair_nodes: list[str] | None = Field(None, description="scope pair: the nodes of those two ranks")
    outlier: bool | None = Field(None, description="scope pair: flagged, for the reasons in outlier_reasons")
    outlier_reasons: list[Literal["slow", "lossy"]] | None = Field(
        None,
        description="scope pair: slow = bandwidth below --outlier-ratio of the best pair of its kind; "
        "lossy = TCP re-sent over --max-retransmit-pct of its segments",
    )
    tcp_segments_sent: int | None = Field(
        None,
        ge=0,
        description="scope pair: TCP segments the pair's nodes sent while it was "
        "measured (kernel counters, whole node)",
    )
    tcp_retransmits: int | None = Field(None, ge=0, description="scope pair: of those, segments re-sent")
    routing: str | None = Field(
        None, description="all_to_allv: the --routing skew (uniform, zipf:S, dirichlet:ALPHA, file:NAME)"
    )
    tokens_per_rank: int | None = Field(None, description="all_to_allv: tokens each rank routes (its size axis)")
    recv_bytes_max: int | None = Field(None, description="all_to_allv: bytes the hottest rank receives")
    recv_bytes_mean: float | None = Field(None, description="all_to_allv: mean bytes received per rank")
    hottest_rank: int | None = Field(None, description="all_to_allv: group rank receiving the most")
    uniform_time_us: float | None = Field(
        None, description="all_to_allv: the uniform all_to_all of the same total bytes, measured in the same run"
    )
    uniform_time_us_p10: float | None = Field(
        None,
        description="all_to_allv: 10th percentile (us) of that uniform all_to_all's "
        "per-iteration times, from the rank its time is from (as time_us_p10); "
        "null in runs written before the sweep kept it",
    )
    uniform_time_us_p90: float | None = Field(
        None, description="all_to_allv: 90th percentile (us), null as uniform_time_us_p10"
    )
    skew_penalty: float | None = Field(None, description="all_to_allv: time_us / uniform_time_us")
    split_bytes: list[list[int]] | None = Field(
        None, description="all_to_allv: bytes sent, source rank (row) x destination rank (column)"
    )


class NodeInfo(BaseModel):
    """One host of a run and its ranks. A host whose GPUs sit in a multi-node NVLink domain (a
    GB200/GB300 NVL72 rack: NVML's fabric cluster UUID and clique, or --nvlink-domain's label)
    also carries `nvlink_domain` (an extra key, written only where known, read with
    commbench.scopes.nvlink_domain_of): the hosts of one domain form the `intra` scope, each host the `host` scope."""

    model_config = ConfigDict(extra="allow")

    hostname: str
    node_id: int
    ranks: list[int]
    local_ranks: list[int]


class RunInfo(BaseModel):
    """run.json. Runs measured since the results database exists also carry `cluster` (an extra key:
    --cluster, else Slurm's cluster name, else the first host's name without its number); the
    store derives it the same way for runs that lack it."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    run_id: str
    kind: Literal["sweep", "overlap", "pairwise", "import", "trace", "diagnose"] = "sweep"
    source: str = Field("commbench", description="commbench, or the tool a run was imported from (nccl-tests)")
    created: str = Field(description="ISO-8601 UTC time the run started")
    finished: str | None = None
    backend: str
    world_size: int
    nodes: list[NodeInfo] = []
    args: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    env: dict[str, Any] = Field({}, description="NCCL_*, GLOO_*, TORCH_* and launcher variables seen by rank 0")
    topology: dict[str, Any] | None = None
    complete: bool = False
    reason: str | None = Field(None, description="why the run is not complete (an error, a lost rank, an interrupt)")
    warnings: list[str] = []
    synthetic: bool = Field(
        False,
        description="true when no machine measured these figures: written by hand or "
        "generated, for tests and examples; `note` says what they imitate",
    )
    note: str | None = Field(
        None,
        description="where the figures came from, in words: the command that re-creates "
        "the run, or what a synthetic run imitates",
    )


RECORD_FIELDS: list[str] = list(Record.model_fields)
