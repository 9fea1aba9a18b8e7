"""Views of eval runs and trajectories files: the per-question table (one coloured cell per
rollout, filters, pages), a question's rollouts side by side as timelines of steps, and two
eval runs compared.

Routes:

- ``/eval/{rel}`` and ``/trajectories/{rel}``: the table (query: ``outcome``, ``termination``,
  ``min_calls``, ``max_calls``, ``q``, ``page``);
- ``/eval/{rel}/q/{qid}`` and ``/trajectories/{rel}/q/{qid}``: the question's rollouts (query
  ``rollout=R``: that rollout alone, its steps anchored ``#step-N``);
- ``/compare?a=REL&b=REL`` and ``/compare/q/{qid}?a=REL&b=REL``: two eval runs.

Trajectories are read through :mod:`websailor.view.pages` (a cached index by byte offset, with
the library's record checks); grades line by line with the checks of :func:`websailor.eval.scoring.read_scores` (into compact
:class:`Grade` records); a comparison through :mod:`websailor.eval.compare`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.scoring import score_record
from websailor.jsonio import JsonlStream
from websailor.view.app import ViewContext, context
from websailor.view.discover import find_runs
from websailor.view.pages import WAIT_S, FileIndex, Question, Row, file_index, page_of, read_row

router = APIRouter()

#: The cell outcomes, in the order the legend lists them.
OUTCOMES = ("correct", "wrong", "no_answer", "model_error", "ungraded")
#: Seconds a question or compare view waits for a whole file to be indexed.
FULL_WAIT_S = 120.0
#: A thought longer than this many lines (or characters) is shown collapsed.
THOUGHT_LINES, THOUGHT_CHARS = 4, 400

# -- grades ------------------------------------------------------------------------------------


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


_NO_GRADES = Grades(Path(), 0, 0.0)
_NO_GRADES.complete.set()
_GRADES: dict[Path, Grades] = {}
_GRADES_LOCK = threading.Lock()


def _read_grades(g: Grades) -> None:
    """Fill ``g`` from its file, line by line: each line checked as
    :func:`websailor.eval.scoring.read_scores` checks it (:func:`websailor.eval.scoring.score_record`),
    streamed by :class:`websailor.jsonio.JsonlStream` rather than read whole, for the memory of
    large files."""
    try:
        for _, lineno, rec in JsonlStream(g.path, "a score record").records():
            s = score_record(g.path, lineno, rec)
            g.by_key[(s.id, s.rollout)] = Grade(
                s.judge, s.correct, s.score, s.extracted, s.reasoning, s.confidence, s.error, s.ungraded_for
            )
    except InputFormatError as e:
        g.error = e
    except OSError as e:
        g.error = InputFormatError(f"{g.path} cannot be read: {e}")
    finally:
        g.complete.set()


def grades_of(run: Path, wait_s: float = WAIT_S) -> Grades:
    """The grades of an eval folder's ``scores.jsonl`` (none without one), cached per (size,
    mtime); waits up to ``wait_s`` for them to be read, then returns those read so far.

    Raises:
        InputFormatError: a line that is not a score record.
    """
    path = run / "scores.jsonl"
    if not path.is_file():
        return _NO_GRADES
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


# -- the table ---------------------------------------------------------------------------------


@dataclass
class Filters:
    """The table's query: a question is kept when one of its rollouts has the ``outcome``, the
    ``termination`` and a tool-call count within ``min_calls..max_calls`` (each when given), and
    ``q`` (case-insensitive) occurs in its question, gold answer or a prediction."""

    outcome: str = ""
    termination: str = ""
    min_calls: int | None = None
    max_calls: int | None = None
    q: str = ""
    page: int = 1

    @classmethod
    def of(cls, request: Request) -> Filters:
        """The filters of a request's query string (bad numbers are ignored)."""
        qp = request.query_params

        def number(name: str) -> int | None:
            try:
                return int(qp.get(name, ""))
            except ValueError:
                return None

        return cls(
            outcome=qp.get("outcome", "") if qp.get("outcome", "") in OUTCOMES else "",
            termination=qp.get("termination", ""),
            min_calls=number("min_calls"),
            max_calls=number("max_calls"),
            q=qp.get("q", "").strip(),
            page=number("page") or 1,
        )

    def query(self, **change: Any) -> str:
        """The query string of these filters with ``change`` applied (empty values left out)."""
        values = {**vars(self), **change}
        return urlencode({k: v for k, v in values.items() if v not in (None, "") and not (k == "page" and v == 1)})

    def rollout_matches(self, row: Row, cell: str) -> bool:
        return (
            (not self.outcome or cell == self.outcome)
            and (not self.termination or row.termination == self.termination)
            and (self.min_calls is None or row.calls >= self.min_calls)
            and (self.max_calls is None or row.calls <= self.max_calls)
        )


