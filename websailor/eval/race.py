"""RACE: DeepResearch Bench's report score (Du et al., arXiv 2506.11763, section 3.1), with an
LLM judge.

A report written for a research task is scored on task-specific criteria grouped in four
dimensions (:data:`~websailor.eval.report_tasks.DIMENSIONS`), each dimension with a task-specific
weight and each criterion with a weight within its dimension. One judge call scores, on every
criterion, both the target report and the task's reference report from 0 to 10 (each with a
short reason). Then, for each report,

* a dimension's score is the criterion-weighted mean of its criteria's scores (0..10);
* the report's total is the dimension-weighted sum of its dimension scores (0..10);

and the *relative* scores are ``target / (target + reference)``: overall from the totals, and per
dimension from the dimension scores (0..1; 0.5 means as good as the reference). A task without a
reference report is scored *absolutely*: the target's weighted score divided by 10 (0..1), with
``mode="absolute"``, so that the two kinds are never averaged together.

A task without criteria (a task file without its criteria entry) gets them from the judge
(:func:`~websailor.eval.race_rubric.derive_criteria`), as the benchmark derives them offline. Bad input is scored as far as
it can be, never a crash, with each reason in :attr:`RaceScore.problems`: an empty report scores 0
without a judge call; criteria the judge skipped, or scored with something other than a number
from 0 to 10, are left out of the weighted means; a dimension left without a scored criterion is
``None`` and left out of the totals (the other dimensions' weights renormalized); a judge that
never answers usable scores gives ``overall=None``.

Judge replies are cached in SQLite (:class:`~websailor.eval.race_rubric.ReplyCache`) by judge model and prompt text, so that
re-scoring costs no judge call.

Where this differs from the benchmark's scripts (``deepresearch_bench_race.py``,
``utils/score_calculator.py``, ``utils/generate_criteria.py``): the prompts are our own; criteria
are derived in one call at temperature 0 (the benchmark averages five samples of the dimension
weights and asks for each dimension's criteria separately); the judge names each criterion by an
id, and an entry it does not name is ignored (the benchmark matches criterion text loosely and
gives an unmatched entry the dimension's mean weight); a dimension without a scored criterion is
left out with the weights renormalized (the benchmark asks again until every dimension is there,
and would count a dimension without a match as 0); reports are not cleaned of citations by an
LLM first (the caller strips citation markers and reference lists, as the benchmark's cleaning
step does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.race_rubric import (
    DIMENSION_MEANING,
    RACE_MAX_TOKENS,
    ReplyCache,
    Rubric,
    ask,
    derive_criteria,
    opened,
    task_rubric,
)
from websailor.eval.report_tasks import DIMENSIONS, Criterion, ReportTask
from websailor.jsonio import load_lenient_value
from websailor.log import get_logger
from websailor.models.base import ChatModel

logger = get_logger(__name__)


#: the score range the judge is asked for (per criterion and per report)
MAX_SCORE = 10.0

SCORE_PROMPT = """You are marking {what} written in answer to the research task below, one criterion at a time.

<task>
{task}
</task>

{reports}

The criteria are grouped by dimension; each has an id, a title and what it asks for:
{criteria}

For every criterion, read what it asks for, {compare}, then give {give} a score from 0 to 10 (decimals allowed): 0 when the criterion is not addressed at all, 5 when it is met adequately but with clear gaps, 10 when it is met fully and nothing of substance is missing. Mark on the content against the criterion only: {fair}

