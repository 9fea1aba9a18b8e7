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

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websailor.agent.loop import Agent
from websailor.agent.runner import stream_rollouts
from websailor.errors import InputFormatError, ModelError
from websailor.jsonio import appending
from websailor.judge import exact_match
from websailor.questions import Question

if TYPE_CHECKING:
    from websailor.agent.loop import AgentConfig
    from websailor.tools.environment import EnvSpec

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
    """Rates items with a reference agent. Use it as a context manager (or call
    :meth:`close`): it holds the rollouts file open and locked.

    Rollouts already in the file are reused only when they answered the same question text
    with the same model; rollouts that ended in ``model_error`` are never reused, and an item
    whose rollouts hit model errors is not rated (the run stops, so that a dead endpoint
    cannot make every item look hard).

    Args:
        agent: the reference agent (its model and tools).
        rollouts_path: JSONL the rollouts are appended to.
        config: k, keep, concurrency.
        judge: grading function (default: normalized exact match with aliases).

    Raises:
        InputFormatError: ``rollouts_path`` holds something other than trajectory records.
        InvalidArgumentError: another process is writing ``rollouts_path``.
    """

    def __init__(
        self,
        agent: Agent,
        rollouts_path: str | Path,
        config: DifficultyConfig | None = None,
        judge: Judge = exact_match,
    ) -> None:
        self.agent = agent
        self.path = Path(rollouts_path)
        self.config = config or DifficultyConfig()
        self.judge = judge
        self._stack = ExitStack()
        self._fh, records = self._stack.enter_context(appending(self.path, "a trajectory record"))
        self._done: dict[tuple[str, int], dict] = {}
        for lineno, rec in records:
            if not {"id", "rollout", "question", "prediction", "termination"} <= rec.keys():
                self.close()
                raise InputFormatError(f"{self.path} line {lineno} is not a trajectory record; use another output")
            if rec["termination"] != "model_error":
                self._done[(str(rec["id"]), int(rec["rollout"]))] = rec

    def close(self) -> None:
        """Release the rollouts file."""
        self._stack.close()

    def __enter__(self) -> DifficultyFilter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reusable(self, qid: str, r: int, question: str) -> bool:
        rec = self._done.get((qid, r))
        return rec is not None and rec["question"] == question and rec.get("model") == self.agent.model.name

    def rate(self, item: dict) -> dict:
        """Run the missing rollouts of ``item`` (needs ``id``, ``question``, ``answer``,
        optional ``aliases``) and return the item's ``difficulty`` record: ``{"k", "correct",
        "model"}``; :func:`verdict` says whether to keep it.

        Raises:
            ModelError: some rollouts ended in a model error (the endpoint is down or
                failing); they are recorded but not counted, and are rerun on resume.
        """
        k = self.config.k
        q = Question(str(item["id"]), item["question"], answer=item["answer"])
        todo = [(q, r) for r in range(k) if not self._reusable(q.id, r, q.question)]
        errors = []
        for traj in stream_rollouts(self.agent, todo, self._fh, self.config.concurrency):
            if traj.termination == "model_error":
                errors.append(traj.error or "model error")
            else:
                self._done[(traj.id, traj.rollout)] = {
                    "question": traj.question,
                    "prediction": traj.prediction,
                    "model": traj.model,
                }
        if errors:
            raise ModelError(
                f"the reference agent's model failed on {len(errors)} of {len(todo)} rollouts of item "
                f"{q.id} ({errors[0]}); no item can be rated until it answers. Rerun the same command "
                "once it works: finished items and rollouts are kept"
            )
        aliases = list(item.get("aliases") or [])
        correct = sum(bool(self.judge(self._done[(q.id, r)]["prediction"], item["answer"], aliases)) for r in range(k))
        return {"k": k, "correct": correct, "model": self.agent.model.name}

    def keeps(self, difficulty: dict) -> str:
        """:func:`verdict` of a record returned by :meth:`rate` under this filter's ``keep``."""
        return verdict(difficulty["correct"], difficulty["k"], self.config.keep)


def rollouts_file(out: str | Path) -> Path:
    """Where ``synth --filter-with`` keeps the reference agent's rollouts: ``qa.jsonl`` ->
    ``qa.rollouts.jsonl``."""
    out = Path(out)
    return out.with_name(out.stem + ".rollouts.jsonl")


@contextmanager
def open_difficulty_filter(
    out: str | Path,
    model: str,
    env: EnvSpec | None = None,
    config: DifficultyConfig | None = None,
    agent_config: AgentConfig | None = None,
    engine: str | None = None,
    rollouts: int = 0,
) -> Iterator[DifficultyFilter]:
    """The difficulty filter of ``synth --filter-with``: a reference agent of ``model`` (a
    spec) with the tools of ``env`` (default: local), rolling out into :func:`rollouts_file`
    of ``out``; the model, the tools and the rollouts file are closed on exit. ``engine`` and
    ``rollouts`` (about items x k) choose the engine of a local model
    (:func:`websailor.agent.session.open_agent`).

    Raises:
        ConfigError: a bad model spec or environment.
        InvalidArgumentError: another process is writing the rollouts file.
    """
    from websailor.agent.session import open_agent

    with (
        open_agent(model, env, agent_config, engine=engine, rollouts=rollouts) as session,
        DifficultyFilter(session.agent, rollouts_file(out), config) as rater,
    ):
        yield rater
