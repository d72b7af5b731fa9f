"""Compute-communication overlap in PyTorch profiler (Kineto) chrome traces, one file per rank.

What counts as what
-------------------
communication  GPU kernels whose name starts with "nccl" (ncclKernel_* and ncclDevKernel_*), and
               the gloo collectives themselves: the "gloo:<collective>" ranges that gloo's worker
               threads (pt_gloo_runloop) record while a collective runs.
compute        On a rank with GPU activity: every other GPU kernel. On a CPU-only rank: the CPU
               operators (cat "cpu_op") of the threads that run the model (the training thread, and
               autograd threads if any), minus the time spent inside operators that only issue a
               collective (c10d::*, record_param_comms, nccl:*): with gloo those enqueue work for
               the gloo threads and return, they are not computation.
memory         cat gpu_memcpy / gpu_memset.
ignored        CUDA runtime and driver calls, synchronisation, annotations, Python frames.

Figures, per rank and per iteration (ProfilerStep#N), after merging intervals across all streams
or threads of a category (following the Holistic Trace Analysis definitions):
  overlap %            time when compute and communication both run / communication time
                       (None when there is no communication: nothing to overlap)
  exposed comm.        communication time during which no compute runs
  idle                 time in the window with neither compute, communication nor memory work
The iteration window on a CPU-only rank is the ProfilerStep#N range itself. GPU work runs after
the CPU launches it, so on a GPU rank iteration N starts at the first GPU event launched (by
correlation id) during ProfilerStep#N and ends where iteration N+1 starts (the last ends with its
last GPU event). A rank without ProfilerStep annotations is one window from its first to its last
event. Rank totals add up the iterations.

All times are microseconds; in the results they count from the earliest event of all ranks.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commbench.dtypes import element_bytes as dtype_bytes
from commbench.errors import UsageError
from commbench.traces.chrome_trace import ChromeTraceReader
from commbench.traces.intervals import IntervalSet

COMPUTE = "compute"
COMMUNICATION = "communication"
MEMORY = "memory"
# CPU operators that only hand a collective to the backend: on CPU ranks they are cut out of compute.
_COLLECTIVE_CALL = "collective call"

_KERNEL_CATEGORIES = {"kernel"}
_MEMORY_CATEGORIES = {"gpu_memcpy", "gpu_memset", "memcpy", "memset"}
_LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime"}
_COLLECTIVE_CALL_PREFIXES = ("c10d::", "record_param_comms", "nccl:")

DEFAULT_TIMELINE_LIMIT = 50_000


# a trace's pid or tid as written: a number, a name, or None
LaneId = int | float | str | None


@dataclass
class WindowFigures:
    """The overlap figures of one iteration, or of a whole rank (step None)."""

    step: int | None
    start_us: float
    duration_us: float
    compute_us: float
    communication_us: float
    memory_us: float
    overlap_us: float
    overlap_pct: float | None
    exposed_communication_us: float
    idle_us: float


@dataclass
class CollectiveStat:
    """All runs of one collective (kernel name, or gloo:<collective>) on a rank."""

    name: str
    count: int
    total_us: float
    # max(In msg nelems, Out msg nelems) x element size summed over the runs, as nccl-tests sizes
    # a collective; None unless every run carries those args (gloo ranges carry none).
    bytes: int | None


@dataclass
class RankAnalysis:
    rank: int
    path: str
    device: str  # "gpu" when the rank has GPU kernels or copies, else "cpu"
    total: WindowFigures
    iterations: list[WindowFigures]
    collectives: list[CollectiveStat]  # busiest first
    truncated: bool


@dataclass
class TraceAnalysis:
    ranks: list[RankAnalysis]
    # Bars for the dashboard: {rank, lane, category, name, start_us, dur_us}, sorted by rank, start.
    timeline: list[dict[str, Any]]
    timeline_note: str | None  # set when the timeline keeps only the longest events
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        figures: dict[str, Any] = _rounded(asdict(self))
        return figures


def analyse_traces(paths: Sequence[str | Path], *, timeline_limit: int = DEFAULT_TIMELINE_LIMIT) -> TraceAnalysis:
    """Read each trace (one rank per file, .json or .json.gz) and measure its overlap.

    Raises UsageError for a missing file or one that is not a chrome trace; a trace cut short is
    analysed as far as it goes, with a warning.
    """
    if not paths:
        raise UsageError("no trace files given")
    warnings: list[str] = []
    recordings = [_record(Path(path), warnings) for path in paths]
    ranks = _rank_numbers(recordings, warnings)
    activities = [recording.activity() for recording in recordings]
    windows = [recording.windows(activity) for recording, activity in zip(recordings, activities)]
    # One origin for all ranks, so that their timelines line up.
    origin = min(
        [a.first_start for a in activities if a.first_start is not None]
        + [start for rank_windows in windows for _, start, _ in rank_windows],
        default=0.0,
    )
    analyses = [_analyse_rank(*arguments, origin) for arguments in zip(ranks, recordings, activities, windows)]
    per_rank_limit = max(1, timeline_limit // len(recordings))
    timeline, capped = [], False
    for rank, recording in zip(ranks, recordings):
        bars, rank_capped = recording.timeline(rank, origin, per_rank_limit)
        timeline += bars
        capped |= rank_capped
    note = f"only the {per_rank_limit} longest events of each rank are drawn" if capped else None
    return TraceAnalysis(ranks=analyses, timeline=timeline, timeline_note=note, warnings=warnings)


# --- reading -------------------------------------------------------------------------------------


class _Lane:
    """The events of one category on one stream or thread, in compact arrays."""

    __slots__ = (
        "bytes",
        "category",
        "correlations",
        "durations",
        "name_ids",
        "on_gpu",
        "pid",
        "starts",
        "tid",
    )  # fmt: skip

    def __init__(self, category: str, on_gpu: bool, pid: LaneId, tid: LaneId) -> None:
        self.category, self.on_gpu, self.pid, self.tid = category, on_gpu, pid, tid
        self.starts, self.durations = array("d"), array("d")
        self.name_ids = array("q")
        self.bytes = array("q")  # -1: unknown
        self.correlations = array("q")  # -1: none

    def add(self, start: float, duration: float, name_id: int, num_bytes: int, correlation: int) -> None:
        self.starts.append(start)
        self.durations.append(duration)
        self.name_ids.append(name_id)
        self.bytes.append(num_bytes)
        self.correlations.append(correlation)

    def label(self, thread_names: dict[tuple[LaneId, LaneId], str]) -> str:
        if self.on_gpu:
            return f"GPU {self.pid} stream {str(self.tid).removeprefix('stream ')}"
        # Kineto names threads "thread <tid> (<name>)" already.
        return thread_names.get((self.pid, self.tid)) or f"thread {self.tid}"


@dataclass
class _RankActivity:
    """The merged interval sets the figures are measured on."""

    compute: IntervalSet
    communication: IntervalSet
    memory: IntervalSet
    first_start: float | None
    last_end: float | None


class _RankRecording:
    """What one trace file holds that the analysis needs; filled event by event."""

    def __init__(self, path: Path):
        self.path = path
        self.lanes: dict[tuple[Any, ...], _Lane] = {}
        self.names: list[str] = []
        self._name_ids: dict[str, int] = {}
        self.thread_names: dict[tuple[LaneId, LaneId], str] = {}
        self.steps: list[tuple[int, float, float]] = []
        self.launch_times: dict[int, float] = {}  # correlation id -> when the CPU launched it
        self.metadata: dict[str, Any] = {}
        self.truncated = False

    def add(self, event: dict[str, Any]) -> None:
        phase = event.get("ph")
        if phase == "X":
            self._add_complete_event(event)
        elif phase == "M" and event.get("name") == "thread_name":
            args = event.get("args")
            name = args.get("name", "") if isinstance(args, dict) else ""
            self.thread_names[(_lane_id(event.get("pid")), _lane_id(event.get("tid")))] = str(name)

    def _add_complete_event(self, event: dict[str, Any]) -> None:
        name = str(event.get("name", ""))
        category = str(event.get("cat", "")).lower()
        try:
            start, duration = float(event["ts"]), float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            return
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        if category == "user_annotation" and name.startswith("ProfilerStep#"):
            self._add_step(name, start, duration)
            return
        if category in _LAUNCH_CATEGORIES and isinstance(args.get("correlation"), int):
            self.launch_times[args["correlation"]] = start
            return
        kind = _classify(name, category)
        if kind is None:
            return
        on_gpu = category in _KERNEL_CATEGORIES or category in _MEMORY_CATEGORIES
        pid, tid = _lane_id(event.get("pid")), _lane_id(event.get("tid"))
        key = (kind, on_gpu, pid, tid)
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = _Lane(kind, on_gpu, pid, tid)
        num_bytes = _message_bytes(args) if kind == COMMUNICATION else None
        correlation = args.get("correlation") if on_gpu else None
        correlation = correlation if isinstance(correlation, int) else -1
        lane.add(start, duration, self._name_id(name), -1 if num_bytes is None else num_bytes, correlation)

    def _add_step(self, name: str, start: float, duration: float) -> None:
        try:
            self.steps.append((int(name.split("#", 1)[1]), start, start + duration))
        except ValueError:
            pass  # a user range that merely looks like a profiler step

    def _name_id(self, name: str) -> int:
        name_id = self._name_ids.get(name)
        if name_id is None:
            name_id = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return name_id

    @property
    def on_gpu(self) -> bool:
        return any(lane.on_gpu for lane in self.lanes.values())

    def analysed_lanes(self) -> list[_Lane]:
        """The lanes the figures come from: GPU lanes and gloo threads on a GPU rank, else CPU ones."""
        on_gpu = self.on_gpu
        return [
            lane
            for lane in self.lanes.values()
            if lane.category != _COLLECTIVE_CALL and (lane.on_gpu or lane.category == COMMUNICATION or not on_gpu)
        ]

    def activity(self) -> _RankActivity:
        by_category = defaultdict(list)
        for lane in self.analysed_lanes():
            by_category[lane.category].append(lane)
        compute = _union(by_category[COMPUTE])
        if not self.on_gpu:
            calls = [lane for lane in self.lanes.values() if lane.category == _COLLECTIVE_CALL]
            compute = compute - _union(calls)
        sets = [compute, _union(by_category[COMMUNICATION]), _union(by_category[MEMORY])]
        busy = sets[0] | sets[1] | sets[2]
        first, last = (float(busy.starts[0]), float(busy.ends[-1])) if len(busy) else (None, None)
        return _RankActivity(sets[0], sets[1], sets[2], first_start=first, last_end=last)

    def windows(self, activity: _RankActivity) -> list[tuple[int | None, float, float]]:
        """(step, start, end) of each iteration; one window over all activity without steps."""
        steps = sorted(self.steps)
        step_windows: list[tuple[int | None, float, float]] = []
        step_windows += self._gpu_step_windows(steps) if self.on_gpu else steps
        if step_windows:
            return step_windows
        if activity.first_start is None or activity.last_end is None:
            return []
        return [(None, activity.first_start, activity.last_end)]

    def _gpu_step_windows(self, steps: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
        if not steps:
            return []
        step_starts = np.array([start for _, start, _ in steps])
        step_ends = np.array([end for _, _, end in steps])
        first_start = np.full(len(steps), np.inf)
        last_end = np.full(len(steps), -np.inf)
        for lane in self.lanes.values():
            if not lane.on_gpu:
                continue
            starts = np.frombuffer(lane.starts)
            ends = starts + np.frombuffer(lane.durations)
            launches = np.array([self.launch_times.get(c, s) for c, s in zip(lane.correlations, starts)])
            index = np.searchsorted(step_starts, launches, side="right") - 1
            inside = (index >= 0) & (launches < step_ends[np.maximum(index, 0)])
            np.minimum.at(first_start, index[inside], starts[inside])
            np.maximum.at(last_end, index[inside], ends[inside])
        with_gpu_work = [i for i in range(len(steps)) if np.isfinite(first_start[i])]
        windows = []
        for position, i in enumerate(with_gpu_work):
            following = with_gpu_work[position + 1] if position + 1 < len(with_gpu_work) else None
            end = last_end[i] if following is None else max(first_start[following], first_start[i])
            windows.append((steps[i][0], float(first_start[i]), float(end)))
        return windows

    def collectives(self) -> list[CollectiveStat]:
        # name -> [count, time, bytes, bytes all known]
        totals: defaultdict[str, list[Any]] = defaultdict(lambda: [0, 0.0, 0, True])
        for lane in self.lanes.values():
            if lane.category != COMMUNICATION:
                continue
            for name_id, duration, num_bytes in zip(lane.name_ids, lane.durations, lane.bytes):
                # Kernel names carry their template arguments, "ncclDevKernel_X(ncclDevKernelArgs...)".
                total = totals[self.names[name_id].split("(", 1)[0]]
                total[0] += 1
                total[1] += duration
                total[2] += max(num_bytes, 0)
                total[3] &= num_bytes >= 0
        stats = [
            CollectiveStat(name, count, time_us, num_bytes if known else None)
            for name, (count, time_us, num_bytes, known) in totals.items()
        ]
        return sorted(stats, key=lambda stat: stat.total_us, reverse=True)

    def timeline(self, rank: int, origin: float, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """The longest `limit` events of the analysed lanes as bars; True when some were left out."""
        lanes = self.analysed_lanes()
        if not lanes:
            return [], False
        start_parts: list[np.ndarray] = []
        duration_parts: list[np.ndarray] = []
        lane_parts: list[np.ndarray] = []
        name_parts: list[np.ndarray] = []
        for lane_index, lane in enumerate(lanes):
            lane_starts, lane_durations = np.frombuffer(lane.starts), np.frombuffer(lane.durations)
            # CPU operators nest (aten::linear holds aten::addmm): draw only the outermost ones.
            shown = np.arange(len(lane_starts)) if lane.on_gpu else _outermost(lane_starts, lane_durations)
            start_parts.append(lane_starts[shown])
            duration_parts.append(lane_durations[shown])
            lane_parts.append(np.full(len(shown), lane_index))
            name_parts.append(np.frombuffer(lane.name_ids, dtype=np.int64)[shown])
        starts, durations = np.concatenate(start_parts), np.concatenate(duration_parts)
        lane_indices, name_ids = np.concatenate(lane_parts), np.concatenate(name_parts)
        kept = np.arange(len(starts))
        if len(kept) > limit:
            kept = np.argpartition(-durations, limit - 1)[:limit]
        kept = kept[np.lexsort((lane_indices[kept], starts[kept]))]
        labels = [lane.label(self.thread_names) for lane in lanes]
        bars = [
            {
                "rank": rank,
                "lane": labels[lane_indices[i]],
                "category": lanes[lane_indices[i]].category,
                "name": self.names[name_ids[i]],
                "start_us": float(starts[i] - origin),
                "dur_us": float(durations[i]),
            }
            for i in kept.tolist()
        ]
        return bars, len(kept) < len(starts)


def _record(path: Path, warnings: list[str]) -> _RankRecording:
    reader = ChromeTraceReader(path)
    recording = _RankRecording(path)
    for event in reader.events():
        recording.add(event)
    recording.metadata = reader.metadata
    recording.truncated = reader.truncated
    if reader.truncated:
        warnings.append(f"{path}: the file ends in the middle of an event; analysed what was read")
    return recording


def _classify(name: str, category: str) -> str | None:
    if category in _KERNEL_CATEGORIES:
        return COMMUNICATION if name.lower().startswith("nccl") else COMPUTE
    if category in _MEMORY_CATEGORIES:
        return MEMORY
    if name.startswith("gloo:"):
        return COMMUNICATION
    if category == "cpu_op":
        return _COLLECTIVE_CALL if name.startswith(_COLLECTIVE_CALL_PREFIXES) else COMPUTE
    return None


def _message_bytes(args: dict[str, Any]) -> int | None:
    # record_param_comms writes c10 ScalarType names (Float, BFloat16, Float8_e4m3fn ...)
    element_bytes = dtype_bytes(str(args.get("dtype", "")))
    elements = [n for n in (args.get("In msg nelems"), args.get("Out msg nelems")) if isinstance(n, (int, float))]
    if element_bytes is None or not elements:
        return None
    return int(max(elements)) * element_bytes


def _rank_numbers(recordings: list[_RankRecording], warnings: list[str]) -> list[int]:
    """distributedInfo.rank of each file, or the file's position when that is missing or repeated."""
    infos = [r.metadata.get("distributedInfo") for r in recordings]
    declared = [info.get("rank") if isinstance(info, dict) else None for info in infos]
    ranks = [rank for rank in declared if isinstance(rank, int)]
    if len(ranks) == len(declared) and len(set(ranks)) == len(ranks):
        return ranks
    if len(recordings) > 1:
        warnings.append("traces do not all name a distinct rank (distributedInfo); numbered in the given order")
    return list(range(len(recordings)))


