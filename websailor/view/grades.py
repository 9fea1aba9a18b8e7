"""The grades of an eval run as the viewer keeps them: a compact :class:`Grade` per rollout,
read from ``scores.jsonl`` in a background thread and cached per file (:func:`grades_of`), and
the outcome each rollout's cell shows (:func:`outcome`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from websailor.errors import InputFormatError
from websailor.eval.scoring import score_record
from websailor.jsonio import JsonlStream
from websailor.view.discover import run_file
from websailor.view.pages import WAIT_S, Row, read_in_background

#: The cell outcomes, in the order the legend lists them.
OUTCOMES = ("correct", "wrong", "no_answer", "model_error", "ungraded")


@dataclass(slots=True)
class Grade:
    """What the viewer keeps of a :class:`~websailor.eval.scoring.Score` (a compact copy: a
    100,000-rollout scores file stays small)."""

    judge: str
    correct: bool | None
    score: float | None
    extracted: str | None
    reasoning: str | None
    confidence: float | None
    error: str | None
    ungraded_for: str | None


@dataclass
class Grades:
    """The grades of one ``scores.jsonl`` by ``(id, rollout)`` (the latest of each), read in a
    background thread: ``complete`` is set when all are read, ``error`` says why reading
    stopped."""

    path: Path
    size: int
    mtime: float
    by_key: dict[tuple[str, int], Grade] = field(default_factory=dict)
    complete: threading.Event = field(default_factory=threading.Event)
    error: InputFormatError | None = None

    def get(self, key: tuple[str, int]) -> Grade | None:
        return self.by_key.get(key)


#: The grades of a run without a scores file (none, and complete).
NO_GRADES = Grades(Path(), 0, 0.0)
NO_GRADES.complete.set()
_GRADES: dict[Path, Grades] = {}
_GRADES_LOCK = threading.Lock()


def _read_grades(g: Grades) -> None:
    """Fill ``g`` from its file, line by line: each line checked as
    :func:`websailor.eval.scoring.read_scores` checks it (:func:`websailor.eval.scoring.score_record`),
    streamed by :class:`websailor.jsonio.JsonlStream` rather than read whole, for the memory of
    large files."""

    def fill() -> None:
        for _, lineno, rec in JsonlStream(g.path, "a score record").records():
            s = score_record(g.path, lineno, rec)
            g.by_key[(s.id, s.rollout)] = Grade(
                s.judge, s.correct, s.score, s.extracted, s.reasoning, s.confidence, s.error, s.ungraded_for
            )

    read_in_background(g, fill)


def grades_of(run: Path, wait_s: float = WAIT_S) -> Grades:
    """The grades of an eval folder's ``scores.jsonl`` (none without one), cached per (size,
    mtime); waits up to ``wait_s`` for them to be read, then returns those read so far.

    Raises:
        InputFormatError: a line that is not a score record.
    """
    path = run_file(run, "scores.jsonl")
    if not path.is_file():
        return NO_GRADES
    st = path.stat()
    with _GRADES_LOCK:
        g = _GRADES.get(path)
        if g is None or (g.complete.is_set() and (g.size, g.mtime) != (st.st_size, st.st_mtime)):
            g = _GRADES[path] = Grades(path, st.st_size, st.st_mtime)
            threading.Thread(target=_read_grades, args=(g,), name=f"grades {run.name}", daemon=True).start()
    g.complete.wait(wait_s)
    if g.error is not None:
        raise g.error
    return g


def outcome(row: Row, score: Grade | None) -> str:
    """The cell class of a rollout: from its grade when it has one (``correct``, ``wrong``,
    ``no_answer`` for a wrong rollout without a final answer, ``model_error`` or ``ungraded``),
    else from its termination (``model_error``, ``no_answer`` or ``ungraded``)."""
    if score is not None:
        if score.correct is True:
            return "correct"
        if score.correct is False:
            return "no_answer" if row.prediction is None else "wrong"
        return "model_error" if score.ungraded_for == "model_error" else "ungraded"
    if row.termination == "model_error":
        return "model_error"
    return "no_answer" if row.prediction is None else "ungraded"
