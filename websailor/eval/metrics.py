"""Metrics over a (questions x runs) table of grades, as the WebSailor papers report them.

* per-run accuracy: for run ``r``, the share of questions its rollout got right;
* Avg@k: the mean of the k per-run accuracies (pass@1 averaged over k runs);
* Best Pass@1: the best of the k per-run accuracies;
* Pass@k: the share of questions that at least one of the k rollouts got right; with ``n > k``
  rollouts per question, the unbiased estimator ``1 - C(n - c, k) / C(n, k)`` (Chen et al.,
  arXiv 2107.03374, eq. 1), averaged over questions;
* a 95% bootstrap interval for Avg@k, resampling questions with replacement.

Ungraded entries (``None``) are left out: a question counts in a run only if graded there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Table = Sequence[Sequence[bool | None]]  # one row per question, one column per run (rollout index)


def _check(table: Table) -> int:
    if not table:
        raise ValueError("no questions to score")
    k = len(table[0])
    if k == 0 or any(len(row) != k for row in table):
        raise ValueError("every question needs the same number of runs (k), at least one")
    return k


def per_run_accuracy(table: Table) -> list[float]:
    """Accuracy of each run over the questions graded in it (``nan`` if none was)."""
    k = _check(table)
    out = []
    for r in range(k):
        graded = [row[r] for row in table if row[r] is not None]
        out.append(sum(graded) / len(graded) if graded else math.nan)
    return out


def avg_at_k(table: Table) -> float:
    """Mean of the per-run accuracies (Avg@k)."""
    accs = [a for a in per_run_accuracy(table) if not math.isnan(a)]
    return sum(accs) / len(accs) if accs else math.nan


def best_pass_at_1(table: Table) -> float:
    """The best per-run accuracy."""
    accs = [a for a in per_run_accuracy(table) if not math.isnan(a)]
    return max(accs) if accs else math.nan


def pass_at_k(table: Table, k: int | None = None) -> float:
    """Share of questions solved by at least one of ``k`` rollouts (default: all of them);
    the unbiased estimator when fewer than the available rollouts are drawn.

    Raises:
        ValueError: ``k`` is not between 1 and the number of runs.
    """
    n_runs = _check(table)
    k = n_runs if k is None else k
    if not 1 <= k <= n_runs:
        raise ValueError(f"k must be between 1 and {n_runs}, got {k}")
    vals = []
    for row in table:
        graded = [x for x in row if x is not None]
        n, c = len(graded), sum(graded)
        if n < k:
            if n == 0:
                continue
            vals.append(1.0 if c else 0.0)  # fewer graded rollouts than k: any correct one counts
            continue
        vals.append(1.0 - math.comb(n - c, k) / math.comb(n, k))
    return sum(vals) / len(vals) if vals else math.nan


def bootstrap_ci(table: Table, n_resamples: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of Avg@k, resampling questions with replacement.

    Each resample is a vector of draw counts over questions, so its per-run accuracies are
    two matrix products; 100 resamples at a time."""
    import numpy as np

    _check(table)
    x = np.array([[np.nan if v is None else float(v) for v in row] for row in table])
    graded = (~np.isnan(x)).astype(float)
    x = np.nan_to_num(x)
    rng = np.random.default_rng(seed)
    n = len(table)
    stats = []
    for start in range(0, n_resamples, 100):
        b = min(100, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n)) + np.arange(b)[:, None] * n  # draws with replacement, per resample
        w = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n).astype(float)  # how often each question is drawn
        with np.errstate(invalid="ignore", divide="ignore"):
            per_run = (w @ x) / (w @ graded)  # (b, runs)
        runs_graded = (~np.isnan(per_run)).sum(axis=1)
        sums = np.nansum(per_run, axis=1)
        stats.extend(np.where(runs_graded > 0, sums / np.maximum(runs_graded, 1), np.nan))
    stats = sorted(s for s in stats if not math.isnan(s))
    if not stats:
        return (math.nan, math.nan)
    lo = stats[int((1 - level) / 2 * len(stats))]
    hi = stats[min(len(stats) - 1, int((1 + level) / 2 * len(stats)))]
    return (float(lo), float(hi))
