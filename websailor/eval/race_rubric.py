"""RACE's rubric (DeepResearch Bench, Du et al., arXiv 2506.11763, section 3.1): the dimension
weights and weighted criteria a report is scored on, taken from the task file
(:func:`task_rubric`), a user's JSON (:func:`parse_rubric`) or derived by the judge
(:func:`derive_criteria`, as the benchmark derives them offline, here in one call at temperature
0); and the judge-reply cache and retry loop that RACE's calls share (:class:`ReplyCache`,
:func:`ask`). Scoring is in :mod:`websailor.eval.race`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from websailor.errors import ContextLengthError, InvalidArgumentError, ModelError
from websailor.eval.report_tasks import DIMENSIONS, Criterion, ReportTask
from websailor.jsonio import load_lenient_json
from websailor.judge.reply_cache import ReplyCache
from websailor.log import get_logger
from websailor.models.base import ChatModel, SamplingParams

logger = get_logger(__name__)


T = TypeVar("T")

#: completion budget of one judge call: a score and a reason for each of 20 to 50 criteria, and
#: the thought of a reasoning judge, which comes from the same budget
RACE_MAX_TOKENS = 16384
#: wall-clock budget of one judge call (HTTP retries included): two long reports to read
RACE_TIMEOUT_S = 600.0

#: what each dimension measures, as the judge is told
DIMENSION_MEANING = {
    "comprehensiveness": "how broadly and how deeply the report covers the information the task calls for",
    "insight": "the depth, originality and soundness of the report's analysis, reasoning and conclusions",
    "instruction_following": "whether the report answers everything the task asks, within the scope and constraints it sets",
    "readability": "clear structure, fluent and precise language, and data presented so that it is easy to take in",
}

DERIVE_PROMPT = """You are preparing the marking scheme for research reports that will be written in answer to the task below. The reports will be marked on four dimensions:
{dimensions}

<task>
{task}
</task>

1. Decide how much each dimension matters for this particular task: give each a positive weight, the four summing to 1. Favour what makes a report on this task valuable; do not split evenly by default.
2. For each dimension write 3 to 8 criteria that are specific to this task (what a report on this very task must contain or do, not generic advice). Each criterion has a short title, an explanation of what a report must do to meet it, and a positive weight; the weights within a dimension sum to 1. A criterion belongs to one dimension only; do not repeat it under another.
Write the titles and explanations in the language of the task.