Reply with one JSON object and nothing else, with one entry per criterion id, in the order given:
{{"scores": [{{"id": "C1", "reason": "<one or two sentences{reason_on}>", {layout}}}, ...]}}"""


# ----------------------------------------------------------------------------- scoring


@dataclass
class DimensionScore:
    """One dimension of a :class:`RaceScore`. ``weight``: the dimension's weight in the rubric
    (0..1; ``None`` when no rubric was needed, as for an empty report); ``target`` and
    ``reference``: each report's criterion-weighted mean (0..10; ``reference`` is ``None`` in
    absolute mode); ``score``: ``target / (target + reference)`` (relative) or ``target / 10``
    (absolute), 0..1; all three ``None`` when no criterion of the dimension was scored."""

    weight: float | None
    target: float | None = None
    reference: float | None = None
    score: float | None = None


@dataclass
class CriterionScore:
    """One criterion as scored: its id in the judge's prompt (``C1``...), dimension, title,
    weight within the dimension (normalized), each report's score (0..10; ``None`` when the
    judge gave none usable) and the judge's reason."""

    id: str
    dimension: str
    criterion: str
    weight: float
    target: float | None = None
    reference: float | None = None
    reason: str | None = None


@dataclass
class RaceScore:
    """The RACE score of one report (one rollout of one task).

    ``mode``: ``"relative"`` (against the task's reference report) or ``"absolute"`` (no
    reference: the target's weighted score / 10); ``overall``: 0..1, ``None`` when nothing could
    be scored; ``target_total``, ``reference_total``: the dimension-weighted totals (0..10)
    over the dimensions scored; ``criteria_source``: ``"task"`` (the task file's),
    ``"derived"`` (the judge's) or ``"none"``; ``judge``: the judge model's name;
    ``judge_calls``: requests sent to the judge for this score (derivation included when
    :func:`race_score` derived the criteria), failed ones included; ``cache_hits``: judge
    replies taken from the cache instead; ``problems``: why anything was scored only in part,
    one reason each."""

    task_id: str
    mode: str
    overall: float | None
    dimensions: dict[str, DimensionScore]
    criteria: list[CriterionScore] = field(default_factory=list)
    criteria_source: str = "none"
    judge: str = ""
    rollout: int = 0
    target_total: float | None = None
    reference_total: float | None = None
    judge_calls: int = 0
    cache_hits: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def cached(self) -> bool:
        """Whether the score came from the cache alone (no judge call)."""
        return self.cache_hits > 0 and self.judge_calls == 0

    def to_dict(self) -> dict:
        """A JSON-ready dict (one line of a scores file per task id and rollout)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RaceScore:
        """The inverse of :meth:`to_dict`.

        Raises:
            InputFormatError: ``data`` is not a RACE score record (a field missing or of the
                wrong kind), with the reason.
        """
        try:
            dims = {str(d): DimensionScore(**v) for d, v in data["dimensions"].items()}
            crits = [CriterionScore(**c) for c in data.get("criteria", [])]
            rest = {k: data[k] for k in ("criteria_source", "judge", "rollout", "target_total", "reference_total",
                                         "judge_calls", "cache_hits", "problems") if k in data}  # fmt: skip
            score = cls(str(data["task_id"]), str(data["mode"]), data["overall"], dims, crits, **rest)
        except (KeyError, TypeError, AttributeError) as e:
            raise InputFormatError(f"not a RACE score record ({type(e).__name__}: {e})") from None
        if score.mode not in ("relative", "absolute"):
            raise InputFormatError(f"not a RACE score record: mode {score.mode!r} is neither relative nor absolute")
        return score


def _score_value(value: Any) -> float | None:
    """A judge's score as a number, or ``None`` when it is not one (numeric strings count)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _body(text: str) -> str:
    """A report's text for the prompt, its own ``<report_N>`` tags defused (a report cannot close
    its block and write outside it)."""
    return re.sub(r"<(\s*/?\s*report_\d+\s*)>", lambda m: f"<\u200b{m.group(1)}>", text.strip(), flags=re.I)


