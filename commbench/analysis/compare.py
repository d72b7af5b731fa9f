"""Is a difference between two runs real? Per row: the change, its confidence interval, and a verdict.

For each row both runs measured (same op, scope, group size, size, dtype, in/out-of-place and, in
pairwise runs, the same pair of ranks: commbench.data.samples.row_key):
  change     time_B / time_A - 1 on the reported medians (busbw changes by 1/(1+change) - 1);
  interval   a 95% bootstrap interval of that ratio, resampling each run's per-iteration samples
             and taking the medians (2,000 resamples, fixed seed so a report is reproducible);
  p          Mann-Whitney U, two-sided, on the two runs' per-iteration samples;
  q          Benjamini-Hochberg adjusted p over every tested row of the comparison.
A row is flagged only when q < alpha (default 0.05), the change is material (|change| above the
threshold, default 5%) *and* its interval excludes no change (the two tests can disagree on
heavy-tailed samples; a flag must agree with the interval printed beside it). Per-iteration
samples inside one run are closer to each other than to
another run's, so rank tests alone call most run-to-run jitter significant; the material threshold
is what keeps two runs of the same command from raising alarms. Rows without samples (older runs,
imports) get the change only, and are never flagged: there is nothing to test.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from commbench.analysis.runs import RunRows, describe_key, run_differences

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
DEFAULT_ALPHA = 0.05
DEFAULT_THRESHOLD = 0.05


@dataclass
class RowComparison:
    key: tuple[Any, ...]
    row: str
    time_a_us: float
    time_b_us: float
    time_change: float  # time_B / time_A - 1
    busbw_change: float  # busbw_B / busbw_A - 1
    ci_low: float | None = None  # bounds of time_change
    ci_high: float | None = None
    p: float | None = None
    q: float | None = None
    verdict: str = "no samples"  # slower, faster, no significant change, no samples

    @property
    def flagged(self) -> bool:
        return self.verdict in ("slower", "faster")


@dataclass
class Comparison:
    run_a: str
    run_b: str
    rows: list[RowComparison]
    differences: list[str]
    only_in_a: int
    only_in_b: int
    alpha: float
    threshold: float

    def to_dict(self) -> dict[str, Any]:
        result = asdict(self)
        for row in result["rows"]:
            row["key"] = list(row["key"])
        result["flagged"] = sum(row.flagged for row in self.rows)
        return result


def compare_runs(
    a: RunRows, b: RunRows, alpha: float = DEFAULT_ALPHA, threshold: float = DEFAULT_THRESHOLD
) -> Comparison:
    common = [key for key in a.rows if key in b.rows]
    rows = [_row(key, a, b) for key in common]
    tested = [row for row in rows if row.p is not None]
    if tested:
        adjusted = stats.false_discovery_control([row.p for row in tested], method="bh")
        for row, q in zip(tested, adjusted):
            row.q = float(q)
            row.verdict = _verdict(row, alpha, threshold)
    return Comparison(
        run_a=a.run_id,
        run_b=b.run_id,
        rows=rows,
        differences=run_differences(a.info, b.info),
        only_in_a=len(a.rows) - len(common),
        only_in_b=len(b.rows) - len(common),
        alpha=alpha,
        threshold=threshold,
    )


def _row(key: tuple[Any, ...], a: RunRows, b: RunRows) -> RowComparison:
    time_a, time_b = a.rows[key]["time_us"], b.rows[key]["time_us"]
    change = time_b / time_a - 1 if time_a > 0 else float("nan")
    row = RowComparison(
        key=key,
        row=describe_key(key),
        time_a_us=time_a,
        time_b_us=time_b,
        time_change=change,
        busbw_change=1 / (1 + change) - 1 if change > -1 else float("nan"),
    )
    samples_a, samples_b = a.samples.get(key), b.samples.get(key)
    if samples_a and samples_b and len(samples_a) >= 3 and len(samples_b) >= 3:
        row.ci_low, row.ci_high = bootstrap_ratio_interval(np.asarray(samples_a), np.asarray(samples_b))
        row.p = float(stats.mannwhitneyu(samples_a, samples_b, alternative="two-sided").pvalue)
    return row


def bootstrap_ratio_interval(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of median(B*)/median(A*) - 1 over bootstrap resamples."""
    rng = np.random.default_rng(seed)
    medians_a = np.median(rng.choice(a, size=(BOOTSTRAP_RESAMPLES, a.size)), axis=1)
    medians_b = np.median(rng.choice(b, size=(BOOTSTRAP_RESAMPLES, b.size)), axis=1)
    ratios = medians_b / medians_a - 1
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def _verdict(row: RowComparison, alpha: float, threshold: float) -> str:
    # so the interval shown never contradicts the verdict
    excludes_zero = (row.ci_low is not None and row.ci_low > 0) or (row.ci_high is not None and row.ci_high < 0)
    if row.q is not None and row.q < alpha and abs(row.time_change) > threshold and excludes_zero:
        return "slower" if row.time_change > 0 else "faster"
    return "no significant change"
