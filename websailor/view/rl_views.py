"""Views of ``train rl`` runs (``train sft`` runs: :mod:`websailor.view.sft_views`).

The run's path is the whole URL path after ``/rl/`` (``/rl`` for the root itself); the step or
rollout shown is in the query string, so no run path can be read as a step or a rollout.

- ``GET /rl/{rel}``: the step log (``rl_log.jsonl``, read with
  :func:`websailor.train.rl_log.read_step_log`: an unfinished last line is left out and the page
  says so) as interactive SVG curves drawn by
  ``static/charts.js``, following the run while it is written (it polls ``GET /api/rl/{rel}``);
  the steps of ``rollouts.jsonl`` link to their groups.
- ``GET /rl/{rel}?step=N``: the groups of step ``N`` (numbered from 1 in file order), each
  rollout (numbered from 1 in its group) with its reward, advantage and whether it entered the
  loss (better ones green, worse ones red), linking to
- ``GET /rl/{rel}?step=N&group=G&rollout=R``: one rollout's steps (thought, tool call,
  observation, final answer). "step N · group G · rollout R" is how every page names a rollout.

``rollouts.jsonl`` grows by a batch per step and can reach gigabytes, so it is not held in
memory: :class:`RolloutIndex` streams it with :class:`websailor.jsonio.JsonlStream` (the rules
of :func:`websailor.jsonio.read_appended_jsonl`), keeps each record's byte offset and a few small
figures, and extends itself by the bytes appended since it last looked; it reads the file again
from the start when it was replaced, cut back, or rewritten in place (the bytes before where it
stopped changed: :func:`websailor.jsonio.only_grew`), as a resumed run rewrites it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from websailor.agent.parse import parse_turn
from websailor.agent.trajectory import env_failed_calls
from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.jsonio import JsonlStream, LineTooLongError, end_signature, loads_object, only_grew
from websailor.train.rl_log import LOG_FILE, StepLog, read_step_log
from websailor.view.context import (
    bad_query,
    context,
    finite,
    json_file,
    number,
    plural,
    query_int,
    relative,
    run_folder,
    run_url,
    script_json,
)
from websailor.view.discover import run_file

router = APIRouter()

ROLLOUTS_FILE = "rollouts.jsonl"
SETTINGS_FILE = "rl_settings.json"

#: curves of the RL page, in panel order: ``(step log name, title)``
CURVES: tuple[tuple[str, str], ...] = (
    ("reward/mean", "mean reward"),
    ("reward/accuracy", "accuracy"),
    ("groups/zero_spread_share", "zero-spread groups (share)"),
    ("groups/duplicated", "duplicated groups"),
    ("entropy", "entropy"),
    ("clip_ratio/region_mean", "clip fraction"),
    ("rollouts/response_tokens", "model tokens per rollout"),
    ("rollouts/tool_calls", "tool calls per rollout"),
    ("time/step_s", "seconds per step"),
    ("termination/max_calls", "rollouts ended at the call limit (share)"),
    ("rollouts/repeated_calls", "repeated tool calls per rollout"),
    ("sampling/sampling_logp_difference/mean", "engine log-prob difference (mean)"),
    ("groups/env_failed", "groups with environment failures"),
)
#: curves drawn only when the log has them (a termination is logged once a rollout ended so; the
#: engine difference once rollouts carry the engine's log-probabilities; repeated calls by runs
#: since they were logged)
OPTIONAL_CURVES = frozenset(
    {"groups/env_failed", "termination/max_calls", "rollouts/repeated_calls", "sampling/sampling_logp_difference/mean"}
)
#: fields a rollout record must have (``websailor.train.rl.rollouts`` writes them)
ROLLOUT_FIELDS = ("step", "id", "rollout", "question", "messages", "reward", "advantage", "in_loss")
#: most problems (bad lines) of a rollouts file kept for the page
MAX_PROBLEMS = 20


def _curve_value(record: dict, key: str) -> float | None:
    """``record[key]`` as a curve point: a ``termination/`` share the step did not log is 0 (a
    step logs only the terminations that occurred); the engine difference of a step that
    trained on nothing is no point (TRL logs 0 over no tokens)."""
    if key.startswith("termination/") and key not in record and any(k.startswith("termination/") for k in record):
        return 0.0
    if key.startswith("sampling/") and record.get("rollouts/in_loss_share") == 0:
        return None
    return number(record.get(key))


def log_curves(records: list[dict]) -> dict[str, Any]:
    """The page's curve data from step records: ``{"steps": N, "last_step": s, "curves": [{key,
    title, points: [[step, value], ...]}]}`` (values that are not finite numbers are left out, a
    termination a step did not log is 0: :func:`_curve_value`; an optional curve with no points
    is not listed)."""
    curves = []
    for key, title in CURVES:
        points = [[r["step"], v] for r in records if (v := _curve_value(r, key)) is not None]
        if key in OPTIONAL_CURVES and not points:
            continue
        curves.append({"key": key, "title": title, "points": points})
    return {"steps": len(records), "last_step": records[-1]["step"] if records else None, "curves": curves}


def _read_log(run: Path) -> StepLog:
    """The run's step log (none when it has no ``rl_log.jsonl`` yet).

    Raises:
        InputFormatError: as :func:`websailor.train.rl_log.read_step_log`.
    """
    path = run_file(run, LOG_FILE)
    return read_step_log(path) if path.is_file() else StepLog(path, [], None)


def _unfinished(log: StepLog) -> str | None:
    """What the page says of the log's unfinished last line, ``None`` when there is none."""
    if log.unfinished is None:
        return None
    return f"{LOG_FILE} line {log.unfinished.lineno} is unfinished ({log.unfinished.size} bytes): a run still writing it, or one killed mid-write; the complete steps are shown"