def _cells(q: Question, grades: Grades) -> list[tuple[Row, str, Grade | None]]:
    return [(row, outcome(row, g := grades.get((q.id, row.rollout))), g) for row in q.ordered()]


def _pass(cells: list[tuple[Row, str, Grade | None]]) -> bool | None:
    """Pass@k of a question: solved by a rollout, ``None`` when none is graded."""
    graded = [s.correct for _, _, s in cells if s is not None and s.correct is not None]
    return any(graded) if graded else None


def run_base(kind: str, rel: str) -> str:
    """The URL of a run's table (``/eval/runs/a``); the root itself is ``/eval``."""
    return f"/{kind}" if rel in ("", ".") else f"/{kind}/{quote(rel, safe='/')}"


def question_url(base: str, qid: str, **query: Any) -> str:
    """The URL of a question's view under a run's ``base``."""
    return f"{base}/q/{quote(qid, safe='')}" + (f"?{urlencode(query)}" if query else "")


@dataclass
class Summary:
    """The table's rows before filtering, computed once per state of the index and grades:
    ``rows`` of ``(question, cells, Pass@k, lower-cased text for the search)``, the outcome
    ``counts``, the ``terminations`` seen, and the questions ``graded`` and ``solved``."""

    rows: list[tuple[Question, list, bool | None, str]]
    counts: dict[str, int]
    terminations: list[str]
    graded: int
    solved: int


_SUMMARIES: dict[tuple[Path, Path], tuple[tuple, Summary]] = {}


def summary_of(index: FileIndex, grades: Grades) -> Summary:
    """:class:`Summary` of ``index`` with ``grades``, cached until either changes."""
    key = (id(index), index.version, id(grades), len(grades.by_key), grades.complete.is_set())
    hit = _SUMMARIES.get((index.path, grades.path))
    if hit is not None and hit[0] == key:
        return hit[1]
    rows, counts, terminations = [], dict.fromkeys(OUTCOMES, 0), set()
    graded = solved = 0
    with index.lock:
        for q in index.questions.values():
            cells = _cells(q, grades)
            for row, cell, _ in cells:
                counts[cell] += 1
                terminations.add(row.termination)
            p = _pass(cells)
            if p is not None:
                graded += 1
                solved += p
            text = "\n".join([q.question, q.gold, q.id, *(row.prediction or "" for row, _, _ in cells)]).lower()
            rows.append((q, cells, p, text))
    out = Summary(rows, counts, sorted(terminations), graded, solved)
    _SUMMARIES[(index.path, grades.path)] = (key, out)
    return out


def _keep(cells: list, text: str, f: Filters) -> bool:
    if f.q and f.q.lower() not in text:
        return False
    if f.outcome or f.termination or f.min_calls is not None or f.max_calls is not None:
        return any(f.rollout_matches(row, cell) for row, cell, _ in cells)
    return True


