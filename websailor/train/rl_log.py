"""The per-step log of an RL run: one JSON line per optimizer step in ``rl_log.jsonl`` and
the same scalars as TensorBoard event files (``tensorboard --logdir DIR/tensorboard``), and
the plot of its curves.

Figures per step (names as logged):

- ``reward/mean``, ``reward/accuracy``, ``reward/ungraded``: the batch's rewards.
- ``groups/zero_spread_share``, ``groups/skipped``, ``groups/duplicated``: group signal;
  ``groups/env_failed`` (groups with a rollout whose environment failed: skipped, no reward)
  and ``rollouts/env_failed`` (such rollouts).
- ``rollouts/tool_calls``, ``rollouts/model_calls``, ``rollouts/response_tokens``,
  ``rollouts/in_loss_share``, ``termination/<reason>`` (shares of the batch);
  ``rollouts/repeated_calls``: tool calls per rollout that repeat one of its earlier calls
  (:func:`websailor.agent.trajectory.repeated_tool_calls`).
- ``entropy``, ``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/region_mean``,
  ``loss``, ``grad_norm``, ``learning_rate``: from the trainer.
- ``time/rollout_s`` (of which ``time/generation_s`` and ``time/tools_s``), ``time/update_s``,
  ``time/step_s``: seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from websailor.errors import InputFormatError
from websailor.jsonio import JsonlStream, Unfinished
from websailor.train.step_log import StepLogger as _StepLogger

LOG_FILE = "rl_log.jsonl"
TB_DIR = "tensorboard"

#: curves drawn by :func:`plot_log`, in panel order
PLOTTED = (
    ("reward/mean", "mean reward"),
    ("reward/accuracy", "accuracy"),
    ("groups/zero_spread_share", "zero-spread groups"),
    ("rollouts/tool_calls", "tool calls per rollout"),
    ("rollouts/response_tokens", "model tokens per rollout"),
    ("entropy", "entropy"),
    ("clip_ratio/region_mean", "clip fraction"),
    ("time/step_s", "seconds per step"),
)


class StepLogger(_StepLogger):
    """Appends one record per step to ``out/rl_log.jsonl`` and writes its numeric values as
    TensorBoard scalars under ``out/tensorboard``."""

    def __init__(self, out: Path, replay: bool = False) -> None:
        """``replay``: a resumed run; the event files are rewritten from the step log (already cut
        back to the checkpoint), so no step appears twice."""
        super().__init__(Path(out) / LOG_FILE, Path(out) / TB_DIR, replay)


@dataclass(frozen=True)
class StepLog:
    """The step log of an RL run: its ``path``, its step ``records`` in file order, and its
    ``unfinished`` last line (left out; ``None`` when there is none)."""

    path: Path
    records: list[dict]
    unfinished: Unfinished | None


def read_step_log(out: str | Path) -> StepLog:
    """The step log of the run in ``out`` (a directory, or the ``rl_log.jsonl`` file), read
    under the rules of :func:`websailor.jsonio.read_appended_jsonl`: a last line cut off mid-write
    (a run being written, or killed) is left out and returned as ``unfinished``; a whole last
    record without its newline is kept. Nothing is logged and the file is never changed.

    Raises:
        InputFormatError: no log there, or a line (other than an unfinished last one) that is
            not a step record (not JSON, or no integer ``step``).
    """
    path = Path(out)
    path = path / LOG_FILE if path.is_dir() else path
    if not path.is_file():
        raise InputFormatError(f"{path}: no RL step log (is this an RL run directory?)")
    stream = JsonlStream(path, "an RL step record")
    records = []
    for _, lineno, raw in stream.lines():
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise InputFormatError(f"{path} line {lineno} is not JSON: is it an RL step log?") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or isinstance(rec["step"], bool):
            raise InputFormatError(f"{path} line {lineno} is not an RL step record (no integer 'step')")
        records.append(rec)
    return StepLog(path, records, stream.unfinished)


def read_log(out: str | Path) -> list[dict]:
    """The step records of the run in ``out`` (a directory, or the ``rl_log.jsonl`` file); an
    unfinished last line (see :func:`read_step_log`) is left out with a warning.

    Raises:
        InputFormatError: as :func:`read_step_log`.
    """
    log = read_step_log(out)
    if log.unfinished is not None:
        from websailor.log import get_logger

        get_logger(__name__).warning("%s", log.unfinished)
    return log.records


def window_means(records: list[dict], key: str, n: int = 10) -> tuple[float | None, float | None]:
    """Mean of ``key`` over the first ``n`` and the last ``n`` steps (``None`` if absent)."""
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))]
    if not values:
        return None, None
    head, tail = values[:n], values[-n:]
    return sum(head) / len(head), sum(tail) / len(tail)


def run_outcome(summary: dict) -> list[str]:
    """What a finished RL run did, in the lines ``train rl`` prints: the mean reward over the
    first and last (up to) 10 steps of ``summary["log"]`` (the step records of
    ``rl_summary.json``), and how many steps trained on nothing because every group's rewards
    were equal (``rollouts/in_loss_share`` 0: no spread, no advantage), which a flat reward
    alone does not tell."""
    log = summary.get("log") or []
    lines = []
    n = min(10, len(log))
    first, last = window_means(log, "reward/mean", n)
    if first is not None:
        steps = summary["steps"]
        lines.append(
            f"{steps} step{'' if steps == 1 else 's'} on {summary['questions']} questions (training took "
            f"{summary['train_seconds']} s); mean reward {first:.3f} over the first {n} steps, {last:.3f} over the "
            f"last {n}"
        )
    idle = sum(1 for rec in log if rec.get("rollouts/in_loss_share") == 0)
    if idle:
        lines.append(
            f"{idle} of {len(log)} step{'' if len(log) == 1 else 's'} trained on nothing: every group's rewards were "
            "equal (no spread, so no advantage); larger groups (--group-size) or items of moderate difficulty "
            "(--prefilter) give spread"
        )
    return lines


def plot_log(out: str | Path, png: str | Path | None = None, smooth: int = 5) -> Path:
    """Draw the curves of :data:`PLOTTED` (raw and a ``smooth``-step moving average) to
    ``png`` (default ``out/rl_curves.png``).

    Raises:
        InputFormatError: as :func:`read_log`; also when the log has no steps.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_log(out)
    if not records:
        raise InputFormatError(f"{out}: the RL step log is empty (no step finished yet)")
    png = Path(png) if png else (Path(out) if Path(out).is_dir() else Path(out).parent) / "rl_curves.png"
    if png.is_dir():
        png = png / "rl_curves.png"
    elif not png.suffix:
        png = png.with_suffix(".png")
    elif png.suffix.lower() not in (".png", ".pdf", ".svg", ".jpg"):
        raise InputFormatError(f"{png}: write the plot as .png, .pdf, .svg or .jpg")
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, (key, title) in zip(axes.flat, PLOTTED):
        pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        ax.set_title(title)
        ax.set_xlabel("step")
        if not pts:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            continue
        xs, ys = zip(*pts)
        ax.plot(xs, ys, ".", alpha=0.5)
        if len(ys) >= smooth > 1:
            avg = [sum(ys[i - smooth + 1 : i + 1]) / smooth for i in range(smooth - 1, len(ys))]
            ax.plot(xs[smooth - 1 :], avg, "-", label=f"{smooth}-step mean")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png