# --- measuring -----------------------------------------------------------------------------------


def _analyse_rank(
    rank: int, recording: _RankRecording, activity: _RankActivity, windows: list[Any], origin: float
) -> RankAnalysis:
    iterations = [_measure(step, start, end, activity, origin) for step, start, end in windows]
    return RankAnalysis(
        rank=rank,
        path=str(recording.path),
        device="gpu" if recording.on_gpu else "cpu",
        total=_add_up(iterations),
        iterations=iterations if any(it.step is not None for it in iterations) else [],
        collectives=recording.collectives(),
        truncated=recording.truncated,
    )


def _measure(step: int | None, start: float, end: float, activity: _RankActivity, origin: float) -> WindowFigures:
    compute = activity.compute.clip(start, end)
    communication = activity.communication.clip(start, end)
    memory = activity.memory.clip(start, end)
    overlap = (compute & communication).length
    return WindowFigures(
        step=step,
        start_us=start - origin,
        duration_us=end - start,
        compute_us=compute.length,
        communication_us=communication.length,
        memory_us=memory.length,
        overlap_us=overlap,
        overlap_pct=_percent(overlap, communication.length),
        exposed_communication_us=(communication - compute).length,
        idle_us=(end - start) - (compute | communication | memory).length,
    )


def _add_up(windows: list[WindowFigures]) -> WindowFigures:
    def total(attribute: str) -> float:
        return float(sum(getattr(window, attribute) for window in windows))

    overlap, communication = total("overlap_us"), total("communication_us")
    return WindowFigures(
        step=None,
        start_us=windows[0].start_us if windows else 0.0,
        duration_us=total("duration_us"),
        compute_us=total("compute_us"),
        communication_us=communication,
        memory_us=total("memory_us"),
        overlap_us=overlap,
        overlap_pct=_percent(overlap, communication),
        exposed_communication_us=total("exposed_communication_us"),
        idle_us=total("idle_us"),
    )


def _percent(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def _union(lanes: Iterable[_Lane]) -> IntervalSet:
    lanes = list(lanes)
    if not lanes:
        return IntervalSet.empty()
    starts = np.concatenate([np.frombuffer(lane.starts) for lane in lanes])
    durations = np.concatenate([np.frombuffer(lane.durations) for lane in lanes])
    return IntervalSet.union_of(starts, starts + durations)


def _outermost(starts: np.ndarray, durations: np.ndarray) -> np.ndarray:
    """Indices of the events not nested inside an earlier-starting (or longer, same-start) one."""
    order = np.lexsort((-durations, starts))
    ends = (starts + durations)[order]
    reach_before = np.concatenate([[-np.inf], np.maximum.accumulate(ends)[:-1]])
    return order[starts[order] >= reach_before]


def _rounded(value: Any) -> Any:
    """Round floats to the nanosecond so JSON shows 12.5, not 12.499999999999998."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def _lane_id(value: Any) -> LaneId:
    """pid/tid as written (numbers or names); anything else (a list, an object) as its text."""
    return value if isinstance(value, (int, float, str)) or value is None else str(value)