def _table(ctx: ViewContext, request: Request, kind: str, rel: str) -> Response:
    path = ctx.path(rel)
    traj = path / "trajectories.jsonl" if kind == "eval" else path
    if kind == "eval" and not path.is_dir():
        raise InvalidArgumentError(f"{rel!r} is not an eval output folder")
    if kind == "trajectories" and not path.is_file():
        raise InvalidArgumentError(f"{rel!r} is not a trajectories file")
    wait_s = FULL_WAIT_S if context(request).whole_files else WAIT_S  # an export never writes a partial table
    deadline = time.monotonic() + wait_s
    if kind == "eval":
        grades_of(path, 0)  # both read at once: the page waits wait_s in all, not twice
    index = file_index(traj, wait_s)
    grades = grades_of(path, max(0.0, deadline - time.monotonic())) if kind == "eval" else _NO_GRADES
    f = Filters.of(request)
    summary = summary_of(index, grades)
    kept = [r for r in summary.rows if _keep(r[1], r[3], f)]
    shown, page, pages = page_of(kept, f.page)
    base = run_base(kind, rel)
    k = max((len(r[0].rows) for r in summary.rows), default=0)
    others = (
        [r.rel for r in find_runs(ctx.root) if r.kind == "eval" and r.rel != (rel or ".")] if kind == "eval" else []
    )
    rows = [
        {
            "q": q,
            "url": question_url(base, q.id),
            "cells": [
                {
                    "class": cell,
                    "rollout": row.rollout,
                    "title": _cell_title(row, cell, g),
                    "url": question_url(base, q.id, rollout=row.rollout) + "#step-1",
                }
                for row, cell, g in cells
            ],
            "pass": p,
            "calls": [row.calls for row, _, _ in cells],
        }
        for q, cells, p, _ in shown
    ]
    reading = None
    if not index.complete.is_set() or not grades.complete.is_set():
        done = min(index.end, index.size)
        reading = {
            "lines": index.lines,
            "percent": round(100 * done / index.size) if index.size else 100,
            "grades": grades.complete.is_set(),
        }
    return ctx.page(
        "eval_table.html",
        title=f"{'Evaluation' if kind == 'eval' else 'Trajectories'}: {rel or '.'}",
        kind=kind,
        rel=rel or ".",
        base=base,
        index=index,
        questions=len(summary.rows),
        rollouts=sum(summary.counts.values()),
        reading=reading,
        rows=rows,
        f=f,
        page=page,
        pages=pages,
        matching=len(kept),
        k=k,
        counts=summary.counts,
        outcomes=OUTCOMES,
        terminations=summary.terminations,
        pass_at_k=(summary.solved / summary.graded) if summary.graded else None,
        graded_questions=summary.graded,
        others=others,
    )


def _cell_title(row: Row, cell: str, g: Grade | None) -> str:
    pred = "no answer" if row.prediction is None else f"answer: {row.prediction[:200]}"
    parts = [f"rollout {row.rollout}: {cell.replace('_', ' ')}", f"termination: {row.termination}", pred]
    parts.append(f"{row.calls} tool call{'' if row.calls == 1 else 's'}")
    if g is not None and g.correct is None and g.ungraded_for:
        parts.append(f"ungraded for: {g.ungraded_for}")
    return "\n".join(parts)


@router.get("/eval/q/{qid:path}")
def eval_root_question(request: Request, qid: str) -> Response:
    """A question of the eval run that is the root itself."""
    return _question(context(request), request, "eval", ".", qid)


@router.get("/trajectories/q/{qid:path}")
def trajectories_root_question(request: Request, qid: str) -> Response:
    """A question of the trajectories file that is the root itself."""
    return _question(context(request), request, "trajectories", ".", qid)


@router.get("/eval/{rel:path}/q/{qid:path}")
def eval_question(request: Request, rel: str, qid: str) -> Response:
    """A question of an eval run: its rollouts side by side."""
    return _question(context(request), request, "eval", rel, qid)


@router.get("/trajectories/{rel:path}/q/{qid:path}")
def trajectories_question(request: Request, rel: str, qid: str) -> Response:
    """A question of a trajectories file: its rollouts side by side."""
    return _question(context(request), request, "trajectories", rel, qid)


@router.get("/eval/{rel:path}")
def eval_table(request: Request, rel: str) -> Response:
    """An eval run's table of questions."""
    return _table(context(request), request, "eval", rel.rstrip("/"))


@router.get("/trajectories/{rel:path}")
def trajectories_table(request: Request, rel: str) -> Response:
    """A trajectories file's table of questions."""
    return _table(context(request), request, "trajectories", rel.rstrip("/"))


# -- a question's rollouts ---------------------------------------------------------------------


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _thought_block(thought: str) -> dict[str, Any]:
    lines = thought.splitlines()
    long = len(lines) > THOUGHT_LINES or len(thought) > THOUGHT_CHARS
    head = "\n".join(lines[:THOUGHT_LINES])[:THOUGHT_CHARS]
    return {"text": thought, "collapsed": long, "head": head}


