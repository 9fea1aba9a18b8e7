"""Evaluating report tasks: run the agent on DeepResearch Bench tasks (or any report tasks),
score each report with RACE (:mod:`websailor.eval.race`) and FACT (:mod:`websailor.eval.fact`),
and write the figures. Every stage writes as it goes and resumes (docs/reports.md):

* ``trajectories.jsonl``: the rollouts (the batch runner skips finished ones);
* ``race.jsonl``: one :class:`~websailor.eval.race.RaceScore` a line, with ``key`` and ``report_key``;
* ``fact.jsonl``: one :class:`~websailor.eval.fact.FactResult` a line, with ``rollout``, ``key``
  and ``report_key``;
* ``summary.json`` and ``report.md``.

A stored score is reused only for the same report, judge and task (``key``), so a rerun rollout,
another judge or other criteria score again; ``report_key`` (:func:`report_key` of the report
alone) tells the viewer which report a line scored.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from websailor.errors import InputFormatError
from websailor.eval.fact import FactResult, check_report, fact_summary
from websailor.eval.fact_judge import FactJudge
from websailor.eval.race import RaceScore, race_score, race_summary
from websailor.eval.race_rubric import Rubric, derive_criteria
from websailor.eval.report_tasks import ReportTask
from websailor.jsonio import appending, read_appended_jsonl
from websailor.judge.reply_cache import ReplyCache
from websailor.log import get_logger
from websailor.models.base import ChatModel
from websailor.questions import Question
from websailor.reports.citations import report_body, visited_urls

logger = get_logger(__name__)

RACE_FILE = "race.jsonl"
FACT_FILE = "fact.jsonl"
#: fields every report trajectory record has
REPORT_FIELDS = ("id", "rollout", "question", "prediction", "termination")


def report_questions(tasks: Sequence[ReportTask]) -> list[Question]:
    """The tasks as the batch runner's questions: the prompt is the question, no gold answer."""
    return [Question(t.id, t.prompt, meta={"topic": t.topic, "language": t.language}) for t in tasks]


def report_key(rec: dict, *context: Any) -> str:
    """The key of a rollout's report and what its score depends on beside it (``context``: the
    judge, the task's criteria and reference, the environment): a stored score counts only when
    all of it is the same."""
    raw = json.dumps([rec.get("prediction"), rec.get("termination"), *context], ensure_ascii=False, default=str)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _task_digest(task: ReportTask) -> list:
    """What of a task a RACE score depends on: its prompt, weights, criteria and reference."""
    criteria = {d: [(c.criterion, c.explanation, c.weight) for c in cs] for d, cs in sorted(task.criteria.items())}
    return [task.prompt, sorted(task.weights.items()), criteria, task.reference]


def _number(x: Any, lo: float = -math.inf, hi: float = math.inf) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and lo <= x <= hi


def stored_race(rec: dict) -> RaceScore | None:
    """A ``race.jsonl`` line as a score, or ``None`` when it is not one a scorer could have
    written (a figure out of its range or not a number): it is scored again."""
    try:
        score = RaceScore.from_dict(rec)
    except InputFormatError:
        return None
    figures = [score.overall, *(v for d in score.dimensions.values() for v in (d.score,))]
    totals = [
        score.target_total,
        score.reference_total,
        *(v for d in score.dimensions.values() for v in (d.target, d.reference, d.weight)),
    ]
    if not all(x is None or _number(x, 0.0, 1.0) for x in figures) or not all(
        x is None or _number(x, 0.0, 10.0) for x in totals
    ):
        return None
    return score