def _prompt(task: ReportTask, report: str, reference: str | None, ids: list[tuple[str, str, Criterion]]) -> str:
    """The scoring prompt: the task, the report (and the reference), the criteria by id with
    their explanations, grouped by dimension, without weights."""
    groups = []
    for dim in DIMENSIONS:
        lines = [f"{cid}. {c.criterion}: {c.explanation}".rstrip(": ") for cid, d, c in ids if d == dim]
        if lines:
            groups.append(f"## {dim} ({DIMENSION_MEANING[dim]})\n" + "\n".join(lines))
    if reference is None:
        reports = f"<report_1>\n{_body(report)}\n</report_1>"
        return SCORE_PROMPT.format(
            what="a report",
            task=task.prompt.strip(),
            reports=reports,
            criteria="\n\n".join(groups),
            compare="weigh how far the report meets it",
            give="the report",
            fair="length for its own sake earns nothing.",
            reason_on="",
            layout='"report_1": <score>',
        )
    reports = f"<report_1>\n{_body(report)}\n</report_1>\n\n<report_2>\n{_body(reference)}\n</report_2>"
    return SCORE_PROMPT.format(
        what="two reports",
        task=task.prompt.strip(),
        reports=reports,
        criteria="\n\n".join(groups),
        compare="compare how far each report meets it",
        give="each report",
        fair="neither length for its own sake nor the order in which the reports appear earns anything.",
        reason_on=" comparing the two reports on this criterion",
        layout='"report_1": <score>, "report_2": <score>',
    )


def _items(obj: dict) -> list[dict]:
    """The per-criterion entries of a scoring reply, in the layouts judges write:

    * ``{"scores": [...]}``, the prompt's (a bare list of the entries is read as this);
    * entries grouped in lists by dimension: ``{"insight": [...], ...}``;
    * ``{"scores": {...}}``, a mapping keyed by criterion (``{"C1": {"report_1": 7, ...}}``: the
      key names the entry, unless the entry names itself) or by dimension (each a list of
      entries, or such a mapping of its criteria).

    An entry that is not an object (``{"scores": {"C1": 7}}``: which report's score?) is none."""
    scores = obj.get("scores")
    if isinstance(scores, list):
        return [x for x in scores if isinstance(x, dict)]
    if isinstance(scores, dict):
        return _keyed_items(scores)
    return [x for v in obj.values() if isinstance(v, list) for x in v if isinstance(x, dict)]


def _keyed_items(scores: dict, grouped: bool = True) -> list[dict]:
    """The entries of ``{"scores": {...}}`` (see :func:`_items`); ``grouped``: a key may still
    be a dimension (one level only)."""
    out: list[dict] = []
    for key, value in scores.items():
        if isinstance(value, list):  # a dimension's entries
            out += [x for x in value if isinstance(x, dict)]
        elif isinstance(value, dict) and grouped and value and all(isinstance(v, dict) for v in value.values()):
            out += _keyed_items(value, grouped=False)  # a dimension's criteria, keyed
        elif isinstance(value, dict):  # one criterion, named by its id or its title
            out.append({"id": key, "criterion": key, **value})
    return out


def _scores_parser(
    ids: list[tuple[str, str, Criterion]], relative: bool
) -> Callable[[str], tuple[tuple[dict, list[str]] | None, str | None]]:
    """A parser of the judge's scoring reply: ``({criterion id: (target, reference, reason)},
    problems)``, or ``None`` with the reason when the reply holds no usable score at all."""
    by_id = {cid: (d, c) for cid, d, c in ids}
    titles: dict[str, list[str]] = {}
    for cid, _, c in ids:
        titles.setdefault(c.criterion.strip().casefold(), []).append(cid)

    def which(item: dict) -> str | None:
        raw = item.get("id")
        if raw is not None and not isinstance(raw, bool):
            key = str(raw).strip().upper().lstrip("#")
            key = "C" + key if key.isdigit() else key
            if key in by_id:
                return key
        title = item.get("criterion")
        if isinstance(title, str):
            found = titles.get(title.strip().casefold(), [])
            if len(found) == 1:
                return found[0]
        return None

    def parse(text: str) -> tuple[tuple[dict, list[str]] | None, str | None]:
        obj = load_lenient_value(text.rpartition("</think>")[2])
        if isinstance(obj, list) and obj:  # the entries without their wrapping object
            obj = {"scores": obj}
        if not obj or not isinstance(obj, dict):
            return None, f"not a JSON object: {text[:200]!r}"
        got: dict[str, tuple[float, float | None, str | None]] = {}
        problems: list[str] = []
        for item in _items(obj):
            cid = which(item)
            if cid is None:
                problems.append(f"judge: an entry names no criterion of the prompt ({str(item)[:80]!r}); ignored")
                continue
            if cid in got:
                problems.append(f"judge: {cid} scored twice; the first kept")
                continue
            name = f"{cid} ({by_id[cid][1].criterion})"
            keys = ("report_1", "report_2") if relative else ("report_1",)
            values, bad = [], []
            for k in keys:
                v = _score_value(item.get(k))
                if v is None:
                    bad.append(f"{k} is {item.get(k)!r}, not a number")
                elif not 0 <= v <= MAX_SCORE:
                    bad.append(f"{k} is {v:g}, outside 0..10")
                values.append(v)
            if bad:
                problems.append(f"judge: {name}: {'; '.join(bad)}; the criterion is left out")
                continue
            reason = item.get("reason", item.get("analysis"))
            got[cid] = (values[0], values[1] if relative else None, str(reason)[:2000] if reason else None)
        if not got:
            return None, "no usable score in the reply" + (f" ({problems[0]})" if problems else "")
        return (got, problems), None

    return parse