def steps_of(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps of a trajectory record: one per assistant turn, in order, each
    ``{n, thought, tool, arguments (pretty JSON), answer, error, latency_s, call_error,
    env_failures, observation, observation_tokens (an estimate: characters / 4), token_ids,
    finish_reason}``; the i-th turn with a tool call is matched with ``tool_calls[i]``."""
    from websailor.agent.parse import parse_turn

    messages = [m for m in rec.get("messages") or [] if isinstance(m, dict)]
    calls = [c for c in rec.get("tool_calls") or [] if isinstance(c, dict)]
    tools = rec.get("env") != "none"
    out, used = [], 0
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        action = parse_turn(text, tools=tools)
        step: dict[str, Any] = {
            "n": len(out) + 1,
            "thought": _thought_block(action.thought) if action.thought else None,
            "text": text,
            "tool": None,
            "answer": action.answer,
            "error": action.error,
            "finish_reason": m.get("finish_reason"),
            "token_ids": m.get("token_ids") if isinstance(m.get("token_ids"), list) else None,
        }
        if action.tool_call is not None:
            call = calls[used] if used < len(calls) else {}
            used += 1
            step["tool"] = action.tool_call.name
            step["arguments"] = json.dumps(action.tool_call.arguments, indent=2, ensure_ascii=False)
            step["latency_s"] = call.get("latency_s")
            step["call_error"] = call.get("error")
            step["env_failures"] = call.get("env_failures")
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        if nxt is not None and nxt.get("role") != "assistant":
            obs = nxt.get("content") if isinstance(nxt.get("content"), str) else ""
            step["observation"] = obs
            step["observation_tokens"] = _estimate_tokens(obs)
        out.append(step)
    return out


def rollout_view(rec: dict[str, Any], score: Grade | None, row: Row, label: str = "") -> dict[str, Any]:
    """What the template shows of one rollout: its record's figures, the prompt, the steps
    (:func:`steps_of`), the grade and the outcome class."""
    messages = [m for m in rec.get("messages") or [] if isinstance(m, dict)]
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    return {
        "label": label or f"rollout {rec['rollout']}",
        "rollout": rec["rollout"],
        "rec": rec,
        "outcome": outcome(row, score),
        "score": score,
        "system": system if isinstance(system, str) else None,
        "steps": steps_of(rec),
        "tokens": rec.get("tokens") if isinstance(rec.get("tokens"), dict) else {},
        "timings": rec.get("timings") if isinstance(rec.get("timings"), dict) else {},
        "env_failures": rec.get("env_failures") or None,
        "lineno": row.lineno,
    }


def _find(index: FileIndex, qid: str) -> Question:
    with index.lock:
        q = index.questions.get(qid)
    if q is None and not index.complete.is_set():  # not read yet: wait for the whole file
        index.complete.wait(FULL_WAIT_S)
        if index.error is not None:
            raise index.error
        with index.lock:
            q = index.questions.get(qid)
    if q is None:
        raise InvalidArgumentError(f"no question {qid!r} in {index.path.name}")
    return q


def _rollouts_of(index: FileIndex, q: Question, grades: Grades, only: int | None, label: str = "") -> list[dict]:
    rows = q.ordered() if only is None else [r for r in q.ordered() if r.rollout == only]
    if only is not None and not rows:
        raise InvalidArgumentError(f"question {q.id!r} has no rollout {only}")
    return [
        rollout_view(read_row(index, row), grades.get((q.id, row.rollout)), row, f"{label}rollout {row.rollout}")
        for row in rows
    ]


def _question(ctx: ViewContext, request: Request, kind: str, rel: str, qid: str) -> Response:
    path = ctx.path(rel)
    traj = path / "trajectories.jsonl" if kind == "eval" else path
    if not traj.is_file():
        raise InvalidArgumentError(
            f"{rel!r} is not {'an eval output folder' if kind == 'eval' else 'a trajectories file'}"
        )
    index = file_index(traj)
    q = _find(index, qid)
    grades = grades_of(path, FULL_WAIT_S) if kind == "eval" else _NO_GRADES
    try:
        only = int(request.query_params["rollout"]) if "rollout" in request.query_params else None
    except ValueError:
        raise InvalidArgumentError("rollout must be a number") from None
    base = run_base(kind, rel)
    rollouts = _rollouts_of(index, q, grades, only)
    return ctx.page(
        "eval_question.html",
        title=f"Question {q.id}",
        q=q,
        back=base,
        back_label=rel,
        rollouts=rollouts,
        single=only is not None,
        all_url=question_url(base, q.id),
        rollout_urls={r.rollout: question_url(base, q.id, rollout=r.rollout) for r in q.ordered()},
    )


# -- two runs compared -------------------------------------------------------------------------


def _eval_dir(ctx: ViewContext, rel: str | None, which: str) -> Path:
    if not rel:
        raise InvalidArgumentError(f"give two eval runs to compare: ?a=RUN&b=RUN (no {which})")
    path = ctx.path(rel)
    if not (path / "scores.jsonl").is_file():
        raise InvalidArgumentError(f"{rel!r} is not a graded eval run (no scores.jsonl)")
    return path


def _same_questions(a: Path, b: Path, names: tuple[str, str]) -> None:
    """:func:`websailor.eval.compare.check_same_questions` over the cached indexes."""
    idx = [file_index(p / "trajectories.jsonl", FULL_WAIT_S) for p in (a, b) if (p / "trajectories.jsonl").is_file()]
    if len(idx) < 2:
        return
    qa, qb = idx[0].questions, idx[1].questions
    odd = next((q for q in qa if q in qb and qa[q].question != qb[q].question), None)
    if odd is not None:
        raise InvalidArgumentError(
            f"{names[0]} and {names[1]} are evaluations of different questions: id {odd!r} is "
            f"{qa[odd].question[:80]!r} in one and {qb[odd].question[:80]!r} in the other"
        )


@router.get("/compare")
def compare(request: Request) -> Response:
    """Two eval runs of the same questions: figures, and which questions flipped."""
    from websailor.eval.compare import compare_runs, load_scores

    ctx = context(request)
    a_rel, b_rel = request.query_params.get("a"), request.query_params.get("b")
    a, b = _eval_dir(ctx, a_rel, "a"), _eval_dir(ctx, b_rel, "b")
    names = (a_rel or "", b_rel or "")
    try:
        _same_questions(a, b, names)
        c = compare_runs(load_scores(a), load_scores(b), names)
    except InvalidArgumentError as e:
        return ctx.page("error.html", title="These runs cannot be compared", message=str(e), status_code=422)
    texts = {}
    for p in (a, b):
        if (p / "trajectories.jsonl").is_file():
            for qid, q in file_index(p / "trajectories.jsonl", FULL_WAIT_S).questions.items():
                texts.setdefault(qid, q.question)

    def listed(ids: list[str]) -> list[dict]:
        return [
            {
                "id": i,
                "question": texts.get(i, ""),
                "url": f"/compare/q/{quote(i, safe='')}?{urlencode({'a': a_rel, 'b': b_rel})}",
            }
            for i in ids
        ]

    return ctx.page(
        "eval_compare.html",
        title=f"Compare {a_rel} with {b_rel}",
        c=c,
        a=a_rel,
        b=b_rel,
        a_url=run_base("eval", a_rel or "."),
        b_url=run_base("eval", b_rel or "."),
        gained=listed(c.only_b),
        lost=listed(c.only_a),
        both=len(c.both),
        neither=len(c.neither),
        swap=f"/compare?{urlencode({'a': b_rel, 'b': a_rel})}",
    )


@router.get("/compare/q/{qid:path}")
def compare_question(request: Request, qid: str) -> Response:
    """A question's rollouts in two eval runs, side by side."""
    ctx = context(request)
    a_rel, b_rel = request.query_params.get("a"), request.query_params.get("b")
    a, b = _eval_dir(ctx, a_rel, "a"), _eval_dir(ctx, b_rel, "b")
    rollouts: list[dict] = []
    q = None
    for label, p in (("A ", a), ("B ", b)):
        index = file_index(p / "trajectories.jsonl")
        q = _find(index, qid)
        rollouts += _rollouts_of(index, q, grades_of(p, FULL_WAIT_S), None, label)
    assert q is not None
    return ctx.page(
        "eval_question.html",
        title=f"Question {qid}: {a_rel} (A) against {b_rel} (B)",
        q=q,
        back=f"/compare?{urlencode({'a': a_rel, 'b': b_rel})}",
        back_label=f"compare {a_rel} with {b_rel}",
        rollouts=rollouts,
        single=False,
        all_url=None,
        rollout_urls={},
    )
