"""Difficulty filter (SailorFog-QA-V2): run a reference agent ``k`` times on each item, count
the correct answers and keep the items in the wanted band.

WebSailor (arXiv 2507.02592, section 4) and WebSailor-V2 (arXiv 2509.13305, section 3) keep
training items that a reference agent solves sometimes but not always, and test items that it
never solves. Here: ``moderate`` keeps ``0 < correct < k``; ``hard`` keeps ``correct == 0``;
``all`` keeps everything and only records the count. Every rollout is appended to a
trajectories file as it finishes (the raw material of rejection-sampled SFT data), so a killed
run resumes without repeating a rollout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websailor.agent.loop import Agent
from websailor.agent.runner import Question, done_rollouts, stream_rollouts
from websailor.jsonio import read_appended_jsonl
from websailor.judge import exact_match

KEEP = ("moderate", "hard", "all")
#: grades a prediction against the item's answer and aliases
Judge = Callable[[str | None, Any, list[str]], bool]


@dataclass
class DifficultyConfig:
    """``k`` rollouts per item, run by ``concurrency`` threads; ``keep`` one of :data:`KEEP`."""

    k: int = 8
    keep: str = "moderate"
    concurrency: int = 8

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be at least 1, got {self.k}")
        if self.keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}, got {self.keep!r}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")


def verdict(correct: int, k: int, keep: str) -> str:
    """``"kept"``, or why not: ``"too_easy"`` (moderate and all correct, or hard and some
    correct) or ``"too_hard"`` (moderate and none correct)."""
    if keep == "all":
        return "kept"
    if keep == "hard":
        return "kept" if correct == 0 else "too_easy"
    if correct == 0:
        return "too_hard"
    return "too_easy" if correct == k else "kept"


class DifficultyFilter:
    """Rates items with a reference agent.

    Args:
        agent: the reference agent (its model and tools).
        rollouts_path: JSONL the rollouts are appended to; rollouts already there (same item
            id and rollout index) are reused, not rerun.
        config: k, keep, concurrency.
        judge: grading function (default: normalized exact match with aliases).

    Raises:
        InputFormatError: ``rollouts_path`` holds something other than trajectory records.
    """

    def __init__(self, agent: Agent, rollouts_path: str | Path, config: DifficultyConfig | None = None,
                 judge: Judge = exact_match) -> None:
        self.agent = agent
        self.path = Path(rollouts_path)
        self.config = config or DifficultyConfig()
        self.judge = judge
        done_rollouts(self.path)  # validates the file (and repairs a partial last line)
        self._predictions: dict[tuple[str, int], str | None] = {
            (str(rec["id"]), int(rec["rollout"])): rec.get("prediction")
            for _, rec in read_appended_jsonl(self.path, "a trajectory record")}

    def rate(self, item: dict) -> dict:
        """Run the missing rollouts of ``item`` (needs ``id``, ``question``, ``answer``,
        optional ``aliases``) and return the item's ``difficulty`` record: ``{"k", "correct",
        "model"}``; :func:`verdict` says whether to keep it."""
        k = self.config.k
        q = Question(str(item["id"]), item["question"], item["answer"])
        todo = [(q, r) for r in range(k) if (q.id, r) not in self._predictions]
        for traj in stream_rollouts(self.agent, todo, self.path, self.config.concurrency):
            self._predictions[(traj.id, traj.rollout)] = traj.prediction
        aliases = list(item.get("aliases") or [])
        correct = sum(bool(self.judge(self._predictions[(q.id, r)], item["answer"], aliases)) for r in range(k))
        return {"k": k, "correct": correct, "model": self.agent.model.name}

    def keeps(self, difficulty: dict) -> str:
        """:func:`verdict` of a record returned by :meth:`rate` under this filter's ``keep``."""
        return verdict(difficulty["correct"], difficulty["k"], self.config.keep)