def _dims_of(rubric: Rubric | None) -> dict[str, DimensionScore]:
    return {d: DimensionScore(rubric.weights.get(d) if rubric and rubric.ok else None) for d in DIMENSIONS}


def _reference_problem(task: ReportTask) -> str:
    why = next((m for m in task.missing if m.startswith("reference:")), None)
    if why is None:
        why = "reference: empty" if task.reference is not None else "reference: none given for this task"
    return f"{why}; scored absolutely (target / 10), not comparable with relative scores"


def race_score(
    judge: ChatModel,
    task: ReportTask,
    report: str,
    *,
    rubric: Rubric | None = None,
    cache: ReplyCache | str | Path | None = None,
    max_attempts: int = 3,
    derive: bool = True,
    rollout: int = 0,
    max_tokens: int = RACE_MAX_TOKENS,
) -> RaceScore:
    """The RACE score of ``report`` for ``task`` (DeepResearch Bench, Du et al., arXiv
    2506.11763, section 3.1: reference-based, criteria-weighted, relative score).

    One judge call (temperature 0) gets the task prompt, the criteria with their explanations
    (not their weights, as in the benchmark), the report and, when the task has one, the
    reference report (neutrally labelled ``report_1`` and ``report_2``, the target first); it
    answers, per criterion, each report's score (0..10) and a reason. A reply that is not JSON
    or holds no usable score is asked again (``max_attempts`` calls, endpoint errors
    included); a reply that scores only some criteria is used as it is, the rest recorded. Then,
    with ``w_d`` the dimension weights and ``v_c`` the criterion weights (each normalized to
    sum 1), over the criteria and dimensions scored:

    * ``target_d = sum(v_c * t_c) / sum(v_c)`` and likewise ``reference_d`` (0..10);
    * ``target_total = sum(w_d * target_d) / sum(w_d)`` and likewise ``reference_total``;
    * relative: ``score_d = target_d / (target_d + reference_d)``, ``overall = target_total /
      (target_total + reference_total)`` (0 when both are 0, as the benchmark does);
    * absolute (no reference): ``score_d = target_d / 10``, ``overall = target_total / 10``.

    With every dimension scored, ``sum(w_d) = 1`` and this is the benchmark's figure exactly.

    Args:
        judge: the judge model.
        task: the task: its prompt, criteria and weights (derived by the judge when it has
            none and ``derive``), and reference report (``None``: absolute mode).
        report: the target report (Markdown). Empty or blank: scored 0 without a judge call.
        rubric: criteria to use instead of the task's (a :func:`derive_criteria` result shared
            by the rollouts of one task); its own judge calls are not counted again here.
        cache: a :class:`ReplyCache` or its SQLite file.
        max_attempts: judge calls at most per question asked (scoring, and deriving).
        derive: derive criteria for a task that has none; without it such a task is unscored.
        rollout: the rollout index, recorded in the score.
        max_tokens: completion budget of one judge call.

    Returns:
        A :class:`RaceScore`; never raises for bad input or a failing judge: what could not be
        scored is ``None`` and each reason is in ``problems``.

    Raises:
        InvalidArgumentError: ``max_attempts`` is below 1.
    """
    if max_attempts < 1:
        raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts}")
    problems: list[str] = []
    reference = task.reference if task.reference and task.reference.strip() else None
    mode = "relative" if reference is not None else "absolute"
    if reference is None:
        problems.append(_reference_problem(task))
    base = {"task_id": task.id, "mode": mode, "judge": judge.name, "rollout": rollout}

    if not report or not str(report).strip():
        known = rubric or (task_rubric(task) if task.criteria else None)
        dims = _dims_of(known)
        for d in dims.values():
            d.target, d.score = 0.0, 0.0
        source = known.source if known and known.ok else "none"
        problems.append("report: empty; scored 0 without asking the judge")
        return RaceScore(
            overall=0.0, dimensions=dims, criteria_source=source, target_total=0.0, problems=problems, **base
        )

    calls = hits = 0
    with opened(cache) as store:
        if rubric is None:
            rubric = task_rubric(task)
            if not rubric.ok and not task.criteria and derive:
                rubric = derive_criteria(judge, task, cache=store, max_attempts=max_attempts, max_tokens=max_tokens)
                calls, hits = rubric.judge_calls, rubric.cache_hits
        problems += rubric.problems
        if not rubric.ok:
            problems.append(rubric.error or "criteria: none usable")
            return RaceScore(
                overall=None, dimensions=_dims_of(None), criteria_source="none", judge_calls=calls,
                cache_hits=hits, problems=problems, **base,
            )  # fmt: skip
        pairs = [(d, c) for d in DIMENSIONS for c in rubric.criteria.get(d, [])]
        ids = [(f"C{i}", d, c) for i, (d, c) in enumerate(pairs, 1)]
        prompt = _prompt(task, report, reference, ids)
        parsed, error, n, h = ask(
            judge, prompt, _scores_parser(ids, reference is not None), store, max_attempts, max_tokens
        )
    calls, hits = calls + n, hits + h
    crits = [CriterionScore(cid, d, c.criterion, c.weight) for cid, d, c in ids]
    result = RaceScore(
        overall=None, dimensions=_dims_of(rubric), criteria=crits, criteria_source=rubric.source,
        judge_calls=calls, cache_hits=hits, problems=problems, **base,
    )  # fmt: skip
    if parsed is None:
        problems.append(f"judge: no usable scores {error}")
        return result
    got, reply_problems = parsed
    problems += reply_problems
    for cs in crits:
        if cs.id in got:
            cs.target, cs.reference, cs.reason = got[cs.id]
    skipped = [f"{cs.id} ({cs.criterion})" for cs in crits if cs.id not in got]
    if skipped:
        problems.append(f"judge: no score for {', '.join(skipped)}; left out of the weighted means")
    _aggregate(result, rubric, relative=reference is not None)
    return result


