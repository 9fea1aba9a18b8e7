"""Views of eval runs and trajectories files: the per-question table (one coloured cell per
rollout, filters, pages), a question's rollouts side by side as timelines of steps, and two
eval runs compared.

Routes (the run's path is the whole URL path after ``/eval/`` or ``/trajectories/``, and the
root itself is ``/eval`` or ``/trajectories``; what is shown of the run is in the query string,
so no run path or question id can be read as another):

- ``/eval/{rel}`` and ``/trajectories/{rel}``: the table (query: ``outcome``, ``termination``,
  ``min_calls``, ``max_calls``, ``q`` (the text search), ``page``);
- ``/eval/{rel}?question=QID`` and ``/trajectories/{rel}?question=QID``: the question's
  rollouts (``&rollout=R``: that rollout alone, its steps anchored ``#step-N``);
- ``/compare?a=REL&b=REL`` and ``/compare?a=REL&b=REL&question=QID``: two eval runs.

A query parameter with a bad value (``page=abc``, ``outcome=best``) gets the error page naming it.

Trajectories are read through :mod:`websailor.view.pages` (a cached index by byte offset, with
the library's record checks); grades through :mod:`websailor.view.grades` (line by line, with
the checks of :func:`websailor.eval.scoring.read_scores`); a comparison through
:mod:`websailor.eval.compare`.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import Response

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.grounding import describe_figures, describe_grounding, record_grounding
from websailor.view.context import HEADLINE_MAX_BYTES, ViewContext, bad_query, context, query_int, run_url
from websailor.view.discover import find_runs, run_file
from websailor.view.grades import NO_GRADES, OUTCOMES, Grade, Grades, grades_of, outcome
from websailor.view.pages import (
    WAIT_S,
    FileIndex,
    Question,
    Row,
    file_index,
    page_of,
    read_row,
)
from websailor.view.report_views import ScoreFiles, report_view, score_files
from websailor.view.summary_views import conversation, failed_summaries, summary_index, timeline

router = APIRouter()

#: Seconds a question or compare view waits for a whole file to be indexed.
FULL_WAIT_S = 120.0
#: A thought longer than this many lines (or characters) is shown collapsed.
THOUGHT_LINES, THOUGHT_CHARS = 4, 400

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
        """The filters of a request's query string (an empty field is no filter; a page out of
        range is clamped by the table).

        Raises:
            RequestValidationError: an ``outcome`` that is not one of :data:`~websailor.view.grades.OUTCOMES`, or a
                ``min_calls``, ``max_calls`` or ``page`` that is not a whole number (tool-call
                counts: not negative).
        """
        qp = request.query_params
        outcome = qp.get("outcome", "")
        if outcome not in ("", *OUTCOMES):
            raise bad_query("outcome", outcome, f"not one of {', '.join(OUTCOMES)}")
        return cls(
            outcome=outcome,
            termination=qp.get("termination", ""),
            min_calls=query_int(request, "min_calls", minimum=0),
            max_calls=query_int(request, "max_calls", minimum=0),
            q=qp.get("q", "").strip(),
            page=query_int(request, "page") or 1,
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


def question_url(kind: str, rel: str, qid: str, rollout: int | None = None) -> str:
    """The URL of a question's view in run ``rel`` of ``kind`` (``eval`` or ``trajectories``):
    ``/eval/runs/a?question=QID`` (``&rollout=R``: that rollout alone)."""
    return run_url(kind, rel, question=qid, rollout=rollout)


def compare_url(a: str, b: str, question: str | None = None) -> str:
    """The URL comparing eval runs ``a`` and ``b`` (``question``: that question's rollouts in both)."""
    query = {"a": a, "b": b} if question is None else {"a": a, "b": b, "question": question}
    return "/compare?" + urlencode(query)


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


def _comparable(ctx: ViewContext, rel: str, grades: Grades, deadline: float) -> list[dict[str, str]]:
    """The other eval runs under the root that ``/compare`` can set beside run ``rel``: those
    with a graded question id in common with ``grades`` (runs of other questions, such as a test
    split and hand-written questions in one experiment folder, are not offered). Their scores
    are read at once, in the page's time (``deadline``, a :func:`time.monotonic` instant); a run
    whose scores cannot be read is left out."""

    def graded(g: Grades) -> set[str]:
        return {qid for (qid, _), grade in list(g.by_key.items()) if grade.correct is not None}

    runs = [r.rel for r in find_runs(ctx.root) if r.kind == "eval" and r.rel != rel]
    for other in runs:
        with contextlib.suppress(InputFormatError, InvalidArgumentError):
            grades_of(ctx.path(other), 0)  # every file read at once, not one after another
    mine, out = graded(grades), []
    for other in runs:
        try:
            theirs = grades_of(ctx.path(other), max(0.0, deadline - time.monotonic()))
        except (InputFormatError, InvalidArgumentError):
            continue
        if mine & graded(theirs):
            out.append({"rel": other, "url": compare_url(rel, other)})
    return out


def _table(ctx: ViewContext, request: Request, kind: str, rel: str) -> Response:
    path = ctx.path(rel)
    if kind == "eval" and not path.is_dir():
        raise InvalidArgumentError(f"{rel!r} is not an eval output folder")
    if kind == "trajectories" and not path.is_file():
        raise InvalidArgumentError(f"{rel!r} is not a trajectories file")
    traj = run_file(path, "trajectories.jsonl") if kind == "eval" else path
    wait_s = FULL_WAIT_S if context(request).whole_files else WAIT_S  # an export never writes a partial table
    deadline = time.monotonic() + wait_s
    if kind == "eval":
        grades_of(path, 0)  # both read at once: the page waits wait_s in all, not twice
    index = file_index(traj, wait_s)
    grades = grades_of(path, max(0.0, deadline - time.monotonic())) if kind == "eval" else NO_GRADES
    scores = score_files(path) if kind == "eval" else ScoreFiles()
    f = Filters.of(request)
    summary = summary_of(index, grades)
    kept = [r for r in summary.rows if _keep(r[1], r[3], f)]
    shown, page, pages = page_of(kept, f.page)
    base = run_url(kind, rel)
    k = max((len(r[0].rows) for r in summary.rows), default=0)
    others = _comparable(ctx, rel, grades, deadline) if kind == "eval" else []
    rows = [
        {
            "q": q,
            "url": question_url(kind, rel, q.id),
            "cells": [
                {
                    "class": cell,
                    "rollout": row.rollout,
                    "title": _cell_title(row, cell, g, scores.figures(_row_record(q.id, row))),
                    "url": question_url(kind, rel, q.id, rollout=row.rollout) + "#step-1",
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
        title=f"{'Evaluation' if kind == 'eval' else 'Trajectories'}: {rel}",
        kind=kind,
        rel=rel,
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
        grounding=_run_grounding(path) if kind == "eval" else "",
    )


def _run_grounding(run: Path) -> str:
    """The run's grounding sentence (:func:`~websailor.eval.grounding.describe_figures`) from
    its ``summary.json``; ``""`` when there is none yet, it is unreadable or has no figures."""
    summary = run / "summary.json"
    try:
        if summary.stat().st_size > HEADLINE_MAX_BYTES:
            return ""
        g = json.loads(summary.read_text(encoding="utf-8-sig")).get("grounding")
    except (OSError, ValueError, AttributeError):
        return ""
    return describe_figures(g) if isinstance(g, dict) and g else ""


def _cell_title(row: Row, cell: str, g: Grade | None, figures: str | None = None) -> str:
    pred = "no answer" if row.prediction is None else f"answer: {row.prediction[:200]}"
    parts = [f"rollout {row.rollout}: {cell.replace('_', ' ')}", f"termination: {row.termination}", pred]
    parts.append(f"{row.calls} tool call{'' if row.calls == 1 else 's'}")
    if g is not None and g.correct is None and g.ungraded_for:
        parts.append(f"ungraded for: {g.ungraded_for}")
    if figures:  # a report's RACE and FACT
        parts.append(figures)
    return "\n".join(parts)


def _row_record(qid: str, row: Row) -> dict[str, Any]:
    """What :meth:`~websailor.view.report_views.ScoreFiles.of` needs of an indexed rollout."""
    return {"id": qid, "rollout": row.rollout, "prediction": row.prediction, "termination": row.termination}


def _run_page(request: Request, kind: str, rel: str) -> Response:
    """The table of run ``rel``, or with ``?question=QID`` that question's rollouts.

    Raises:
        RequestValidationError: ``rollout`` without ``question``, or a bad parameter value.
        InvalidArgumentError: no such run or question (the 404 page).
    """
    ctx, rel = context(request), rel.rstrip("/") or "."
    qid = request.query_params.get("question")
    if qid is not None:
        return _question(ctx, request, kind, rel, qid)
    if "rollout" in request.query_params:
        raise bad_query("rollout", request.query_params["rollout"], "a rollout is shown with its question=ID")
    return _table(ctx, request, kind, rel)


@router.get("/eval")
def eval_root(request: Request) -> Response:
    """The eval run that is the root itself: its table, or a question (``?question=QID``)."""
    return _run_page(request, "eval", ".")


@router.get("/eval/{rel:path}")
def eval_run(request: Request, rel: str) -> Response:
    """An eval run's table of questions, or a question's rollouts side by side (``?question=QID``)."""
    return _run_page(request, "eval", rel)


@router.get("/trajectories")
def trajectories_root(request: Request) -> Response:
    """The trajectories file that is the root itself: its table, or a question (``?question=QID``)."""
    return _run_page(request, "trajectories", ".")


@router.get("/trajectories/{rel:path}")
def trajectories_run(request: Request, rel: str) -> Response:
    """A trajectories file's table of questions, or a question's rollouts (``?question=QID``)."""
    return _run_page(request, "trajectories", rel)


# -- a question's rollouts ---------------------------------------------------------------------


def _estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _thought_block(thought: str) -> dict[str, Any]:
    lines = thought.splitlines()
    long = len(lines) > THOUGHT_LINES or len(thought) > THOUGHT_CHARS
    head = "\n".join(lines[:THOUGHT_LINES])[:THOUGHT_CHARS]
    return {"text": thought, "collapsed": long, "head": head}


def steps_of(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps of a trajectory record: one per assistant turn of the whole conversation
    (the turns that context summaries replaced included, :func:`~websailor.view.summary_views.conversation`),
    in order, each ``{n, segment (the summaries before it), thought, tool, arguments (pretty
    JSON), answer, error, latency_s, call_error, env_failures, observation,
    observation_tokens (an estimate: characters / 4), token_ids, finish_reason}``; the i-th
    turn with a tool call is matched with ``tool_calls[i]``."""
    from websailor.agent.parse import parse_turn

    messages, summaries = conversation(rec)
    calls = [c for c in rec.get("tool_calls") or [] if isinstance(c, dict)]
    tools = rec.get("env") != "none"
    out, used, segment = [], 0, 0
    for i, m in enumerate(messages):
        if summary_index(m, summaries) is not None:
            segment += 1
            continue
        if m.get("role") != "assistant":
            continue
        text = m.get("content") if isinstance(m.get("content"), str) else ""
        action = parse_turn(text, tools=tools)
        step: dict[str, Any] = {
            "n": len(out) + 1,
            "segment": segment,
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
        if nxt is not None and nxt.get("role") != "assistant" and summary_index(nxt, summaries) is None:
            obs = nxt.get("content") if isinstance(nxt.get("content"), str) else ""
            step["observation"] = obs
            step["observation_tokens"] = _estimate_tokens(obs)
        out.append(step)
    return out


def rollout_view(
    rec: dict[str, Any], score: Grade | None, row: Row, label: str = "", scores: ScoreFiles | None = None
) -> dict[str, Any]:
    """What the template shows of one rollout: its record's figures, the prompt, the steps
    (:func:`steps_of`) in blocks around its context summaries
    (:func:`~websailor.view.summary_views.timeline`), the grade and the outcome class; for a
    report, the report (:func:`~websailor.view.report_views.report_view`, with its RACE and
    FACT records from ``scores``)."""
    messages = [m for m in rec.get("messages") or [] if isinstance(m, dict)]
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    steps = steps_of(rec)
    prefix = re.sub(r"[^a-z0-9]", "", (label or "").lower()) + "-"
    return {
        "label": label or f"rollout {rec['rollout']}",
        "rollout": rec["rollout"],
        "rec": rec,
        "outcome": outcome(row, score),
        "score": score,
        "system": system if isinstance(system, str) else None,
        "steps": steps,
        "timeline": timeline(steps, conversation(rec)[1]),
        "failed_summaries": failed_summaries(rec),
        "report": report_view(rec, scores, prefix),
        "grounding": describe_grounding(record_grounding(rec)),
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


def _rollouts_of(
    index: FileIndex, q: Question, grades: Grades, only: int | None, label: str = "", scores: ScoreFiles | None = None
) -> list[dict]:
    rows = q.ordered() if only is None else [r for r in q.ordered() if r.rollout == only]
    if only is not None and not rows:
        raise InvalidArgumentError(f"question {q.id!r} has no rollout {only}")
    return [
        rollout_view(
            read_row(index, row), grades.get((q.id, row.rollout)), row, f"{label}rollout {row.rollout}", scores
        )
        for row in rows
    ]


def _question(ctx: ViewContext, request: Request, kind: str, rel: str, qid: str) -> Response:
    path = ctx.path(rel)
    traj = run_file(path, "trajectories.jsonl") if kind == "eval" and path.is_dir() else path
    if not traj.is_file():
        raise InvalidArgumentError(
            f"{rel!r} is not {'an eval output folder' if kind == 'eval' else 'a trajectories file'}"
        )
    index = file_index(traj)
    q = _find(index, qid)
    only = query_int(request, "rollout", minimum=0)
    grades = grades_of(path, FULL_WAIT_S) if kind == "eval" else NO_GRADES
    scores = score_files(path) if kind == "eval" and path.is_dir() else ScoreFiles()
    rollouts = _rollouts_of(index, q, grades, only, scores=scores)
    return ctx.page(
        "eval_question.html",
        title=f"Question {q.id}",
        notes=scores.notes,
        q=q,
        back=run_url(kind, rel),
        back_label=rel,
        rollouts=rollouts,
        single=only is not None,
        all_url=question_url(kind, rel, q.id),
        rollout_urls={r.rollout: question_url(kind, rel, q.id, rollout=r.rollout) for r in q.ordered()},
    )


# -- two runs compared -------------------------------------------------------------------------


def _eval_dir(ctx: ViewContext, rel: str | None, which: str) -> Path:
    if not rel:
        raise InvalidArgumentError(f"give two eval runs to compare: ?a=RUN&b=RUN (no {which})")
    path = ctx.path(rel)
    if not path.is_dir() or not run_file(path, "scores.jsonl").is_file():
        raise InvalidArgumentError(f"{rel!r} is not a graded eval run (no scores.jsonl)")
    run_file(path, "trajectories.jsonl")
    return path


def _same_questions(a: Path, b: Path, names: tuple[str, str]) -> None:
    """:func:`websailor.eval.compare.check_same_questions` over the cached indexes."""
    trajs = [run_file(p, "trajectories.jsonl") for p in (a, b)]
    idx = [file_index(t, FULL_WAIT_S) for t in trajs if t.is_file()]
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
    """Two eval runs of the same questions: figures, and which questions flipped; with
    ``?question=QID``, that question's rollouts in both runs."""
    from websailor.eval.compare import compare_runs, load_scores

    ctx = context(request)
    a_rel, b_rel = request.query_params.get("a"), request.query_params.get("b")
    a, b = _eval_dir(ctx, a_rel, "a"), _eval_dir(ctx, b_rel, "b")
    qid = request.query_params.get("question")
    if qid is not None:
        return _compare_question(ctx, (a_rel or "", a), (b_rel or "", b), qid)
    names = (a_rel or "", b_rel or "")
    try:
        _same_questions(a, b, names)
        c = compare_runs(load_scores(a), load_scores(b), names)
    except InvalidArgumentError as e:
        return ctx.page("error.html", title="These runs cannot be compared", message=str(e), status_code=422)
    texts = {}
    for p in (a, b):
        traj = run_file(p, "trajectories.jsonl")
        if traj.is_file():
            for qid, q in file_index(traj, FULL_WAIT_S).questions.items():
                texts.setdefault(qid, q.question)

    def listed(ids: list[str]) -> list[dict]:
        return [{"id": i, "question": texts.get(i, ""), "url": compare_url(names[0], names[1], i)} for i in ids]

    return ctx.page(
        "eval_compare.html",
        title=f"Compare {a_rel} with {b_rel}",
        c=c,
        a=a_rel,
        b=b_rel,
        a_url=run_url("eval", names[0]),
        b_url=run_url("eval", names[1]),
        gained=listed(c.only_b),
        lost=listed(c.only_a),
        both=len(c.both),
        neither=len(c.neither),
        swap=compare_url(names[1], names[0]),
    )


def _compare_question(ctx: ViewContext, a: tuple[str, Path], b: tuple[str, Path], qid: str) -> Response:
    """A question's rollouts in two eval runs (``(rel, folder)`` each), side by side.

    Raises:
        InvalidArgumentError: a run has no such question (the 404 page).
    """
    rollouts: list[dict] = []
    q = None
    for label, (_, p) in (("A ", a), ("B ", b)):
        index = file_index(run_file(p, "trajectories.jsonl"))
        q = _find(index, qid)
        rollouts += _rollouts_of(index, q, grades_of(p, FULL_WAIT_S), None, label, score_files(p))
    assert q is not None
    a_rel, b_rel = a[0], b[0]
    return ctx.page(
        "eval_question.html",
        title=f"Question {qid}: {a_rel} (A) against {b_rel} (B)",
        q=q,
        back=compare_url(a_rel, b_rel),
        back_label=f"compare {a_rel} with {b_rel}",
        rollouts=rollouts,
        single=False,
        all_url=None,
        rollout_urls={},
    )
