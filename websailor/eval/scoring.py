"""Grading trajectory files: read and check them, grade each rollout with a judge, append the
grades to a scores file (resumable), and build the (questions x runs) table the metrics take.

A scores line: ``{id, rollout, judge, correct, score, extracted, reasoning, confidence, error,
termination, num_tool_calls, num_model_calls, prompt_tokens, completion_tokens, wall_s, model,
env, key, assistant_turns, valid_turns, level, env_settings, env_failures, ungraded_for}``.
``correct`` is ``null`` for an ungraded rollout (see :class:`websailor.judge.Grade`), and
``ungraded_for`` says why: ``model_error`` (the model endpoint failed), ``environment`` (the
environment degraded more tool calls than allowed) or ``judge`` (the judge gave no verdict).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from websailor.agent.parse import count_valid_turns
from websailor.agent.trajectory import env_failed_calls
from websailor.errors import InputFormatError
from websailor.jsonio import appending, read_appended_jsonl
from websailor.judge import Case, Gold, Grade, Judge

REQUIRED = ("id", "rollout", "question", "answer", "prediction", "termination")


@dataclass
class Score:
    """The grade of one rollout with the figures the report needs."""

    id: str
    rollout: int
    judge: str
    correct: bool | None
    score: float | None
    extracted: str | None
    reasoning: str | None
    confidence: float | None
    error: str | None
    termination: str
    num_tool_calls: int
    num_model_calls: int
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    model: str = ""
    env: str = ""
    key: str = ""  # case_key of the graded rollout: a stored grade is reused only for the same case
    assistant_turns: int = 0
    valid_turns: int = 0  # assistant turns that parse into a tool call or an answer (format validity)
    level: int | None = None  # the question's difficulty level, when the trajectory records one
    env_settings: dict = field(default_factory=dict)  # the observation settings that were not the paper's
    sampling: dict = field(default_factory=dict)  # the record's sampling and budgets ({}: not recorded)
    env_failures: dict = field(default_factory=dict)  # the record's env_failures ({} when the environment held)
    ungraded_for: str | None = None  # model_error, environment or judge, when correct is None
    summaries: int = 0  # context summaries the rollout made (websailor.agent.summarize)
    grounding: dict = field(default_factory=dict)  # websailor.eval.grounding.rollout_grounding ({}: a report task)


def check_record(path: Path, lineno: int, rec: dict, gold_checked: bool = False) -> Gold | None:
    """Check the trajectory record ``rec`` of ``path`` line ``lineno`` as :func:`read_trajectories`
    checks each: the fields of :data:`REQUIRED` with their types (``rollout`` an integer of at
    least 0, ``id`` a string or an integer, ``prediction`` text or ``null``), integer call
    counts, numeric ``tokens`` and ``timings`` when present, and a gold answer that parses
    (``gold_checked``: the caller already parsed this very answer, for another record of the
    question, and it is not parsed again). Returns the parsed gold answer (``None`` with
    ``gold_checked``, and for a record whose ``answer`` is ``null``: a question asked without
    one, graded by nobody, :func:`ungraded_reason`).

    Raises:
        InputFormatError: a field missing or of the wrong type, or no usable gold answer (the
            message names the file and the line).
    """
    where = f"{path} line {lineno}"
    missing = [f for f in REQUIRED if f not in rec]
    if missing:
        raise InputFormatError(f"{where}: not a trajectory record (no {', '.join(missing)})")
    rollout = rec["rollout"]
    if isinstance(rollout, bool) or not isinstance(rollout, int) or rollout < 0:
        raise InputFormatError(f"{where}: 'rollout' must be an integer of at least 0, got {rollout!r}")
    if not isinstance(rec["id"], (str, int)) or isinstance(rec["id"], bool):
        raise InputFormatError(f"{where}: 'id' must be a string or an integer, got {rec['id']!r}")
    if rec["prediction"] is not None and not isinstance(rec["prediction"], str):
        raise InputFormatError(f"{where}: 'prediction' must be text or null, got {type(rec['prediction']).__name__}")
    if not isinstance(rec["question"], str) or not isinstance(rec["termination"], str):
        raise InputFormatError(f"{where}: 'question' and 'termination' must be text")
    for name in ("num_tool_calls", "num_model_calls"):
        if name in rec and (isinstance(rec[name], bool) or not isinstance(rec[name], int)):
            raise InputFormatError(f"{where}: {name!r} must be an integer, got {rec[name]!r}")
    for name, key in (("tokens", "prompt"), ("tokens", "completion"), ("timings", "total_s")):
        block = rec.get(name, {})
        if (
            not isinstance(block, dict)
            or not isinstance(block.get(key, 0), (int, float))
            or isinstance(block.get(key, 0), bool)
        ):
            raise InputFormatError(f"{where}: {name!r} must be an object with a number {key!r}")
    if gold_checked or rec["answer"] is None:  # no gold answer: an ungraded question (ungraded_reason)
        return None
    try:
        return Gold.parse(rec["answer"])
    except ValueError as e:
        raise InputFormatError(
            f"{where}: the record has no usable gold answer ({e}); run with a questions file that has answers"
        ) from None


def _turns(rec: dict) -> tuple[int, int]:
    """``(assistant turns, valid ones)`` of a trajectory record (no-tools runs: only answers are valid)."""
    valid, total = count_valid_turns(rec.get("messages") or [], tools=rec.get("env") != "none")
    return total, valid


def read_trajectories(paths: list[Path]) -> list[dict]:
    """Trajectory records of one or more files, checked: each has the fields in
    :data:`REQUIRED` with the right types (``prediction`` may be ``null``: no final answer)
    and a gold answer, and each record kept has a well-formed ``env_failures`` when it has
    one. An ``(id, rollout)`` appears once, except that a later record supersedes one that
    ended in a model error, whose environment failed, or that answered another question (a
    resumed run reruns those). Files are read, never changed.

    Raises:
        InputFormatError: a missing file, a line that is not a trajectory record (which
            field is missing or wrong, on which line), or a duplicate.
    """
    from websailor.agent.runner import finished

    by_key: dict[tuple[str, int], tuple[str, dict]] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputFormatError(f"trajectory file {path} does not exist or is not a file")
        for lineno, rec in read_appended_jsonl(path, "a trajectory record"):
            check_record(path, lineno, rec)
            key = (str(rec["id"]), rec["rollout"])
            if key in by_key:
                where, earlier = by_key[key]
                if finished(earlier, rec["question"]):
                    raise InputFormatError(
                        f"{path} line {lineno}: question {key[0]!r} rollout {key[1]} also appears in "
                        f"{where}; score each run separately"
                    )
            by_key[key] = (f"{path} line {lineno}", rec)
    if not by_key:
        raise InputFormatError(f"no trajectories in {', '.join(map(str, paths))}")
    for where, rec in by_key.values():  # the kept records only: a rerun supersedes a malformed one
        try:
            env_failed_calls(rec)
        except ValueError as e:
            raise InputFormatError(f"{where}: {e}") from None
    return [rec for _, rec in by_key.values()]


def rollouts_per_question(records: list[dict]) -> int:
    """k: the number of rollouts every question has (indices 0..k-1).

    Raises:
        InputFormatError: questions have different numbers of rollouts (files mixing k, or an
            unfinished run); the message gives the counts and an example of each.
    """
    runs: dict[str, set[int]] = defaultdict(set)
    for rec in records:
        runs[str(rec["id"])].add(rec["rollout"])
    shapes = Counter(len(r) for r in runs.values())
    if len(shapes) > 1:
        examples = {n: next(q for q, r in runs.items() if len(r) == n) for n in shapes}
        detail = "; ".join(f"{c} with {n} (e.g. {examples[n]!r})" for n, c in sorted(shapes.items()))
        raise InputFormatError(
            f"the trajectories mix different numbers of rollouts per question: {detail}. Finish the "
            "run (rerun the same command: it resumes) or score files of one k"
        )
    k = next(iter(shapes))
    odd = next((q for q, r in runs.items() if r != set(range(k))), None)
    if odd is not None:
        raise InputFormatError(
            f"question {odd!r} has rollout indices {sorted(runs[odd])}; every question needs 0..{k - 1} "
            "(an unfinished run? rerun the same command: it resumes)"
        )
    return k


def _score_line(s: Score) -> str:
    return json.dumps(asdict(s), ensure_ascii=True) + "\n"


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def case_key(rec: dict, gold: Gold | None = None) -> str:
    """What a grade depends on: the question, the prediction and the gold answer (``gold``:
    the record's answer already parsed, when the caller has it)."""
    gold = gold or (Gold.parse(rec["answer"]) if rec["answer"] is not None else None)
    raw = json.dumps([rec["question"], rec["prediction"], gold and gold.to_dict()], ensure_ascii=False)
    return hashlib.sha1(raw.encode()).hexdigest()


def score_record(path: Path, lineno: int, rec: dict) -> Score:
    """The :class:`Score` of the score record ``rec`` on line ``lineno`` of ``path``.

    Raises:
        InputFormatError: ``rec`` has other fields than a :class:`Score` (or lacks some).
    """
    try:
        return Score(**rec)
    except TypeError:
        raise InputFormatError(f"{path} line {lineno} is not a score record; use another output") from None


def read_scores(path: Path) -> list[Score]:
    """The score records of a ``scores.jsonl`` (read only; a rollout graded twice keeps its last
    grade, as a resumed run leaves it).

    Raises:
        InputFormatError: a line that is not a score record.
    """
    path = Path(path)
    last: dict[tuple[str, int], Score] = {}
    for lineno, rec in read_appended_jsonl(path, "a score record"):
        s = score_record(path, lineno, rec)
        last[(s.id, s.rollout)] = s
    return list(last.values())


def ungraded_reason(rec: dict, max_env_failures: int = 0) -> str | None:
    """Why a trajectory record is left ungraded before the judge sees it: ``model_error`` (it
    ended in a model error: the agent never got to answer), ``environment`` (the environment
    degraded more than ``max_env_failures`` of its tool calls: an outage is not a wrong
    answer), ``no_gold_answer`` (the question came without an answer: its rollout is run and
    reported, never counted wrong), else ``None``."""
    if rec.get("answer") is None:
        return "no_gold_answer"
    if rec["termination"] == "model_error":
        return "model_error"
    if env_failed_calls(rec) > max_env_failures:
        return "environment"
    return None


def _ungraded_grade(rec: dict, reason: str) -> Grade:
    if reason == "no_gold_answer":
        return Grade(None, None, error="the question has no gold answer: not graded")
    if reason == "model_error":
        return Grade(None, None, error=f"the rollout ended in a model error: {rec.get('error')}")
    env = rec.get("env_failures") or {}
    tools = ", ".join(f"{t} {n}" for t, n in (env.get("tools") or {}).items())
    kinds = ", ".join(f"{k} {n}" for k, n in (env.get("kinds") or {}).items())
    calls = env.get("calls")
    return Grade(
        None,
        None,
        error=f"the environment failed {calls} tool call{'' if calls == 1 else 's'} ({tools}; {kinds}): not graded",
    )


def score_trajectories(
    records: list[dict],
    judge: Judge,
    out: Path | None = None,
    progress: bool = True,
    chunk: int = 2048,
    max_env_failures: int = 0,
) -> list[Score]:
    """Grade every record; with ``out``, append grades as they are made (the file is locked
    meanwhile) and reuse a grade already there only when it is by the same judge, for the
    same question, prediction and gold answer, and not ungraded (a resumed run retries those).
    A rollout is ungraded without asking the judge (:func:`ungraded_reason`) when it ended in a
    model error, or when the environment degraded more than ``max_env_failures`` of its tool
    calls.

    Raises:
        InputFormatError: ``out`` holds lines that are not scores.
        InvalidArgumentError: another process is writing ``out``.
    """
    with ExitStack() as stack:
        fh = None
        done: dict[tuple[str, int], Score] = {}
        if out is not None:
            fh, lines = stack.enter_context(appending(out, "a score record"))
            for lineno, rec in lines:
                s = score_record(out, lineno, rec)
                if s.judge == judge.name and s.correct is not None:
                    done[(s.id, s.rollout)] = s
        todo = [
            r
            for r in records
            if ungraded_reason(r, max_env_failures) is not None  # never a stored grade: the allowance may differ
            or not ((k := done.get((str(r["id"]), r["rollout"]))) and k.key == case_key(r))
        ]
        with tqdm(
            total=len(todo), desc=f"grading ({judge.name})", unit="traj", disable=not progress or not todo
        ) as bar:
            for part in _chunks(todo, chunk):
                golds = {id(r): Gold.parse(r["answer"]) if r["answer"] is not None else None for r in part}
                reasons = {id(r): ungraded_reason(r, max_env_failures) for r in part}
                answered = [r for r in part if reasons[id(r)] is None]
                grades = dict(
                    zip(
                        (id(r) for r in answered),
                        judge.grade([Case(r["question"], r["prediction"], golds[id(r)]) for r in answered]),
                    )
                )
                for r in part:
                    reason = reasons[id(r)]
                    g = grades[id(r)] if reason is None else _ungraded_grade(r, reason)
                    tokens = r.get("tokens") or {}
                    s = Score(
                        str(r["id"]),
                        r["rollout"],
                        judge.name,
                        g.correct,
                        g.score,
                        g.extracted,
                        g.reasoning,
                        g.confidence,
                        g.error,
                        r["termination"],
                        int(r.get("num_tool_calls", 0)),
                        int(r.get("num_model_calls", 0)),
                        int(tokens.get("prompt", 0)),
                        int(tokens.get("completion", 0)),
                        float((r.get("timings") or {}).get("total_s", 0.0)),
                        str(r.get("model", "")),
                        str(r.get("env", "")),
                        case_key(r, golds[id(r)]),
                        *_turns(r),
                        **_context(r),
                    )
                    done[(s.id, s.rollout)] = s
                    s.ungraded_for = reason or (None if s.correct is not None else "judge")
                    if fh is not None:
                        fh.write(_score_line(s))
                if fh is not None:
                    fh.flush()
                    os.fsync(fh.fileno())
                bar.update(len(part))
    # the level and the settings are the record's, also for a grade made before they were recorded
    return [replace(done[(str(r["id"]), r["rollout"])], **_context(r)) for r in records]


def _context(rec: dict) -> dict:
    """The ``level``, ``env_settings``, ``sampling``, ``env_failures``, ``summaries`` (how many context
    summaries were written) and ``grounding`` (:func:`websailor.eval.grounding.rollout_grounding`;
    ``{}`` for a report task) of a trajectory record, as a :class:`Score` holds them."""
    from websailor.eval.grounding import record_grounding

    level = rec.get("level")
    settings = rec.get("env_settings")
    sampling = rec.get("sampling")
    failures = rec.get("env_failures")
    summaries = rec.get("summaries")
    return {
        "level": level if isinstance(level, int) and not isinstance(level, bool) else None,
        "env_settings": dict(settings) if isinstance(settings, dict) else {},
        "sampling": dict(sampling) if isinstance(sampling, dict) else {},
        "env_failures": dict(failures) if isinstance(failures, dict) else {},
        "summaries": sum(isinstance(x, dict) and bool(x.get("text")) for x in summaries)
        if isinstance(summaries, list)
        else 0,
        "grounding": record_grounding(rec),
    }


def score_table(scores: list[Score]) -> tuple[list[str], list[list[bool | None]]]:
    """Question ids (first-seen order) and their rows of ``correct`` by rollout index."""
    by_q: dict[str, dict[int, bool | None]] = {}
    for s in scores:
        by_q.setdefault(s.id, {})[s.rollout] = s.correct
    k = max(len(r) for r in by_q.values())
    return list(by_q), [[row.get(i) for i in range(k)] for row in by_q.values()]