def _aggregate(result: RaceScore, rubric: Rubric, relative: bool) -> None:
    """Fill ``result``'s dimension scores, totals and overall from its criteria's scores."""
    used: list[str] = []
    for dim, ds in result.dimensions.items():
        if dim not in rubric.weights:
            continue
        scored = [c for c in result.criteria if c.dimension == dim and c.target is not None]
        if not scored:
            result.problems.append(
                f"{dim}: no criterion scored; left out of the total, the other dimensions' weights renormalized"
            )
            continue
        wsum = sum(c.weight for c in scored)
        ds.target = sum(c.weight * c.target for c in scored) / wsum
        if relative:
            ds.reference = sum(c.weight * c.reference for c in scored) / wsum
            ds.score = _share(ds.target, ds.reference)
        else:
            ds.score = ds.target / MAX_SCORE
        used.append(dim)
    if not used:
        result.problems.append("no dimension scored; no overall score")
        return
    wsum = sum(rubric.weights[d] for d in used)
    result.target_total = sum(rubric.weights[d] * result.dimensions[d].target for d in used) / wsum
    if relative:
        result.reference_total = sum(rubric.weights[d] * result.dimensions[d].reference for d in used) / wsum
        result.overall = _share(result.target_total, result.reference_total)
    else:
        result.overall = result.target_total / MAX_SCORE