def stored_fact(rec: dict) -> FactResult | None:
    """A ``fact.jsonl`` line as a result, or ``None`` when it is not one (scored again)."""
    try:
        return FactResult.from_dict(rec)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def read_report_trajectories(paths: Sequence[Path]) -> list[dict]:
    """The report trajectories of ``paths``: the latest record of each ``(id, rollout)``.

    Raises:
        InputFormatError: a missing file, a line that is not a trajectory record (the field
            named), a QA trajectory (``task`` is not ``report``: score it without ``--task
            report``), or no trajectories at all.
    """
    by_key: dict[tuple[str, int], dict] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputFormatError(f"trajectory file {path} does not exist or is not a file")
        for lineno, rec in read_appended_jsonl(path, "a trajectory record"):
            missing = [f for f in REPORT_FIELDS if f not in rec]
            if missing:
                raise InputFormatError(f"{path} line {lineno} is not a trajectory record: no {', '.join(missing)}")
            if rec.get("task", "qa") != "report":
                raise InputFormatError(
                    f"{path} line {lineno} is a QA trajectory, not a report (its task is {rec.get('task', 'qa')!r}): "
                    "score it without --task report"
                )
            if isinstance(rec["rollout"], bool) or not isinstance(rec["rollout"], int):
                raise InputFormatError(f"{path} line {lineno}: rollout must be an integer, got {rec['rollout']!r}")
            if not isinstance(rec["question"], str) or not isinstance(rec["prediction"], str | None):
                raise InputFormatError(
                    f"{path} line {lineno}: question must be text and prediction text or null, got "
                    f"{type(rec['question']).__name__} and {type(rec['prediction']).__name__}"
                )
            by_key[(str(rec["id"]), rec["rollout"])] = rec
    if not by_key:
        raise InputFormatError(f"no trajectories in {', '.join(map(str, paths))}")
    return list(by_key.values())


def task_of(rec: dict, tasks: dict[str, ReportTask]) -> ReportTask:
    """The task a record answers: the task file's by id (when its prompt is the record's
    question), else one made from the record (no criteria, no reference: RACE derives the
    criteria and scores absolutely, and says why)."""
    task = tasks.get(str(rec["id"]))
    if task is not None and task.prompt == rec["question"]:
        return task
    why = "not in the task file" if task is None else "the task file's prompt differs from the trajectory's"
    return ReportTask(
        str(rec["id"]),
        "",
        "",
        str(rec["question"]),
        missing=[f"criteria: task {why}", f"reference: task {why}"],
    )


@dataclass
class ScoredReports:
    """RACE and FACT of each scored rollout, and the rollouts left unscored with why."""

    race: list[RaceScore] = field(default_factory=list)
    fact: list[FactResult] = field(default_factory=list)
    unscored: Counter = field(default_factory=Counter)
    reused: int = 0
    #: judge calls spent deriving the criteria of tasks that had none (once per task)
    rubric_calls: int = 0


def _unscored_reason(rec: dict) -> str | None:
    from websailor.agent.trajectory import environment_failed

    if rec["termination"] == "model_error":
        return "model_error"
    try:
        return "environment" if environment_failed(rec) else None
    except ValueError:
        return "environment"