# -- the rollouts file, indexed by byte offset --------------------------------------------------
@dataclass
class RolloutRow:
    """What the step page shows of one rollout record (the record itself stays in the file)."""

    line: int
    offset: int
    step: int
    id: str
    rollout: int
    question: str
    prediction: str | None
    gold: str
    correct: bool | None
    reward: float | None
    advantage: float | None
    in_loss: bool
    termination: str
    tool_calls: int
    env_failed_calls: int


def _gold_text(answer: Any) -> str:
    if isinstance(answer, dict):
        return str(answer.get("answer", ""))
    return "" if answer is None else str(answer)


def _row(path: Path, line: int, offset: int, rec: dict) -> RolloutRow:
    """A :class:`RolloutRow` of record ``rec``.

    Raises:
        InputFormatError: a field of :data:`ROLLOUT_FIELDS` is missing or of the wrong type.
    """
    where = f"{path} line {line}"
    missing = [f for f in ROLLOUT_FIELDS if f not in rec]
    if missing:
        raise InputFormatError(f"{where}: not a rollout record (no {', '.join(missing)})")
    if isinstance(rec["step"], bool) or not isinstance(rec["step"], int):
        raise InputFormatError(f"{where}: 'step' must be an integer, got {rec['step']!r}")
    if not isinstance(rec["question"], str) or not isinstance(rec["messages"], list):
        raise InputFormatError(f"{where}: 'question' must be text and 'messages' a list")
    try:
        env_calls = env_failed_calls(rec)
    except ValueError as e:
        raise InputFormatError(f"{where}: {e}") from None
    return RolloutRow(
        line=line,
        offset=offset,
        step=rec["step"],
        id=str(rec["id"]),
        rollout=rec["rollout"] if isinstance(rec["rollout"], int) else -1,
        question=rec["question"][:2000],
        prediction=rec.get("prediction") if isinstance(rec.get("prediction"), str) else None,
        gold=_gold_text(rec.get("answer"))[:500],
        correct=rec.get("correct") if isinstance(rec.get("correct"), bool) else None,
        reward=number(rec["reward"]),
        advantage=number(rec["advantage"]),
        in_loss=rec["in_loss"] is True,
        termination=str(rec.get("termination", "")),
        tool_calls=rec.get("num_tool_calls") if isinstance(rec.get("num_tool_calls"), int) else 0,
        env_failed_calls=env_calls,
    )


