"""A compact index of a trajectories JSONL, so that a 100,000-rollout file opens its first page
quickly and the server stays small: one streaming pass records, for each line, its byte offset
and length and the few fields the table shows (id, rollout, termination, prediction, tool
calls; the question and gold answer once per question). The question view reads its k full
records back by offset.

Why this streams the file: :func:`websailor.eval.scoring.read_trajectories` returns every parsed
record at once (a 100,000-trajectory file of a few KB each would take well over 1 GB). This
module keeps that reader's rules and its library checks, line by line: the file is streamed by
:class:`websailor.jsonio.JsonlStream` (the rules of
:func:`websailor.jsonio.read_appended_jsonl`: a UTF-8 byte-order mark is ignored; an unfinished
last line, a run being written or killed mid-write, is skipped and reported; a line longer than
:data:`websailor.jsonio.MAX_LINE_BYTES` is refused); each line is parsed by
:func:`websailor.jsonio.parse_line` and checked by :func:`websailor.eval.scoring.check_record`
(the checks of ``score``); a later record of an ``(id, rollout)`` supersedes one that
:func:`websailor.agent.runner.finished` does not accept, and any other duplicate is refused as
:func:`websailor.eval.scoring.read_trajectories` refuses it.

Indexes are cached per path and rebuilt when the file's size or modification time changes; a
file that only grew (a run still appending: the last :data:`websailor.jsonio.SIGNATURE_BYTES`
bytes indexed are unchanged, see :func:`websailor.jsonio.only_grew`) is indexed from where the
last pass stopped. An
index is built in a background thread: a request waits for it up to :data:`WAIT_S` seconds and
then shows the part read so far (the page says so and reloads itself), so that the first page of
a 100,000-trajectory file (700 MB) comes in about a second while the rest is read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.agent.runner import finished
from websailor.agent.trajectory import env_failed_calls
from websailor.errors import InputFormatError
from websailor.eval.scoring import check_record
from websailor.jsonio import JsonlStream, end_signature, only_grew, parse_line
from websailor.judge import Gold

#: Questions per page of the eval table.
PAGE_SIZE = 50
#: Seconds a request waits for an index being built before it shows the part read so far.
WAIT_S = 0.8
#: Lines the scanner indexes between two moments it lets readers in.
_CHUNK = 2000
_NONE = object()  # no answer known yet


@dataclass(slots=True)
class Row:
    """One indexed rollout: where its line is (``offset``, ``length`` in bytes, 1-based
    ``lineno``) and what the table shows of it."""

    offset: int
    length: int
    lineno: int
    rollout: int
    termination: str
    prediction: str | None
    calls: int
    done: bool  # :func:`websailor.agent.runner.finished`: a later record may not replace it
    env_error: str | None = None  # a malformed env_failures (refused if the record is kept)


@dataclass
class Question:
    """A question of the file: ``id``, its text, the gold answer as shown, and its rollouts
    by index."""

    id: str
    question: str
    gold: str
    rows: dict[int, Row] = field(default_factory=dict)

    def ordered(self) -> list[Row]:
        """Its rollouts by rollout index."""
        return [self.rows[r] for r in sorted(self.rows)]


@dataclass
class FileIndex:
    """The index of one trajectories file: its questions in file order, ``end`` (the byte
    offset after the last complete line indexed), ``skipped_tail`` (bytes of an unfinished
    last line left out, 0 when none), ``open_line`` (a whole last record without its newline
    was indexed: a later pass reads the file again from the start) and ``signature`` (the
    bytes before ``end``, see :func:`websailor.jsonio.end_signature`)."""

    path: Path
    size: int = 0
    mtime: float = 0.0
    inode: int = 0  # a file replaced (a new inode) is indexed again from the start
    end: int = 0
    lines: int = 0
    questions: dict[str, Question] = field(default_factory=dict)
    skipped_tail: int = 0
    open_line: bool = False
    signature: bytes = b""
    answers: dict[str, Any] = field(default_factory=dict)  # each question's raw gold answer
    version: int = 0  # bumped each time the scanner publishes more lines
    error: InputFormatError | None = None  # why the scan stopped, if it did
    complete: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rollouts(self) -> int:
        return sum(len(q.rows) for q in self.questions.values())


def is_report(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` is a report task's trajectory (``task: report``): it has no gold answer
    to check, and shows none unless it carries one."""
    return rec.get("task") == "report"


def gold_text(answer: Any) -> str:
    """The gold answer of a record as shown: the answer, then its aliases (``Nile (also: the
    Nile river)``); ``answer`` as given when it cannot be parsed; ``""`` for none (a report)."""
    if answer is None:
        return ""
    try:
        return _shown(Gold.parse(answer))
    except ValueError:
        return str(answer)


def _shown(g: Gold) -> str:
    return g.answer + (f" (also: {', '.join(g.aliases)})" if g.aliases else "")