def score_reports(
    records: Sequence[dict],
    tasks: Sequence[ReportTask],
    judge: ChatModel,
    tools: Any,
    out_dir: Path,
    cache: Path | None = None,
    progress: bool = True,
    env: str = "",
) -> ScoredReports:
    """RACE and FACT for each report rollout of ``records``, appended to ``out_dir``'s
    :data:`RACE_FILE` and :data:`FACT_FILE` as each is scored; a rollout scored before (same
    :func:`report_key`: the same report, judge, and task criteria and reference for RACE, or
    environment ``env`` for FACT) is read back, not scored again; a stored line that is not a
    score is scored again, with a warning.

    Args:
        records: report trajectory records (:func:`read_report_trajectories`).
        tasks: the task file's tasks (criteria, weights, references), matched by id.
        judge: the judge model of both RACE and FACT (temperature 0).
        tools: the environment whose ``visit`` reads cited pages (a ToolEnvironment or its tools).
        out_dir: where the two files go.
        cache: SQLite file of the judges' replies (``None``: no cache).

    Returns:
        The scores, and the rollouts left unscored by reason (``model_error``: the agent's
        endpoint failed; ``environment``: its tools failed; rerun them).

    Raises:
        InvalidArgumentError: another process writes the files.
    """
    by_id = {t.id: t for t in tasks}
    result = ScoredReports()
    rubrics: dict[str, Rubric] = {}
    race_cache = ReplyCache(cache) if cache is not None else None
    fact_judge = FactJudge(judge, cache=cache.with_name(cache.stem + "_fact.sqlite") if cache else None)
    try:
        with (
            appending(out_dir / RACE_FILE, "a RACE score") as (race_fh, race_recs),
            appending(out_dir / FACT_FILE, "a FACT result") as (fact_fh, fact_recs),
        ):
            race_done, fact_done = _index(race_recs), _index(fact_recs)
            for rec in tqdm(records, desc="scoring reports", unit="report", disable=not progress):
                reason = _unscored_reason(rec)
                if reason:
                    result.unscored[reason] += 1
                    continue
                rid = (str(rec["id"]), rec["rollout"])
                task = task_of(rec, by_id)
                race_key = report_key(rec, judge.name, _task_digest(task))
                fact_key = report_key(rec, judge.name, env)
                stored = race_done.get(rid)
                race = stored_race(stored) if stored is not None and stored.get("key") == race_key else None
                if stored is not None and stored.get("key") == race_key and race is None:
                    logger.warning("%s: the stored RACE score of %s/%s is not a score; scoring again", RACE_FILE, *rid)
                if race is not None:
                    result.reused += 1
                else:
                    race = _race(judge, task, rec, rubrics, race_cache, result)
                    _append(race_fh, {**race.to_dict(), "key": race_key, "report_key": report_key(rec)})
                result.race.append(race)
                stored = fact_done.get(rid)
                fact = stored_fact(stored) if stored is not None and stored.get("key") == fact_key else None
                if fact is None:
                    visited = visited_urls(rec.get("tool_calls") or [])
                    fact = check_report(rec["prediction"], tools, fact_judge, task_id=task.id, visited=visited)
                    _append(
                        fact_fh,
                        {**fact.to_dict(), "rollout": rec["rollout"], "key": fact_key, "report_key": report_key(rec)},
                    )
                result.fact.append(fact)
    finally:
        fact_judge.close()
        if race_cache is not None:
            race_cache.close()
    return result


def _index(records: list[tuple[int, dict]]) -> dict[tuple[str, int], dict]:
    out = {}
    for _, rec in records:
        if rec.get("task_id") is not None and isinstance(rec.get("rollout"), int) and "key" in rec:
            out[(str(rec["task_id"]), rec["rollout"])] = rec
    return out


