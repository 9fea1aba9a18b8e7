"""``websailor eval``: run an agent k times on a benchmark, grade, report. Every stage writes
as it goes and resumes: ``trajectories.jsonl`` (the batch runner skips finished rollouts),
``scores.jsonl`` (grades of the same judge are reused), then ``summary.json``,
``report.md`` and the plots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from websailor.agent.loop import Agent
from websailor.agent.runner import run_questions
from websailor.agent.trajectory import env_failed_calls
from websailor.eval.report import write_report
from websailor.eval.scoring import read_trajectories, score_trajectories
from websailor.judge import Judge
from websailor.log import get_logger
from websailor.questions import Question, question_level

logger = get_logger(__name__)


@dataclass
class EvalConfig:
    """``rollouts``: k runs per question; ``concurrency``: rollouts at once;
    ``max_env_failures``: tool calls per rollout the environment may degrade (a failed search,
    an unreachable tool server) and the rollout still be graded; beyond it the rollout is
    ungraded and rerun (default 0: any such call)."""

    rollouts: int = 3
    concurrency: int = 8
    max_env_failures: int = 0

    def __post_init__(self) -> None:
        if self.rollouts < 1 or self.concurrency < 1:
            raise ValueError("rollouts and concurrency must be at least 1")
        if (
            isinstance(self.max_env_failures, bool)
            or not isinstance(self.max_env_failures, int)
            or self.max_env_failures < 0
        ):
            raise ValueError(f"max_env_failures must be an integer of at least 0, got {self.max_env_failures!r}")


def evaluate(
    items: list[Question],
    agent: Agent,
    judge: Judge,
    out_dir: str | Path,
    cfg: EvalConfig | None = None,
    bench: str = "",
    progress: bool = True,
) -> dict:
    """Run, grade and report; returns the summary (see :func:`websailor.eval.report.summarize`).

    The gold answer travels in each trajectory (``answer``: ``{"answer", "aliases",
    "parts"}``), so ``websailor score`` can regrade the file alone. Only the trajectories of
    ``items`` (same id and question text, rollout below k) are graded, so a file left by a
    larger run does not leak into a smaller one; a stored gold answer that differs from the
    benchmark's is replaced by it, and so is the question's level (the figures come by level
    when the questions have levels). Rollouts that ended in a model error, and rollouts in
    which the environment degraded more than ``cfg.max_env_failures`` tool calls, are rerun by
    a resumed run and are ungraded until then.
    """
    cfg = cfg or EvalConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    traj_path = out / "trajectories.jsonl"
    questions = [it.with_gold_record() for it in items]
    summary = run_questions(
        agent,
        questions,
        traj_path,
        rollouts=cfg.rollouts,
        concurrency=cfg.concurrency,
        progress=progress,
        max_env_failures=cfg.max_env_failures,
    )
    logger.info("%d rollouts run (%d already done) in %.1f s", summary.finished, summary.skipped, summary.seconds)
    by_id = {it.id: it for it in items}
    records = []
    changed = 0
    for rec in read_trajectories([traj_path]):
        it = by_id.get(str(rec["id"]))
        if it is None or rec["rollout"] >= cfg.rollouts or rec["question"] != it.question:
            continue  # another run's rollout (a larger --limit or --rollouts, an edited question)
        gold = it.gold.to_dict() if it.gold is not None else None  # a question without one: ungraded
        if rec["answer"] != gold:  # the benchmark's answer was corrected: grade against the current one
            changed += 1
            rec = {**rec, "answer": gold}
        level = question_level(it)
        if rec.get("level") != level:  # the benchmark's level (rollouts run before it had one)
            rec = {**rec, "level": level}
        records.append(rec)
    if changed:
        logger.warning(
            "%d stored rollouts carry another gold answer than the benchmark now has; they are graded "
            "against the benchmark's",
            changed,
        )
    failed = sum(r["termination"] == "model_error" for r in records)
    if failed:
        logger.warning(
            "%d rollouts ended in a model error: they are ungraded (not counted wrong); rerun the same "
            "command once the model answers to run them again",
            failed,
        )
    env_failed = sum(env_failed_calls(r) > cfg.max_env_failures for r in records)
    if env_failed:
        logger.warning(
            "%d rollouts had more than %d tool calls degraded by the environment (failed providers, an "
            "unreachable tool server): they are ungraded (not counted wrong); rerun the same command once "
            "the environment answers to run them again",
            env_failed,
            cfg.max_env_failures,
        )
    scores = score_trajectories(
        records, judge, out / "scores.jsonl", progress=progress, max_env_failures=cfg.max_env_failures
    )
    return write_report(scores, out, bench, max_env_failures=cfg.max_env_failures)