def _index_line(index: FileIndex, raw: bytes, offset: int, lineno: int) -> None:
    """Add the record on line ``lineno`` (its ``raw`` bytes at ``offset``) to ``index``.

    Raises:
        InputFormatError: not a trajectory record, or a duplicate (see the module's rules).
    """
    path = index.path
    rec = parse_line(path, lineno, raw, "a trajectory record")
    known = index.answers.get(str(rec.get("id")), _NONE)  # a question's k records share one answer: parse it once
    same = known is not _NONE and known == rec.get("answer")
    gold = check_record(path, lineno, rec, gold_checked=same or is_report(rec))
    qid, rollout = str(rec["id"]), rec["rollout"]
    q = index.questions.get(qid)
    if q is None:
        q = index.questions[qid] = Question(qid, rec["question"], _shown(gold) if gold else gold_text(rec["answer"]))
        index.answers[qid] = rec["answer"]
    earlier = q.rows.get(rollout)
    if earlier is not None and earlier.done and q.question == rec["question"]:
        raise InputFormatError(
            f"{path} line {lineno}: question {qid!r} rollout {rollout} also appears in {path} line "
            f"{earlier.lineno}; score each run separately"
        )
    try:
        env_failed_calls(rec)
        env_error = None
    except ValueError as e:
        env_error = f"{path} line {lineno}: {e}"
    q.question = rec["question"]
    if gold is not None and index.answers[qid] != rec["answer"]:  # the answer changed: parsed above
        q.gold, index.answers[qid] = _shown(gold), rec["answer"]
    q.rows[rollout] = Row(
        offset,
        len(raw),
        lineno,
        rollout,
        rec["termination"],
        rec["prediction"],
        int(rec.get("num_tool_calls") or 0),
        finished(rec, rec["question"]),
        env_error,
    )


def _scan(index: FileIndex) -> None:
    """Index the lines of ``index.path`` from ``index.end`` on (see the module's rules),
    publishing what it has every :data:`_CHUNK` lines (readers hold ``index.lock``)."""
    stream = JsonlStream(index.path, "a trajectory record", index.end, index.lines)
    index.lock.acquire()
    try:
        for n, (offset, lineno, raw) in enumerate(stream.lines(), 1):
            if raw.strip():
                _index_line(index, raw, offset, lineno)
            index.end, index.lines, index.open_line = stream.end, stream.lineno, stream.open_line
            if n % _CHUNK == 0:
                index.version += 1
                index.lock.release()
                time.sleep(0)  # let a waiting reader take the lock
                index.lock.acquire()
        index.skipped_tail = stream.unfinished.size if stream.unfinished else 0
        for q in index.questions.values():  # the kept records only: a rerun supersedes a malformed one
            for row in q.rows.values():
                if row.env_error:
                    raise InputFormatError(row.env_error)
        index.signature = end_signature(index.path, index.end)
    finally:
        index.version += 1
        index.lock.release()


def _grew(old: FileIndex, size: int) -> bool:
    """Whether the file only grew since ``old`` was made (its indexed part is intact and ends
    with a complete line), so that a new pass may start where ``old`` ended."""
    if old.skipped_tail or old.open_line or old.error or size <= old.size:
        return False  # an append adds bytes: a file as large as before (or smaller) but changed was rewritten
    return only_grew(old.path, old.end, old.signature)


_CACHE: dict[Path, FileIndex] = {}
_LOCK = threading.Lock()


def read_in_background(target: Any, work: Callable[[], None]) -> None:
    """Run ``work``, which fills ``target`` (an index with ``path``, ``error`` and a
    ``complete`` event), as the body of a reader thread: why it stopped goes to
    ``target.error`` (an unreadable file as an :class:`~websailor.errors.InputFormatError`
    naming it), and ``target.complete`` is set in any case, so a waiting page never hangs."""
    try:
        work()
    except InputFormatError as e:
        target.error = e
    except OSError as e:
        target.error = InputFormatError(f"{target.path} cannot be read: {e}")
    finally:
        target.complete.set()


def _run(index: FileIndex) -> None:
    read_in_background(index, lambda: _scan(index))


def file_index(path: Path, wait_s: float = WAIT_S) -> FileIndex:
    """The index of the trajectories file ``path``, cached per (path, size, mtime), built in a
    background thread; waits up to ``wait_s`` for it, then returns what is indexed so far
    (``index.complete`` not set yet: the caller says the table is partial). A file that only
    grew is indexed from where the last pass ended.

    Raises:
        InputFormatError: not a regular file, or a line that is not a trajectory record (the
            message names the file and the line).
    """
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"trajectory file {path} does not exist or is not a file")
    st = path.stat()
    with _LOCK:
        index = _CACHE.get(path)
        busy = index is not None and not index.complete.is_set()
        if index is None or (
            not busy and (index.size, index.mtime, index.inode) != (st.st_size, st.st_mtime, st.st_ino)
        ):
            old, index = index, FileIndex(path, st.st_size, st.st_mtime, inode=st.st_ino)
            if old is not None and old.inode == st.st_ino and _grew(old, st.st_size):
                with old.lock:
                    index.end, index.lines, index.signature = old.end, old.lines, old.signature
                    index.answers = dict(old.answers)
                    index.questions = {
                        k: Question(q.id, q.question, q.gold, dict(q.rows)) for k, q in old.questions.items()
                    }
            _CACHE[path] = index
            threading.Thread(target=_run, args=(index,), name=f"index {path.name}", daemon=True).start()
    index.complete.wait(wait_s)
    if index.error is not None:
        raise index.error
    return index


def read_row(index: FileIndex, row: Row) -> dict[str, Any]:
    """The full record of an indexed rollout, read back by its offset and checked again.

    Raises:
        InputFormatError: the line is no longer a trajectory record (the file was rewritten).
    """
    with index.path.open("rb") as fh:
        fh.seek(row.offset)
        raw = fh.read(row.length)
    rec = parse_line(index.path, row.lineno, raw, "a trajectory record (was the file rewritten?)")
    check_record(index.path, row.lineno, rec, gold_checked=is_report(rec))
    return rec


def page_of(items: list, page: int, size: int = PAGE_SIZE) -> tuple[list, int, int]:
    """``(items of page, page, pages)``: ``page`` (1-based) clamped to ``1..pages``."""
    pages = max(1, -(-len(items) // size))
    page = min(max(1, page), pages)
    return items[(page - 1) * size : page * size], page, pages