def _append(fh: Any, record: dict) -> None:
    fh.write(json.dumps(record, ensure_ascii=True) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _race(
    judge: ChatModel, task: ReportTask, rec: dict, rubrics: dict[str, Rubric], cache: Any, result: ScoredReports
) -> RaceScore:
    """RACE of one rollout; a task without criteria has them derived once for all its rollouts
    (not for an empty report, which scores 0 without a judge call)."""
    body = report_body(rec["prediction"])
    rubric = None
    if not task.criteria and body.strip():
        if task.id not in rubrics:
            rubrics[task.id] = derive_criteria(judge, task, cache=cache)
            result.rubric_calls += rubrics[task.id].judge_calls
        rubric = rubrics[task.id]
    return race_score(judge, task, body, rubric=rubric, cache=cache, rollout=rec["rollout"])


def report_summary(records: Sequence[dict], scored: ScoredReports, bench: str = "") -> dict:
    """The figures of a report evaluation: RACE (:func:`~websailor.eval.race.race_summary`),
    FACT (:func:`~websailor.eval.fact.fact_summary`), the rollouts' terminations, time and
    calls per report, judge calls per task, the citation problems the reports' parses found,
    and how many rollouts summarized their context."""
    n = len(records) or 1
    tasks = len({str(r["id"]) for r in records}) or 1
    problems: Counter = Counter()
    for r in records:
        parsed = r.get("report") if isinstance(r.get("report"), dict) else {}
        counts = parsed.get("counts") if isinstance(parsed.get("counts"), dict) else {}
        for key, value in counts.items():
            if key not in ("references", "cited_statements", "pairs") and _number(value, 0):
                problems[str(key)] += int(value)
        for p in parsed.get("problems") if isinstance(parsed.get("problems"), list) else []:
            problems[str(p)] += 1
    summaries = [
        s for r in records if isinstance(r.get("summaries"), list) for s in r["summaries"] if isinstance(s, dict)
    ]
    race_calls = sum(s.judge_calls for s in scored.race) + scored.rubric_calls
    fact_calls = sum(f.judge_calls for f in scored.fact)
    return {
        "bench": bench,
        "task": "report",
        "rollouts": len(records),
        "tasks": len({str(r["id"]) for r in records}),
        "terminations": dict(Counter(r["termination"] for r in records).most_common()),
        "unscored": dict(scored.unscored),
        "seconds_per_report": round(sum(_field(r, "timings", "total_s") for r in records) / n, 2),
        "model_calls_per_report": round(sum(_field(r, "num_model_calls") for r in records) / n, 2),
        "tool_calls_per_report": round(sum(_field(r, "num_tool_calls") for r in records) / n, 2),
        "summarized_rollouts": sum(
            isinstance(r.get("summaries"), list) and any(isinstance(s, dict) and s.get("text") for s in r["summaries"])
            for r in records
        ),
        "summaries": {
            "done": sum(bool(s.get("text")) for s in summaries),
            "failed": sum(not s.get("text") for s in summaries),
        },
        "citation_problems": dict(problems),
        "judge_calls_per_task": {"race": round(race_calls / tasks, 2), "fact": round(fact_calls / tasks, 2)},
        "race": race_summary(scored.race),
        "fact": fact_summary(scored.fact),
    }


def _field(rec: dict, *path: str) -> float:
    """A number of a record (``timings.total_s``, ``num_model_calls``), 0 when it is not one."""
    value: Any = rec
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if _number(value, 0) else 0.0


#: what ``report.md`` says of a figure no judge gave (no report scored, no citation judged)
NOT_JUDGED = "not judged"


def _f(x: float | None, pct: bool = True, unit: str = "") -> str:
    """A figure (``pct``: a fraction, shown x 100) with its ``unit``, or :data:`NOT_JUDGED`."""
    if x is None:
        return NOT_JUDGED
    return (f"{100 * x:.1f}" if pct else f"{x:.2f}") + unit


def _ci(x: float | None, ci: Any, unit: str = "") -> str:
    """A figure with its 95% interval when it has one (a single task has none)."""
    if x is None or not ci or ci[0] is None:
        return _f(x, unit=unit)
    return f"{_f(x, unit=unit)} [{_f(ci[0])}, {_f(ci[1])}]"


def to_markdown(s: dict) -> str:
    """The summary as a Markdown report: RACE by mode and dimension, FACT, and the run's figures."""
    lines = [f"# Report evaluation{': ' + s['bench'] if s.get('bench') else ''}", ""]
    lines.append(
        f"{s['rollouts']} reports on {s['tasks']} tasks; terminations: "
        + ", ".join(f"{k} {v}" for k, v in s["terminations"].items())
    )
    if s["unscored"]:
        lines.append("unscored (rerun them): " + ", ".join(f"{k} {v}" for k, v in s["unscored"].items()))
    lines += [
        "",
        "## RACE",
        "",
        "| mode | reports | tasks | overall (95% CI) | comprehensiveness | insight | instruction following | readability |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in ("relative", "absolute"):
        g = s["race"][mode]
        if not g["n"]:
            continue
        dims = g["dimensions"]
        lines.append(
            f"| {mode} | {g['n']} | {g['tasks']} | {_ci(g['overall'], g['overall_ci95'])} | "
            + " | ".join(
                _f(dims.get(d)) for d in ("comprehensiveness", "insight", "instruction_following", "readability")
            )
            + " |"
        )
    lines += [
        "",
        "Relative: target / (target + reference) x 100 (50: as good as the reference). Absolute (no reference "
        "report): the weighted criterion score / 10 x 100; never averaged with relative scores.",
        "",
        "## FACT",
        "",
    ]
    f = s["fact"]
    pairs = f["pairs"]
    accuracy = (
        f"{_ci(f['citation_accuracy'], f['citation_accuracy_ci'], '%')} over {f['tasks_with_accuracy']} reports "
        f"with a judged citation (pooled: {_f(f['pooled_citation_accuracy'], unit='%')})"
        if f["citation_accuracy"] is not None
        else f"{NOT_JUDGED} (no report has a judged citation)"
    )
    lines += [
        f"- citation accuracy: {accuracy}",
        f"- effective citations per report: {_f(f['effective_citations'], pct=False)}",
        f"- pairs: {pairs['total']} (supported {pairs['supported']}, unsupported {pairs['unsupported']}, "
        f"unreachable {pairs['unreachable']}, unjudged {pairs['unjudged']}); unusable references {f['unusable']}",
        "",
        "## The run",
        "",
        f"- per report: {s['seconds_per_report']} s, {s['model_calls_per_report']} model calls, "
        f"{s['tool_calls_per_report']} tool calls",
        f"- judge calls per task: RACE {s['judge_calls_per_task']['race']}, FACT {s['judge_calls_per_task']['fact']}",
        f"- context summaries: {s['summarized_rollouts']} of {s['rollouts']} rollouts summarized "
        f"({s['summaries']['done']} summaries, {s['summaries']['failed']} failed)",
        "- citation problems: "
        + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s["citation_problems"].items() if v) or "none"),
    ]
    return "\n".join(lines) + "\n"