Reply with one JSON object and nothing else, in this layout (numbers in place of <weight>):
{{"dimension_weight": {{"comprehensiveness": <weight>, "insight": <weight>, "instruction_following": <weight>, "readability": <weight>}},
 "criteria": {{"comprehensiveness": [{{"criterion": "<title>", "explanation": "<what a report must do>", "weight": <weight>}}, ...],
              "insight": [...], "instruction_following": [...], "readability": [...]}}}}"""


# ----------------------------------------------------------------------------- the rubric


@dataclass
class Rubric:
    """The criteria a report is scored on: the weight of each dimension (``weights``, summing to
    1 over the dimensions kept) and its criteria (``criteria``, weights summing to 1 within each
    dimension). ``source``: ``"task"`` (the task file's) or ``"derived"`` (asked of the judge);
    ``error``: why no usable rubric came out (then ``weights`` and ``criteria`` are empty);
    ``problems``: what was left out of an otherwise usable one; ``judge_calls`` and
    ``cache_hits``: what deriving it cost."""

    weights: dict[str, float]
    criteria: dict[str, list[Criterion]]
    source: str
    error: str | None = None
    problems: list[str] = field(default_factory=list)
    judge_calls: int = 0
    cache_hits: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.weights)


def _positive(value: Any) -> float | None:
    """``value`` as a positive finite number, or ``None`` (booleans and numeric strings included:
    ``True`` is not a weight, ``"0.3"`` is)."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def _dimension(name: Any) -> str | None:
    """One of :data:`DIMENSIONS` from a judge's spelling of it ("Instruction Following",
    "instruction-following"), or ``None``."""
    key = re.sub(r"[\s\-]+", "_", str(name).strip().lower())
    return key if key in DIMENSIONS else None


def _normalize(
    weights: dict[str, Any], criteria: dict[str, list[tuple[str, str, Any]]], where: str
) -> tuple[dict[str, float], dict[str, list[Criterion]], list[str]]:
    """Keep the dimensions with a positive weight and at least one criterion of positive weight,
    and normalize both kinds of weights to sum 1; ``problems`` says what was dropped and why."""
    problems: list[str] = []
    kept: dict[str, list[Criterion]] = {}
    dim_w: dict[str, float] = {}
    for dim in DIMENSIONS:
        items = criteria.get(dim) or []
        w = _positive(weights.get(dim))
        if not items:
            problems.append(f"{where}: no criteria for {dim}; the dimension is left out")
            continue
        if w is None:
            problems.append(
                f"{where}: the weight of {dim} ({weights.get(dim)!r}) is not a positive number; the dimension is left out"
            )
            continue
        good = []
        for title, explanation, cw in items:
            x = _positive(cw)
            if x is None:
                problems.append(
                    f"{where}: criterion {title!r} of {dim} has weight {cw!r}, not a positive number; dropped"
                )
            elif not title.strip():
                problems.append(f"{where}: a criterion of {dim} has no title; dropped")
            else:
                good.append((title.strip(), explanation.strip(), x))
        if not good:
            problems.append(f"{where}: no criterion of {dim} has a usable weight; the dimension is left out")
            continue
        total = sum(x for _, _, x in good)
        kept[dim] = [Criterion(t, e, x / total) for t, e, x in good]
        dim_w[dim] = w
    total = sum(dim_w.values())
    return {d: w / total for d, w in dim_w.items()}, kept, problems


def task_rubric(task: ReportTask) -> Rubric:
    """The rubric of the task file (:attr:`ReportTask.weights`, :attr:`ReportTask.criteria`),
    weights normalized (the benchmark's are rounded to two decimals and sum to about 1). A
    dimension without criteria or without a positive weight is left out and said so in
    ``problems``; ``error`` is set when no dimension is left (``"criteria: ..."``, with the
    loader's reason from :attr:`ReportTask.missing` when the task has none)."""
    if not task.criteria:
        why = next((m for m in task.missing if m.startswith("criteria:")), "criteria: none given for this task")
        return Rubric({}, {}, "task", error=why)
    raw = {d: [(c.criterion, c.explanation, c.weight) for c in items] for d, items in task.criteria.items()}
    problems = [
        f"criteria: the task file's dimension {d!r} is not one of RACE's; ignored" for d in raw if d not in DIMENSIONS
    ]
    weights, criteria, more = _normalize(dict(task.weights), raw, "criteria (task file)")
    problems += more
    if not weights:
        return Rubric({}, {}, "task", error="criteria: the task file's criteria are unusable: " + "; ".join(problems))
    return Rubric(weights, criteria, "task", problems=problems)


def parse_rubric(text: str) -> tuple[Rubric | None, str | None]:
    """A rubric from JSON text ``{"dimension_weight": {dimension: weight}, "criteria" (or the
    benchmark's "criterions"): {dimension: [{"criterion", "explanation", "weight"}]}}`` (a judge's
    derivation reply, or a user's rubric file), or the reason it is unusable. All four
    dimensions must come out with a positive weight and a usable criterion; unknown dimensions
    and single criteria with a bad weight are dropped, and said so."""
    obj = load_lenient_json(text.rpartition("</think>")[2])
    if not obj:
        return None, f"not a JSON object: {text[:200]!r}"
    weights_raw = obj.get("dimension_weight", obj.get("weights"))
    criteria_raw = obj.get("criteria", obj.get("criterions"))
    if not isinstance(weights_raw, dict) or not isinstance(criteria_raw, dict):
        return None, "expected 'dimension_weight' and 'criteria' objects"
    problems: list[str] = []
    weights: dict[str, Any] = {}
    for name, w in weights_raw.items():
        dim = _dimension(name)
        if dim is None:
            problems.append(f"criteria (derived): unknown dimension {name!r} in the weights; ignored")
        else:
            weights[dim] = w
    criteria: dict[str, list[tuple[str, str, Any]]] = {}
    for name, items in criteria_raw.items():
        dim = _dimension(name)
        if dim is None:
            problems.append(f"criteria (derived): unknown dimension {name!r}; its criteria are ignored")
            continue
        if not isinstance(items, list):
            return None, f"the criteria of {dim} are not a list"
        rows = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("criterion"), str):
                problems.append(f"criteria (derived): an entry of {dim} is not a criterion with a title; dropped")
                continue
            rows.append((item["criterion"], str(item.get("explanation") or ""), item.get("weight")))
        criteria[dim] = rows
    norm_w, norm_c, more = _normalize(weights, criteria, "criteria (derived)")
    if set(norm_w) != set(DIMENSIONS):
        left = [p for p in more if "left out" in p]
        return None, "; ".join(left) or "not every dimension has usable criteria"
    return Rubric(norm_w, norm_c, "derived", problems=problems + more), None


