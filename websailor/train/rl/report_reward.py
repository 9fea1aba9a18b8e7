"""RL on reports: the training tasks and the reward. ``train rl --task report`` trains report
writing with the same V2/DUPO machinery as QA; a rollout's reward is its report's RACE score
(:func:`websailor.eval.race.race_score`: relative to the task's reference report when it has
one, else absolute), on the task file's criteria, a rubric the user gives, or criteria the judge
derives once per task (the way DR Tulu trains report writing with rubric rewards).

Token-exact RL needs each rollout to be one sequence, so RL rollouts never summarize their
context (:func:`websailor.train.rollout_tokens.rollout_tokens` refuses a summarized one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from websailor.errors import ConfigError, InputFormatError
from websailor.eval.race import race_score
from websailor.eval.race_rubric import Rubric, derive_criteria, parse_rubric
from websailor.eval.report_tasks import ReportTask, load_report_tasks
from websailor.judge.base import Case, Grade
from websailor.judge.reply_cache import ReplyCache
from websailor.log import get_logger
from websailor.models.base import ChatModel
from websailor.questions import Question
from websailor.reports.citations import report_body

logger = get_logger(__name__)


def report_training_tasks(source: str | Path, language: str | None = None) -> tuple[list[Question], list[ReportTask]]:
    """The report tasks of ``source`` (DeepResearch Bench's layout, :func:`load_report_tasks`) as
    the trainer's questions (the prompt, no gold answer), and the tasks themselves.

    Raises:
        InputFormatError: no tasks, a file in another layout, or two tasks with one prompt
            (the trainer hands prompts back as text only).
    """
    tasks = load_report_tasks(source, language)
    if not tasks:
        raise InputFormatError(f"{source}: no report tasks to train on")
    seen: dict[str, str] = {}
    for t in tasks:
        if seen.setdefault(t.prompt, t.id) != t.id:
            raise InputFormatError(f"{source}: tasks {seen[t.prompt]} and {t.id} have the same prompt; remove one")
    return [Question(t.id, t.prompt, meta={"topic": t.topic, "language": t.language}) for t in tasks], tasks


def read_rubric(path: str | Path) -> Rubric:
    """A user's rubric file: one JSON object in the layout of the benchmark's criteria
    (``dimension_weight`` and ``criterions`` or ``criteria``), used for every task.

    Raises:
        ConfigError: a missing or unreadable file, or a rubric without usable criteria for all
            four dimensions (the reason named).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"rubric {p}: cannot be read ({type(e).__name__}: {e})") from None
    rubric, error = parse_rubric(text)
    if rubric is None:
        raise ConfigError(
            f'rubric {p} is not usable: {error}; expected {{"dimension_weight": {{dimension: weight}}, '
            '"criterions": {dimension: [{"criterion", "explanation", "weight"}]}} over comprehensiveness, '
            "insight, instruction_following and readability"
        )
    rubric.source = "rubric"
    return rubric


class ReportJudge:
    """The judge of report rollouts in RL: a :class:`Grade` per case whose ``score`` is the
    report's RACE score in [0, 1] (``correct``: the score is at least 0.5, as good as the
    reference or better; ``None`` when the report could not be scored, so it earns no reward).

    Args:
        model: the judge model (temperature 0).
        tasks: the training tasks (criteria, weights, reference), matched to cases by prompt.
        rubric: criteria for every task instead of the task file's (``None``: the task's, or
            derived by the judge once per task when it has none).
        cache: SQLite file of the judge's replies (a resumed run asks nothing twice).
    """

    #: the rollout function rewards the score, not the 0/1 verdict
    scores = True

    def __init__(
        self, model: ChatModel, tasks: Sequence[ReportTask], rubric: Rubric | None = None, cache: Path | None = None
    ) -> None:
        self.model = model
        self.name = f"race:{model.name}"
        self.tasks = {t.prompt: t for t in tasks}
        self.rubric = rubric
        self.cache = ReplyCache(cache) if cache is not None else None
        self._derived: dict[str, Rubric] = {}

    def _rubric(self, task: ReportTask) -> Rubric | None:
        if self.rubric is not None:
            return self.rubric
        if task.criteria:
            return None  # race_score reads the task's own
        if task.id not in self._derived:
            self._derived[task.id] = derive_criteria(self.model, task, cache=self.cache)
        return self._derived[task.id]

    def grade(self, cases: Sequence[Case]) -> list[Grade]:
        """One grade per case, in order; never raises for a failing judge (ungraded instead)."""
        out = []
        for c in cases:
            task = self.tasks.get(c.question)
            if task is None:
                out.append(Grade(None, None, error="not one of the training tasks"))
                continue
            body = report_body(c.prediction)  # an empty report scores 0 without deriving criteria first
            rubric = self._rubric(task) if body.strip() else self.rubric
            score = race_score(self.model, task, body, rubric=rubric, cache=self.cache)
            if score.overall is None:
                out.append(Grade(None, None, error="; ".join(score.problems) or "no RACE score"))
            else:
                reason = f"RACE {score.mode} {score.overall:.3f}"
                out.append(Grade(score.overall >= 0.5, score.overall, reasoning=reason))
        return out

    def close(self) -> None:
        """Close the reply cache and the judge model."""
        if self.cache is not None:
            self.cache.close()
        self.model.close()