def reward_gain(rollouts_path: str | Path, window: int = 10, resamples: int = 2000, seed: int = 0) -> dict | None:
    """The training reward's change over an RL run: the mean reward of the rollouts of the
    last ``window`` steps minus that of the first ``window`` (halved when the run has fewer
    than ``2 * window`` steps), with a 95% percentile-bootstrap interval (rollouts resampled
    with replacement within each window, ``resamples`` times). Rollouts without a reward
    (ungraded) are left out.

    Args:
        rollouts_path: an RL run's ``rollouts.jsonl`` (records with ``step`` and ``reward``).

    Returns:
        ``{"steps", "window", "first", "last", "diff", "diff_ci95": [lo, hi],
        "reward_per_step": [...]}``, or ``None`` when the file is missing or has fewer than two
        steps with rewards.

    Raises:
        InputFormatError: a line is not a rollout record.
    """
    import numpy as np

    from websailor.jsonio import read_appended_jsonl

    path = Path(rollouts_path)
    if not path.is_file():
        return None
    by_step: dict[int, list[float]] = {}
    for _, rec in read_appended_jsonl(path, "a rollout record"):
        if rec.get("reward") is not None:
            by_step.setdefault(int(rec["step"]), []).append(float(rec["reward"]))
    steps = sorted(by_step)
    if len(steps) < 2:
        return None
    n = min(window, len(steps) // 2)
    head = np.array([r for s in steps[:n] for r in by_step[s]])
    tail = np.array([r for s in steps[-n:] for r in by_step[s]])
    rng = np.random.default_rng(seed)
    diffs = np.sort(
        rng.choice(tail, (resamples, len(tail))).mean(axis=1) - rng.choice(head, (resamples, len(head))).mean(axis=1)
    )
    return {
        "steps": len(steps),
        "window": n,
        "first": round(float(head.mean()), 4),
        "last": round(float(tail.mean()), 4),
        "diff": round(float(tail.mean() - head.mean()), 4),
        "diff_ci95": [round(float(diffs[int(0.025 * resamples)]), 4), round(float(diffs[int(0.975 * resamples)]), 4)],
        "reward_per_step": [round(sum(by_step[s]) / len(by_step[s]), 4) for s in steps],
    }


def item_reward_gain(rollouts_path: str | Path, resamples: int = 2000, seed: int = 0) -> dict | None:
    """The training reward's change item by item: for every item that an RL run visited at two
    steps or more, the mean reward of its last visit's rollouts minus that of its first, averaged
    over those items, with a 95% percentile-bootstrap interval (items resampled with
    replacement, ``resamples`` times).

    Each step samples a few items, whose difficulty varies far more than RL moves it (on the
    ladder's moderate items the SFT model solves 1 to 7 of 8), so :func:`reward_gain`'s
    windows also measure which items the steps happened to draw. Pairing each item with itself
    takes its difficulty out; a visit is one step's group of the item (rollouts without a reward
    left out).

    Args:
        rollouts_path: an RL run's ``rollouts.jsonl`` (records with ``step``, ``id`` and
            ``reward``).

    Returns:
        ``{"items", "visits", "first", "last", "diff", "diff_ci95": [lo, hi], "up", "down",
        "same", "distinct_items", "items_per_step"}``: the items seen twice or more and their
        visits in all, the mean reward of their first and of their last visits, the difference,
        how many items rose, fell or stayed, and (over every graded rollout) how many distinct
        items the run visited and the mean number of items a step visited; ``None`` when the
        file is missing or no item was visited twice.

    Raises:
        InputFormatError: a line is not a rollout record.
    """
    import numpy as np

    from websailor.jsonio import read_appended_jsonl

    path = Path(rollouts_path)
    if not path.is_file():
        return None
    visits: dict[str, dict[int, list[float]]] = {}
    for _, rec in read_appended_jsonl(path, "a rollout record"):
        if rec.get("reward") is not None:
            visits.setdefault(str(rec["id"]), {}).setdefault(int(rec["step"]), []).append(float(rec["reward"]))
    pairs = []
    for by_step in visits.values():
        if len(by_step) >= 2:
            first, last = by_step[min(by_step)], by_step[max(by_step)]
            pairs.append((sum(first) / len(first), sum(last) / len(last)))
    if not pairs:
        return None
    steps = {step for by_step in visits.values() for step in by_step}
    before, after = np.array(pairs).T
    diffs = after - before
    rng = np.random.default_rng(seed)
    boot = np.sort(rng.choice(diffs, (resamples, len(diffs))).mean(axis=1))
    return {
        "items": len(pairs),
        "visits": sum(len(v) for v in visits.values() if len(v) >= 2),
        "first": round(float(before.mean()), 4),
        "last": round(float(after.mean()), 4),
        "diff": round(float(diffs.mean()), 4),
        "diff_ci95": [round(float(boot[int(0.025 * resamples)]), 4), round(float(boot[int(0.975 * resamples)]), 4)],
        "up": int((diffs > 0).sum()),
        "down": int((diffs < 0).sum()),
        "same": int((diffs == 0).sum()),
        "distinct_items": len(visits),
        "items_per_step": round(sum(len(by_step) for by_step in visits.values()) / len(steps), 2),
    }


def tool_use_shift(rollouts_path: str | Path, window: int = 10) -> dict | None:
    """How an RL run's tool use moved: over the rollouts of the first and of the last ``window``
    steps (halved when the run has fewer than ``2 * window`` steps), the mean tool calls per
    rollout, those that repeat an earlier call of the rollout
    (:func:`websailor.agent.trajectory.repeated_tool_calls`), the share of rollouts that ended
    at the call limit, and the mean reward of the rollouts with a repeated call and of those
    without (what the advantages reinforced: repeats that paid early are learned even when they
    later run rollouts out of calls).

    Args:
        rollouts_path: an RL run's ``rollouts.jsonl`` (records with ``step``, ``tool_calls``,
            ``termination`` and ``reward``).

    Returns:
        ``{"steps", "window", "first": {...}, "last": {...}}``, each window ``{"rollouts",
        "tool_calls", "repeated_calls", "max_calls_share", "reward_with_repeats",
        "reward_without_repeats"}`` (a reward ``None`` where no rollout of the kind has one);
        ``None`` when the file is missing or has fewer than two steps.

    Raises:
        InputFormatError: a line is not a rollout record (an object with an integer ``step`` and
            a list of tool-call objects).
    """
    from websailor.agent.trajectory import repeated_tool_calls
    from websailor.jsonio import read_appended_jsonl

    path = Path(rollouts_path)
    if not path.is_file():
        return None
    by_step: dict[int, list[dict]] = {}
    for lineno, rec in read_appended_jsonl(path, "a rollout record"):
        calls = rec.get("tool_calls") or []
        step = rec.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or not isinstance(calls, list):
            raise InputFormatError(
                f"{path} line {lineno}: a rollout record has an integer step and a list of tool calls"
            )
        if not all(isinstance(c, dict) for c in calls):
            raise InputFormatError(f"{path} line {lineno}: a tool call of a rollout record is not an object")
        by_step.setdefault(step, []).append(
            {
                "calls": len(calls),
                "repeats": repeated_tool_calls(calls),
                "cut": rec.get("termination") == "max_calls",
                "reward": rec.get("reward"),
            }
        )
    steps = sorted(by_step)
    if len(steps) < 2:
        return None
    n = min(window, len(steps) // 2)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    def figures(rows: list[dict]) -> dict:
        return {
            "rollouts": len(rows),
            "tool_calls": mean([r["calls"] for r in rows]),
            "repeated_calls": mean([r["repeats"] for r in rows]),
            "max_calls_share": mean([float(r["cut"]) for r in rows]),
            "reward_with_repeats": mean([r["reward"] for r in rows if r["repeats"] and r["reward"] is not None]),
            "reward_without_repeats": mean([r["reward"] for r in rows if not r["repeats"] and r["reward"] is not None]),
        }

    return {
        "steps": len(steps),
        "window": n,
        "first": figures([r for s in steps[:n] for r in by_step[s]]),
        "last": figures([r for s in steps[-n:] for r in by_step[s]]),
    }
