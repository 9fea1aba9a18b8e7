"""Grading trajectory files: read and check them, grade each rollout with a judge, append the
grades to a scores file (resumable), and build the (questions x runs) table the metrics take.

A scores line: ``{id, rollout, judge, correct, score, extracted, reasoning, confidence, error,
termination, num_tool_calls, num_model_calls, prompt_tokens, completion_tokens, wall_s}``.
``correct`` is ``null`` for an ungraded rollout (see :class:`websailor.judge.Grade`).
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from websailor.errors import InputFormatError
from websailor.jsonio import read_appended_jsonl
from websailor.judge import Case, Gold, Judge

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


def read_trajectories(paths: list[Path]) -> list[dict]:
    """Trajectory records of one or more files, checked: each has the fields in
    :data:`REQUIRED` (``prediction`` may be ``null``: no final answer) and a gold answer; an
    ``(id, rollout)`` appears once.

    Raises:
        InputFormatError: a missing file, a line that is not a trajectory record (which
            field is missing, on which line), a record without a gold answer, or a duplicate.
    """
    records: list[dict] = []
    seen: dict[tuple[str, int], str] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise InputFormatError(f"trajectory file {path} does not exist or is not a file")
        for lineno, rec in read_appended_jsonl(path, "a trajectory record"):
            missing = [f for f in REQUIRED if f not in rec]
            if missing:
                raise InputFormatError(f"{path} line {lineno}: not a trajectory record (no {', '.join(missing)})")
            try:
                Gold.parse(rec["answer"])
            except ValueError:
                raise InputFormatError(f"{path} line {lineno}: the record has no gold answer to grade against "
                                       "(run with a questions file that has answers)") from None
            key = (str(rec["id"]), int(rec["rollout"]))
            if key in seen:
                raise InputFormatError(f"{path} line {lineno}: question {key[0]!r} rollout {key[1]} also appears in "
                                       f"{seen[key]}; score each run separately")
            seen[key] = f"{path} line {lineno}"
            records.append(rec)
    if not records:
        raise InputFormatError(f"no trajectories in {', '.join(map(str, paths))}")
    return records


def rollouts_per_question(records: list[dict]) -> int:
    """k: the number of rollouts every question has (indices 0..k-1).

    Raises:
        InputFormatError: questions have different numbers of rollouts (files mixing k, or an
            unfinished run); the message gives the counts and an example of each.
    """
    runs: dict[str, set[int]] = defaultdict(set)
    for rec in records:
        runs[str(rec["id"])].add(int(rec["rollout"]))
    shapes = Counter(len(r) for r in runs.values())
    if len(shapes) > 1:
        examples = {n: next(q for q, r in runs.items() if len(r) == n) for n in shapes}
        detail = "; ".join(f"{c} with {n} (e.g. {examples[n]!r})" for n, c in sorted(shapes.items()))
        raise InputFormatError(f"the trajectories mix different numbers of rollouts per question: {detail}. Finish the "
                               "run (rerun the same command: it resumes) or score files of one k")
    k = next(iter(shapes))
    odd = next((q for q, r in runs.items() if r != set(range(k))), None)
    if odd is not None:
        raise InputFormatError(f"question {odd!r} has rollout indices {sorted(runs[odd])}; every question needs 0..{k - 1} "
                               "(an unfinished run? rerun the same command: it resumes)")
    return k


def _score_line(s: Score) -> str:
    return json.dumps(asdict(s), ensure_ascii=True) + "\n"


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]


def score_trajectories(records: list[dict], judge: Judge, out: Path | None = None, progress: bool = True,
                       chunk: int = 2048) -> list[Score]:
    """Grade every record; with ``out``, append grades as they are made and reuse the grades
    of the same judge already there (a killed scoring run resumes).

    Raises:
        InputFormatError: ``out`` holds lines that are not scores.
    """
    done: dict[tuple[str, int], Score] = {}
    if out is not None:
        for lineno, rec in read_appended_jsonl(out, "a score record"):
            try:
                s = Score(**rec)
            except TypeError:
                raise InputFormatError(f"{out} line {lineno} is not a score record; use another output") from None
            if s.judge == judge.name:
                done[(s.id, s.rollout)] = s
    todo = [r for r in records if (str(r["id"]), int(r["rollout"])) not in done]
    fh = out.open("a", encoding="utf-8") if out is not None else None
    try:
        with tqdm(total=len(todo), desc=f"grading ({judge.name})", unit="traj", disable=not progress or not todo) as bar:
            for part in _chunks(todo, chunk):
                cases = [Case(r["question"], r["prediction"], Gold.parse(r["answer"])) for r in part]
                for r, g in zip(part, judge.grade(cases)):
                    tokens = r.get("tokens") or {}
                    s = Score(str(r["id"]), int(r["rollout"]), judge.name, g.correct, g.score, g.extracted, g.reasoning,
                              g.confidence, g.error, r["termination"], int(r.get("num_tool_calls", 0)),
                              int(r.get("num_model_calls", 0)), int(tokens.get("prompt", 0)),
                              int(tokens.get("completion", 0)), float((r.get("timings") or {}).get("total_s", 0.0)),
                              str(r.get("model", "")), str(r.get("env", "")))
                    done[(s.id, s.rollout)] = s
                    if fh is not None:
                        fh.write(_score_line(s))
                if fh is not None:
                    fh.flush()
                    os.fsync(fh.fileno())
                bar.update(len(part))
    finally:
        if fh is not None:
            fh.close()
    return [done[(str(r["id"]), int(r["rollout"]))] for r in records]


def score_table(scores: list[Score]) -> tuple[list[str], list[list[bool | None]]]:
    """Question ids (first-seen order) and their rows of ``correct`` by rollout index."""
    by_q: dict[str, dict[int, bool | None]] = {}
    for s in scores:
        by_q.setdefault(s.id, {})[s.rollout] = s.correct
    k = max(len(r) for r in by_q.values())
    return list(by_q), [[row.get(i) for i in range(k)] for row in by_q.values()]
