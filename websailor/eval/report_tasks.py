"""DeepResearch Bench's files (Du et al., arXiv 2506.11763): report tasks, their RACE criteria
and reference reports, read in the layout the benchmark publishes. Nothing is fetched: a user
points at a copy of the benchmark's repository (or at its three files).

* ``data/prompt_data/query.jsonl``: one task a line, ``{"id", "topic", "language", "prompt"}``
  (100 tasks, 50 in English and 50 in Chinese, 22 topics);
* ``data/criteria_data/criteria.jsonl``: per task, ``{"id", "prompt", "dimension_weight":
  {dimension: weight}, "criterions": {dimension: [{"criterion", "explanation", "weight"}]}}``
  over the four RACE dimensions (:data:`DIMENSIONS`);
* ``data/test_data/cleaned_data/reference.jsonl``: the reference report of each task, ``{"id",
  "prompt", "article"}`` (RACE scores a report relative to it).

Criteria and references are optional: a task without them is kept, with the reason recorded in
``missing`` (RACE then scores it absolutely, and says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from websailor.errors import InputFormatError
from websailor.jsonio import read_jsonl
from websailor.text import clean_text

#: RACE's four dimensions (DeepResearch Bench, section 3.1)
DIMENSIONS = ("comprehensiveness", "insight", "instruction_following", "readability")
#: where each file lies in the benchmark's repository
QUERY_FILE = Path("data/prompt_data/query.jsonl")
CRITERIA_FILE = Path("data/criteria_data/criteria.jsonl")
REFERENCE_FILE = Path("data/test_data/cleaned_data/reference.jsonl")
TASK_FIELDS = ("id", "topic", "language", "prompt")


@dataclass(frozen=True)
class Criterion:
    """One task-specific criterion of a RACE dimension, with its weight within the dimension."""

    criterion: str
    explanation: str
    weight: float


@dataclass
class ReportTask:
    """A research task whose answer is a cited report. ``weights``: RACE's weight of each
    dimension for this task (sum 1); ``criteria``: the criteria of each dimension;
    ``reference``: the reference report (Markdown); ``missing``: what the files did not give
    for this task, each with why."""

    id: str
    topic: str
    language: str
    prompt: str
    weights: dict[str, float] = field(default_factory=dict)
    criteria: dict[str, list[Criterion]] = field(default_factory=dict)
    reference: str | None = None
    missing: list[str] = field(default_factory=list)


def _find(root: Path, relative: Path) -> Path | None:
    for candidate in (root / relative, root / relative.name):
        if candidate.is_file():
            return candidate
    return None


def _records(path: Path, what: str) -> list[tuple[int, dict]]:
    records, unfinished = read_jsonl(path, what)
    if unfinished is not None:
        raise InputFormatError(f"{path}: the last line is cut off; is the file complete?")
    return records


def _criteria(path: Path, lineno: int, rec: dict) -> tuple[dict[str, float], dict[str, list[Criterion]]]:
    where = f"{path} line {lineno}"
    weights, criterions = rec.get("dimension_weight"), rec.get("criterions")
    if not isinstance(weights, dict) or not isinstance(criterions, dict):
        raise InputFormatError(f"{where}: expected 'dimension_weight' and 'criterions' objects")
    unknown = sorted(set(weights) - set(DIMENSIONS))
    if unknown:
        raise InputFormatError(f"{where}: unknown dimension {unknown[0]!r}; RACE's are {', '.join(DIMENSIONS)}")
    out: dict[str, list[Criterion]] = {}
    for dim, items in criterions.items():
        if dim not in DIMENSIONS or not isinstance(items, list):
            raise InputFormatError(f"{where}: 'criterions.{dim}' is not a list of one of {', '.join(DIMENSIONS)}")
        try:
            out[dim] = [
                Criterion(str(c["criterion"]), str(c.get("explanation", "")), float(c["weight"])) for c in items
            ]
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise InputFormatError(
                f"{where}: each criterion of {dim!r} needs 'criterion' and a numeric 'weight' ({type(e).__name__}: {e})"
            ) from None
    try:
        return {d: float(w) for d, w in weights.items()}, out
    except (TypeError, ValueError, OverflowError):
        raise InputFormatError(f"{where}: 'dimension_weight' values must be numbers") from None


def load_report_tasks(source: str | Path, language: str | None = None) -> list[ReportTask]:
    """The tasks of DeepResearch Bench at ``source``, with their criteria and references.

    Args:
        source: the benchmark repository's folder (its ``data/...`` files, :data:`QUERY_FILE`
            and the others), a folder holding the three files by name, or the task file itself.
        language: keep only tasks in this language (``en`` or ``zh``); ``None`` keeps all.

    Prompts are read as the agent records them (NFC, lone surrogates replaced); languages
    compare without case.

    Raises:
        InputFormatError: no task file, a task file in another layout (one line naming the
            expected fields), a task with an empty prompt or an id used twice, or a criteria
            file whose entries are malformed.
    """
    src = Path(source)
    root = src.parent if src.is_file() else src
    query = src if src.is_file() else _find(root, QUERY_FILE)
    if query is None:
        raise InputFormatError(f"{src}: no DeepResearch Bench task file ({QUERY_FILE} or {QUERY_FILE.name})")
    tasks: list[ReportTask] = []
    seen: dict[str, int] = {}
    for lineno, rec in _records(query, "task"):
        if not all(k in rec for k in TASK_FIELDS):
            raise InputFormatError(
                f"{query} line {lineno} is not a DeepResearch Bench task: expected the fields "
                f"{', '.join(TASK_FIELDS)}, got {', '.join(sorted(rec)) or 'none'}"
            )
        prompt = clean_text(str(rec["prompt"])).strip()  # as the agent records it: NFC, no lone surrogates
        if not prompt:
            raise InputFormatError(f"{query} line {lineno}: task {rec['id']!r} has an empty prompt")
        if str(rec["id"]) in seen:
            raise InputFormatError(
                f"{query} line {lineno}: task id {rec['id']!r} is used again (first on line {seen[str(rec['id'])]}); "
                "each task needs its own id"
            )
        seen[str(rec["id"])] = lineno
        if language is None or str(rec["language"]).strip().lower() == language:
            tasks.append(ReportTask(str(rec["id"]), str(rec["topic"]), str(rec["language"]), prompt))
    criteria_path, reference_path = _find(root, CRITERIA_FILE), _find(root, REFERENCE_FILE)
    by_id = {t.id: t for t in tasks}
    by_prompt = {t.prompt: t for t in tasks}

    def task_of(rec: dict) -> ReportTask | None:  # the benchmark's scripts match by prompt
        return by_id.get(str(rec.get("id"))) or by_prompt.get(clean_text(str(rec.get("prompt"))).strip())

    if criteria_path is not None:
        for lineno, rec in _records(criteria_path, "criteria"):
            task = task_of(rec)
            if task is not None:
                task.weights, task.criteria = _criteria(criteria_path, lineno, rec)
    if reference_path is not None:
        for _, rec in _records(reference_path, "reference"):
            task = task_of(rec)
            if task is not None and isinstance(rec.get("article"), str) and rec["article"].strip():
                task.reference = rec["article"]
    for task in tasks:
        if not task.criteria:
            task.missing.append("criteria: " + ("no entry for this task" if criteria_path else "no criteria file"))
        if task.reference is None:
            task.missing.append("reference: " + ("no report for this task" if reference_path else "no reference file"))
    return tasks