@dataclass
class RolloutIndex:
    """The records of one ``rollouts.jsonl`` by step: each line's offset and
    :class:`RolloutRow`; ``problems`` are lines that are not rollout records (``"FILE line N:
    why"``; the others stay readable). The file is streamed by
    :class:`websailor.jsonio.JsonlStream`, under the rules of
    :func:`websailor.jsonio.read_appended_jsonl`: an unfinished last line is left out until it
    is finished, and a line longer than :data:`websailor.jsonio.MAX_LINE_BYTES` is a problem
    (the file is not read past it)."""

    path: Path
    size: int = 0  # bytes read so far (up to the end of the last line with its newline)
    lines: int = 0  # the number of that line
    inode: int = 0
    seen: tuple[int, float] = (0, 0.0)  # the file's size and modification time at the last look
    signature: bytes = b""  # the bytes before ``size`` (websailor.jsonio.end_signature)
    rows: list[RolloutRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    kept: tuple[int, int] = (0, 0)  # rows and problems of the lines before ``size``
    lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> RolloutIndex:
        """Read what was appended since the last call; all of it again when the file was
        replaced, cut back (as a resumed run cuts it) or rewritten in place: modified without
        growing, or the bytes before where the last read ended changed
        (:func:`websailor.jsonio.only_grew`)."""
        with self.lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                st = None
            rewritten = st is not None and st.st_mtime != self.seen[1] and st.st_size <= self.seen[0]
            if st is None or st.st_ino != self.inode or rewritten or not self._only_grew(st.st_size):
                self.size, self.lines, self.signature, self.rows, self.problems = 0, 0, b"", [], []
                self.kept, self.inode = (0, 0), st.st_ino if st else 0
            self.seen = (st.st_size, st.st_mtime) if st else (0, 0.0)
            if st is not None and st.st_size > self.size:
                self._read(st.st_size)
            return self

    def _only_grew(self, size: int) -> bool:
        return size >= self.size and (not self.size or only_grew(self.path, self.size, self.signature))

    def _read(self, size: int) -> None:
        """Index the lines from :attr:`size` on (``size``: the file's size now)."""
        del self.rows[self.kept[0] :], self.problems[self.kept[1] :]  # a last line read without its newline
        stream = JsonlStream(self.path, "a rollout record", self.size, self.lines)
        try:
            for offset, lineno, raw in stream.lines():
                self._add(raw, offset, lineno)
                if not stream.open_line:
                    self.size, self.lines, self.kept = stream.end, stream.lineno, (len(self.rows), len(self.problems))
        except LineTooLongError as e:
            self._problem(str(e))
            self.size, self.kept = size, (len(self.rows), len(self.problems))  # not read again
        except InputFormatError as e:  # a last line without its newline that is no JSON object
            self._problem(str(e))
        self.signature = end_signature(self.path, self.size)

    def _add(self, raw: bytes, offset: int, lineno: int) -> None:
        if not raw.strip():
            return
        try:
            rec = loads_object(raw.decode("utf-8"))
            self.rows.append(_row(self.path, lineno, offset, rec))
        except (ValueError, UnicodeDecodeError) as e:
            self._problem(f"{self.path} line {lineno} is not a rollout record ({e})")
        except InputFormatError as e:
            self._problem(str(e))

    def _problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)

    def steps(self) -> list[tuple[int, int]]:
        """``[(step, rollouts)]`` in step order."""
        counts: dict[int, int] = {}
        for r in self.rows:
            counts[r.step] = counts.get(r.step, 0) + 1
        return sorted(counts.items())

    def record(self, line: int) -> dict:
        """The whole record on ``line`` (read from the file at its offset).

        Raises:
            InvalidArgumentError: no rollout record on that line.
        """
        row = next((r for r in self.rows if r.line == line), None)
        if row is None:
            raise InvalidArgumentError(f"{self.path.name} has no rollout record on line {line}")
        with self.path.open("rb") as fh:
            fh.seek(row.offset)
            raw = fh.readline()
        try:
            return loads_object(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:  # the file was rewritten under us
            raise InputFormatError(f"{self.path} line {line} is not a rollout record ({e})") from None


_INDEXES: dict[Path, RolloutIndex] = {}
_INDEXES_LOCK = threading.Lock()


def rollout_index(run: Path) -> RolloutIndex:
    """The refreshed :class:`RolloutIndex` of ``run/rollouts.jsonl`` (one per file per process)."""
    path = run_file(run, ROLLOUTS_FILE)
    with _INDEXES_LOCK:
        index = _INDEXES.setdefault(path, RolloutIndex(path))
    return index.refresh()


def _group_size(run: Path) -> int | None:
    try:
        g = json.loads(run_file(run, SETTINGS_FILE).read_text(encoding="utf-8-sig")).get("group_size")
    except (OSError, ValueError, AttributeError, InvalidArgumentError):
        return None
    return g if isinstance(g, int) and g > 0 else None


def groups_of(rows: list[RolloutRow], group_size: int | None) -> list[list[RolloutRow]]:
    """A step's rollouts in groups: contiguous records of one question, cut every
    ``group_size`` records when the run's settings give it (a question drawn twice in a batch
    makes two groups)."""
    groups: list[list[RolloutRow]] = []
    for r in rows:
        last = groups[-1] if groups else None
        if last and last[-1].id == r.id and (group_size is None or len(last) < group_size):
            last.append(r)
        else:
            groups.append([r])
    return groups


def verdict_class(row: RolloutRow, group: list[RolloutRow]) -> str:
    """``good`` (a better rollout of its group: positive advantage, or a reward above the
    group's mean when no advantage was given), ``worse`` (the opposite) or ``even``."""
    if row.advantage is not None:
        return "good" if row.advantage > 0 else "worse" if row.advantage < 0 else "even"
    known = [g.reward for g in group if g.reward is not None]
    if row.reward is None or not known:
        return "even"
    mean = sum(known) / len(known)
    return "good" if row.reward > mean else "worse" if row.reward < mean else "even"


# -- one rollout's steps ------------------------------------------------------------------------
def timeline(rec: dict) -> list[dict[str, Any]]:
    """The steps of a trajectory record: ``{kind, ...}`` with kind ``system``, ``question``,
    ``model`` (``thought``, ``tool`` name, ``arguments`` as JSON text, ``answer``, ``error``,
    ``text``) or ``observation`` (``text``, ``chars``)."""
    out: list[dict[str, Any]] = []
    tools = rec.get("env") != "none"
    for m in rec.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role, text = m.get("role"), str(m.get("content") or "")
        if role == "system":
            out.append({"kind": "system", "text": text})
        elif role == "assistant":
            action = parse_turn(text, tools=tools)
            call = action.tool_call
            out.append(
                {
                    "kind": "model",
                    "thought": action.thought,
                    "tool": call.name if call else None,
                    "arguments": (call.code if call and call.code else json.dumps(call.arguments, ensure_ascii=False))
                    if call
                    else None,
                    "answer": action.answer,
                    "error": action.error,
                    "text": text,
                }
            )
        elif role in ("user", "tool"):
            kind = "question" if not any(s["kind"] in ("model", "question") for s in out) else "observation"
            out.append({"kind": kind, "text": text, "chars": len(text)})
    return out


def rollout_name(step: int, group: int, rollout: int) -> str:
    """How every page names a rollout of a run: ``step 3 · group 2 · rollout 1`` (groups are
    numbered from 1 in the step's file order, rollouts from 1 in their group)."""
    return f"step {step} · group {group} · rollout {rollout}"


def step_groups(run: Path, index: RolloutIndex, step: int) -> list[list[RolloutRow]]:
    """The groups of ``step`` (:func:`groups_of` with the run's ``group_size``), in file order."""
    return groups_of([r for r in index.rows if r.step == step], _group_size(run))


# -- routes -------------------------------------------------------------------------------------
def _api_log(request: Request, rel: str) -> Response:
    run = run_folder(context(request), rel)
    try:
        log = _read_log(run)
    except InputFormatError as e:
        return JSONResponse({"error": relative(str(e), context(request).root)}, status_code=422)
    data = log_curves(log.records)
    data["unfinished"] = _unfinished(log)
    data["rollout_steps"] = rollout_index(run).steps()
    return JSONResponse(finite(data))


@router.get("/api/rl")
def api_root_log(request: Request) -> Response:
    """The curve data of :func:`log_curves` of the RL run that is the root itself."""
    return _api_log(request, ".")


@router.get("/api/rl/{rel:path}")
def api_log(rel: str, request: Request) -> Response:
    """The curve data of :func:`log_curves` (the page polls it)."""
    return _api_log(request, rel)


def _rl_page(request: Request, rel: str) -> Response:
    """The run page, a step (``?step=N``) or a rollout (``?step=N&group=G&rollout=R``).

    Raises:
        RequestValidationError: a parameter that is not a whole number (``group`` and
            ``rollout``: at least 1), or ``group``/``rollout`` without the others.
        InvalidArgumentError: no such run, group or rollout (the 404 page).
    """
    rel = rel.rstrip("/") or "."
    step = query_int(request, "step")
    group = query_int(request, "group", minimum=1)
    rollout = query_int(request, "rollout", minimum=1)
    if group is None and rollout is None:
        return _run(request, rel) if step is None else _step(request, rel, step)
    for name, value in (("step", step), ("group", group), ("rollout", rollout)):
        if value is None:
            raise bad_query(name, request.query_params.get(name), "a rollout is named by its step, group and rollout")
    assert step is not None and group is not None and rollout is not None
    return _rollout(request, rel, step, group, rollout)


@router.get("/rl", response_class=HTMLResponse)
def rl_root(request: Request) -> Response:
    """The RL run that is the root itself (its curves, a step or a rollout)."""
    return _rl_page(request, ".")


@router.get("/rl/{rel:path}", response_class=HTMLResponse)
def rl_run(rel: str, request: Request) -> Response:
    """An RL run's curves and steps, one step's groups (``?step=N``) or one rollout
    (``?step=N&group=G&rollout=R``)."""
    return _rl_page(request, rel)


def _step(request: Request, rel: str, n: int) -> Response:
    """The groups of step ``n``."""
    ctx = context(request)
    run = run_folder(ctx, rel)
    index = rollout_index(run)
    recorded = [s for s, _ in index.steps()]
    if n not in recorded:  # a step not written yet, or never: the 404 page says which steps there are
        have = (
            f"steps {recorded[0]} to {recorded[-1]}"
            if len(recorded) > 1
            else f"step {recorded[0]}"
            if recorded
            else "none"
        )
        raise InvalidArgumentError(f"{rel} has no rollouts of step {n} in {ROLLOUTS_FILE} (recorded: {have})")
    groups = [
        {
            "n": gi,
            "rows": [
                (r, verdict_class(r, g), ri, run_url("rl", rel, step=n, group=gi, rollout=ri))
                for ri, r in enumerate(g, 1)
            ],
            "question": g[0].question,
            "id": g[0].id,
            "gold": g[0].gold,
        }
        for gi, g in enumerate(step_groups(run, index, n), 1)
    ]
    pos = recorded.index(n)
    return ctx.page(
        "rl_step.html",
        title=f"{rel} · step {n}",
        rel=rel,
        step=n,
        groups=groups,
        problems=index.problems,
        prev_step=recorded[pos - 1] if pos > 0 else None,
        next_step=recorded[pos + 1] if pos < len(recorded) - 1 else None,
        status_code=200 if groups or not index.problems else 422,
    )


def _rollout(request: Request, rel: str, step: int, group: int, rollout: int) -> Response:
    """Rollout ``rollout`` of group ``group`` of step ``step``.

    Raises:
        InvalidArgumentError: the step has no such group, or the group no such rollout.
    """
    ctx = context(request)
    run = run_folder(ctx, rel)
    index = rollout_index(run)
    groups = step_groups(run, index, step)
    if group > len(groups):
        raise InvalidArgumentError(f"step {step} of {rel} has {plural(len(groups), 'group')}: no group {group}")
    if rollout > len(groups[group - 1]):
        has = plural(len(groups[group - 1]), "rollout")
        raise InvalidArgumentError(f"group {group} of step {step} of {rel} has {has}: no rollout {rollout}")
    row = groups[group - 1][rollout - 1]
    rec = index.record(row.line)
    name = rollout_name(step, group, rollout)
    return ctx.page(
        "rl_rollout.html",
        title=f"{rel} · {name}",
        rel=rel,
        row=row,
        group=group,
        rollout_name=name,
        rec=rec,
        steps=timeline(rec),
        file=ROLLOUTS_FILE,
    )


def _run(request: Request, rel: str) -> Response:
    """The run's curves and its steps."""
    ctx = context(request)
    run = run_folder(ctx, rel)
    log = _read_log(run)
    data = log_curves(log.records)
    index = rollout_index(run)
    data["rollout_steps"] = index.steps()
    try:  # the curves do not need the settings: a bad settings file is said, not fatal
        settings, settings_error = json_file(run_file(run, SETTINGS_FILE)), None
    except (InputFormatError, InvalidArgumentError) as e:
        settings, settings_error = None, str(e)
    return ctx.page(
        "rl_run.html",
        settings_error=settings_error,
        title=f"RL run {rel}",
        rel=rel,
        data=script_json(data),
        logged=data["steps"],
        steps=index.steps(),
        problems=index.problems,
        settings=settings,
        unfinished=_unfinished(log),
    )