def write_report_summary(records: Sequence[dict], scored: ScoredReports, out_dir: Path, bench: str = "") -> dict:
    """Write ``summary.json`` and ``report.md`` into ``out_dir``; return the summary."""
    summary = report_summary(records, scored, bench)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(to_markdown(summary), encoding="utf-8")
    return summary


def evaluate_reports(
    tasks: Sequence[ReportTask],
    agent: Any,
    judge: ChatModel,
    out_dir: Path,
    rollouts: int = 1,
    concurrency: int = 4,
    bench: str = "",
    cache: Path | None = None,
    progress: bool = True,
) -> dict:
    """Run the agent (its config's task must be ``report``) ``rollouts`` times on each task,
    score every report with RACE and FACT (cited pages read through the agent's own tools) and
    write the summary; each stage resumes.

    Raises:
        InvalidArgumentError: the agent is not set for reports, or another process writes the files.
    """
    from websailor.agent.runner import run_questions
    from websailor.errors import InvalidArgumentError

    if agent.config.task != "report":
        raise InvalidArgumentError("evaluate_reports needs an agent whose task is report (AgentConfig(task='report'))")
    out_dir.mkdir(parents=True, exist_ok=True)
    traj_path = out_dir / "trajectories.jsonl"
    t0 = time.perf_counter()
    run = run_questions(
        agent, report_questions(tasks), traj_path, rollouts=rollouts, concurrency=concurrency, progress=progress
    )
    logger.info("%d reports written (%d already there) in %.1f s", run.finished, run.skipped, time.perf_counter() - t0)
    wanted = {(t.id, t.prompt) for t in tasks}
    records = [
        r
        for r in read_report_trajectories([traj_path])
        if (str(r["id"]), r["question"]) in wanted and r["rollout"] < rollouts
    ]
    scored = score_reports(
        records, tasks, judge, agent.tools, out_dir, cache=cache, progress=progress, env=getattr(agent, "env", "")
    )
    return write_report_summary(records, scored, out_dir, bench)