def _share(target: float, reference: float) -> float:
    """``target / (target + reference)``; 0 when both are 0 (the benchmark's convention)."""
    return target / (target + reference) if target + reference > 0 else 0.0


# ----------------------------------------------------------------------------- summary


def _bootstrap_mean_ci(values: Sequence[float], n_resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one per task), resampling them
    with replacement, seeded: the approach of :func:`websailor.eval.metrics.bootstrap_ci`."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    n = len(x)
    stats: list[float] = []
    for start in range(0, n_resamples, 100):
        b = min(100, n_resamples - start)
        stats.extend(x[rng.integers(0, n, size=(b, n))].mean(axis=1).tolist())
    stats.sort()
    lo = stats[int((1 - level) / 2 * len(stats))]
    hi = stats[min(len(stats) - 1, int((1 + level) / 2 * len(stats)))]
    return float(lo), float(hi)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _task_means(scores: list[RaceScore], value: Callable[[RaceScore], float | None]) -> list[float]:
    """One value per task: the mean of ``value`` over the task's rollouts that have one."""
    by_task: dict[str, list[float]] = {}
    for s in scores:
        v = value(s)
        if v is not None:
            by_task.setdefault(s.task_id, []).append(v)
    return [sum(v) / len(v) for v in by_task.values()]


def _group(scores: list[RaceScore], n_resamples: int, level: float, seed: int) -> dict:
    overall = _task_means(scores, lambda s: s.overall)
    ci = _bootstrap_mean_ci(overall, n_resamples, level, seed) if overall else (None, None)
    dims = {}
    for dim in DIMENSIONS:
        means = _task_means(scores, lambda s, d=dim: s.dimensions[d].score if d in s.dimensions else None)
        dims[dim] = _r(sum(means) / len(means)) if means else None
    return {
        "n": len(scores),
        "tasks": len(overall),
        "unscored": sum(s.overall is None for s in scores),
        "overall": _r(sum(overall) / len(overall)) if overall else None,
        "overall_ci95": [_r(ci[0]), _r(ci[1])],
        "dimensions": dims,
    }


def race_summary(scores: Sequence[RaceScore], n_resamples: int = 1000, level: float = 0.95, seed: int = 0) -> dict:
    """Figures over many RACE scores (fractions 0..1, rounded to 4 decimals), kept apart by
    mode: relative and absolute scores measure different things and are never averaged
    together.

    Per mode: ``n`` (scores), ``tasks`` (tasks with at least one scored rollout), ``unscored``
    (scores with ``overall=None``), ``overall`` (the mean over tasks of each task's mean over
    its scored rollouts: every task counts once, as the benchmark's per-task average does with
    one rollout), ``overall_ci95`` (percentile bootstrap over tasks, ``n_resamples`` resamples,
    seeded: the same figures every time; ``[None, None]`` without a scored task) and
    ``dimensions`` (the same mean of each dimension's score). Overall: ``n``, ``problems`` (the
    number of problems recorded), ``with_problems`` (scores with at least one),
    ``judge_calls``, ``cache_hits`` and ``derived_criteria`` (scores on criteria the judge
    derived)."""
    scores = list(scores)
    return {
        "n": len(scores),
        "relative": _group([s for s in scores if s.mode == "relative"], n_resamples, level, seed),
        "absolute": _group([s for s in scores if s.mode == "absolute"], n_resamples, level, seed),
        "problems": sum(len(s.problems) for s in scores),
        "with_problems": sum(bool(s.problems) for s in scores),
        "judge_calls": sum(s.judge_calls for s in scores),
        "cache_hits": sum(s.cache_hits for s in scores),
        "derived_criteria": sum(s.criteria_source == "derived" for s in scores),
    }