def derive_criteria(
    judge: ChatModel,
    task: ReportTask,
    *,
    cache: ReplyCache | str | Path | None = None,
    max_attempts: int = 3,
    max_tokens: int = RACE_MAX_TOKENS,
) -> Rubric:
    """Ask the judge for the task's dimension weights and criteria, as DeepResearch Bench
    derives them offline for its tasks (Du et al., arXiv 2506.11763, section 3.1: "dynamic
    weights" and "adaptive criteria generation").

    The reply must be one JSON object ``{"dimension_weight": {dimension: weight},
    "criteria": {dimension: [{"criterion", "explanation", "weight"}]}}`` covering all four
    dimensions; weights must be positive numbers (any scale: both kinds are normalized to sum
    1). A reply that is not such an object (prose, a dimension without a usable criterion) is
    asked again, up to ``max_attempts`` calls with endpoint errors; an unknown dimension or a
    single criterion with a bad weight is dropped and recorded in ``problems``.

    Args:
        judge: the judge model (sampled at temperature 0).
        task: the task; only its prompt is used.
        cache: a :class:`ReplyCache` or its SQLite file; a cached usable reply costs no call.
        max_attempts: judge calls at most.
        max_tokens: completion budget of one call.

    Returns:
        A :class:`Rubric` with ``source="derived"``; when no usable reply came, ``error`` says why
        (``"criteria: the judge gave no usable criteria after 3 attempts: ..."``). Never raises
        for a judge's failure.

    Raises:
        InvalidArgumentError: ``max_attempts`` is below 1.
    """
    dims = "\n".join(f"- {d}: {DIMENSION_MEANING[d]}" for d in DIMENSIONS)
    prompt = DERIVE_PROMPT.format(dimensions=dims, task=task.prompt.strip())
    with opened(cache) as store:
        rubric, error, calls, hits = ask(judge, prompt, parse_rubric, store, max_attempts, max_tokens)
    if rubric is None:
        return Rubric(
            {}, {}, "derived", error=f"criteria: the judge gave no usable criteria {error}", judge_calls=calls
        )
    rubric.judge_calls, rubric.cache_hits = calls, hits
    return rubric


# ----------------------------------------------------------------------------- the cache


class opened:
    """``cache`` as a :class:`ReplyCache` for the length of a ``with`` block (opened and closed
    here when given as a path)."""

    def __init__(self, cache: ReplyCache | str | Path | None) -> None:
        self.given = cache
        self.own: ReplyCache | None = None

    def __enter__(self) -> ReplyCache | None:
        if self.given is None or isinstance(self.given, ReplyCache):
            return self.given
        self.own = ReplyCache(self.given)
        return self.own

    def __exit__(self, *exc) -> None:
        if self.own is not None:
            self.own.close()


def ask(
    judge: ChatModel,
    prompt: str,
    parse: Callable[[str], tuple[T | None, str | None]],
    cache: ReplyCache | None,
    max_attempts: int,
    max_tokens: int,
) -> tuple[T | None, str, int, int]:
    """Ask ``prompt`` until ``parse`` accepts the reply: the parsed value (``None`` after
    ``max_attempts`` calls, or at once when the prompt does not fit the judge's context), the
    last reason for failing (``"after 3 attempts: ..."``), calls made and cache hits (0 or 1). A
    reasoning judge's thought (``<think>...</think>``) is left to ``parse`` to skip."""
    if max_attempts < 1:
        raise InvalidArgumentError(f"max_attempts must be at least 1, got {max_attempts}")
    key = ReplyCache.key(judge.name, prompt)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            value, _ = parse(hit)
            if value is not None:
                return value, "", 0, 1
    params = SamplingParams(
        temperature=0.0, top_p=1.0, presence_penalty=0.0, max_tokens=max_tokens, stop=[], timeout_s=RACE_TIMEOUT_S
    )
    error, calls = "", 0
    for _ in range(max_attempts):
        calls += 1
        try:
            generation = judge.chat([{"role": "user", "content": prompt}], params)
        except ContextLengthError as e:  # asking again cannot help
            return None, f"(the prompt does not fit the judge's context: {e})", calls, 0
        except ModelError as e:
            error = f"judge endpoint error: {e}"
            continue
        reply = generation.text
        if generation.finish_reason == "length":  # a repaired half reply would score what it kept
            error = (
                f"the reply was cut at the completion limit ({params.max_tokens} tokens, or --judge-max-tokens): a "
                "RACE reply scores every criterion, and a reasoning judge thinks first"
            )
            continue
        value, why = parse(reply or "")
        if value is not None:
            if cache is not None:
                cache.put(key, reply)
            return value, "", calls, 0
        error = why or "unusable reply"
    logger.warning("no usable judge reply after %d attempt(s): %s", calls, error)
    return None, f"after {calls} attempt{'s' if calls > 1 else ''}: {error}", calls, 0
