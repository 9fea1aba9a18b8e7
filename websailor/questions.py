"""Question files, the one loader for every command: each layout becomes a list of
:class:`Question` (id, question, gold answer). ``run --questions``, ``eval --bench``,
``traj build --source expert`` and ``train rl --data`` all read through :func:`load_questions`.

Layouts (``FORMAT:PATH``, or a path whose layout is recognised, or a name):

* ``jsonl``: generic JSONL with ``question`` and ``answer`` (optional ``aliases``, ``id``);
  ``run`` also takes it without answers. Every line is checked before anything runs; a record
  without an ``id`` is named ``line<N>`` after its line.
* ``nq``: Natural-Questions style JSONL, ``question`` and ``golden_answers`` (alternatives).
* ``synth``: our SailorFog-QA-V2 items (``split`` selects train or test; default test).
* ``browsecomp``: OpenAI's BrowseComp CSV (``problem``, ``answer``, ``canary``, base64 of the
  text XORed with the SHA-256 of the row's canary, repeated).
* ``browsecomp-zh``: BrowseComp-ZH, ``.xlsx`` or ``.csv`` (``Question``, ``Answer``,
  ``canary``), encrypted the same way.
* ``xbench``: xbench-DeepSearch CSV (``prompt``, ``answer``, ``canary``: base64 of the text
  XORed with the canary's own bytes, repeated).
* ``gaia``: GAIA ``metadata.jsonl`` (``task_id``, ``Question``, ``Final answer``); items
  with an attached file are dropped (text only).
* ``hle``: Humanity's Last Exam, ``.parquet`` or JSONL (``id``, ``question``, ``answer``,
  ``image``); items with an image are dropped (text only).
* ``fanoutqa``: FanOutQA JSON (a list of ``id``, ``question``, ``answer``; list and mapping
  answers are list answers). The name ``fanoutqa-dev`` fetches the dev set from the
  ``fanoutqa`` wheel on PyPI (checked by SHA-256, never installed).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from websailor.errors import InputFormatError
from websailor.jsonio import loads_object
from websailor.judge.gold import Gold
from websailor.log import get_logger
from websailor.text import clean_text

logger = get_logger(__name__)

FORMATS = ("jsonl", "nq", "synth", "browsecomp", "browsecomp-zh", "xbench", "gaia", "hle", "fanoutqa")
FANOUTQA_WHEEL = "fanoutqa==1.1.1"
FANOUTQA_WHEEL_FILE = "fanoutqa-1.1.1-py3-none-any.whl"
FANOUTQA_WHEEL_SHA256 = "1d97c901e62e90507ac0c039a357895308bed1c6a5b49207ae81d81eac6fd795"


#: Problems listed in one error message about a file's lines.
MAX_LISTED_PROBLEMS = 5


@dataclass
class Question:
    """One question of a questions file or benchmark.

    Attributes:
        id: the record's id (``line<N>`` for a JSONL record without one, ``<file stem>-<i>``
            for a table row without one).
        question: the text (NFC, lone surrogates replaced).
        gold: the gold answer every judge reads; ``None`` only for a file read with
            ``require_answer=False`` whose record has no usable answer.
        meta: what else the source has (split, topic, level, category).
        answer: the gold answer as trajectory records carry it: as the file gives it (``run``);
            callers that grade set it to ``gold.to_dict()`` (:meth:`with_gold_record`).
    """

    id: str
    question: str
    gold: Gold | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    answer: Any = None

    def with_gold_record(self) -> Question:
        """This question with ``answer`` set to the gold record ``{"answer", "aliases",
        "parts"}``, so a trajectory can be regraded on its own."""
        return replace(self, answer=self.gold.to_dict() if self.gold is not None else None)


# -- decryption ---------------------------------------------------------------------------------
def _xor(data: bytes, key: bytes) -> bytes:
    return bytes(b ^ key[i % len(key)] for i, b in enumerate(data))


def sha256_xor_decrypt(ciphertext_b64: str, password: str) -> str:
    """BrowseComp's scheme: base64 text XORed with SHA-256(password) repeated.

    Raises:
        ValueError: not base64, or the result is not UTF-8 text (a wrong password).
    """
    return _decode(_xor(base64.b64decode(ciphertext_b64, validate=True), hashlib.sha256(password.encode()).digest()))


def canary_xor_decrypt(ciphertext_b64: str, password: str) -> str:
    """xbench's scheme: base64 text XORed with the password's UTF-8 bytes repeated.

    Raises:
        ValueError: not base64, or the result is not UTF-8 text (a wrong password).
    """
    if not password:
        raise ValueError("empty canary")
    return _decode(_xor(base64.b64decode(ciphertext_b64, validate=True), password.encode()))


def sha256_xor_encrypt(plaintext: str, password: str) -> str:
    """Inverse of :func:`sha256_xor_decrypt` (tests build their own encrypted samples)."""
    return base64.b64encode(_xor(plaintext.encode(), hashlib.sha256(password.encode()).digest())).decode()


def canary_xor_encrypt(plaintext: str, password: str) -> str:
    """Inverse of :func:`canary_xor_decrypt`."""
    return base64.b64encode(_xor(plaintext.encode(), password.encode())).decode()


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text):
        raise ValueError("control characters in the decrypted text")
    return text


# -- readers ------------------------------------------------------------------------------------
def _rows_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def _rows_xlsx(path: Path) -> list[dict[str, Any]]:
    import openpyxl

    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    rows = wb.active.iter_rows(values_only=True)
    header = [str(h).strip() if h is not None else "" for h in next(rows, [])]
    return [dict(zip(header, r)) for r in rows if any(v is not None for v in r)]


def _problems(path: Path, problems: list[str]) -> InputFormatError:
    more = f" (and {len(problems) - MAX_LISTED_PROBLEMS} more)" if len(problems) > MAX_LISTED_PROBLEMS else ""
    return InputFormatError(f"{path}: " + "; ".join(problems[:MAX_LISTED_PROBLEMS]) + more)


def _rows_jsonl(path: Path) -> tuple[list[dict], list[int]]:
    """The records of a JSONL file and their line numbers. Every line is checked and up to
    :data:`MAX_LISTED_PROBLEMS` problems are reported at once; a last line without its
    newline that is not JSON (a file still being written) is skipped with a warning."""
    lines = path.read_bytes().split(b"\n")
    rows: list[dict] = []
    numbers: list[int] = []
    problems: list[str] = []
    for lineno, raw in enumerate(lines, start=1):
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(f"line {lineno}: not valid UTF-8 (byte {raw[e.start]:#04x})")
            continue
        try:
            obj = loads_object(line)
        except ValueError as e:
            if lineno == len(lines) and str(e).startswith("not valid JSON"):
                logger.warning("%s: skipping an unfinished last line", path)
                continue
            problems.append(f"line {lineno}: {e}")
            continue
        rows.append(obj)
        numbers.append(lineno)
    if problems:
        raise _problems(path, problems)
    return rows, numbers


def _rows_parquet(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _rows_json(path: Path) -> list[dict]:
    data = json.loads(path.read_text(encoding="utf-8-sig"))
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise InputFormatError(f"{path}: expected a JSON list of objects")
    return data


#: Readers of the files that are not JSONL, by suffix (any other file is read as JSONL).
_TABLE_READERS: dict[str, Callable[[Path], list[dict]]] = {
    ".csv": _rows_csv,
    ".xlsx": _rows_xlsx,
    ".parquet": _rows_parquet,
    ".json": _rows_json,
}


def _rows(path: Path) -> tuple[list[dict], list[int] | None]:
    """The records of a question file, with their line numbers when it is JSONL."""
    reader = _TABLE_READERS.get(path.suffix.lower())
    return (reader(path), None) if reader is not None else _rows_jsonl(path)


def _column(rows: list[dict], path: Path, fmt: str, *names: str) -> str:
    """The first of ``names`` present in the header (case-insensitive), as spelled there."""
    keys = {str(k).strip().lower(): k for k in (rows[0] if rows else {})}
    for n in names:
        if n.lower() in keys:
            return keys[n.lower()]
    raise InputFormatError(
        f"{path}: no {' or '.join(repr(n) for n in names)} column, which the {fmt} layout needs; "
        f"columns are {', '.join(map(repr, keys.values())) or 'none'}"
    )


def _item(path: Path, i: int, qid: Any, question: Any, answer: Any, gold: Callable[[], Gold], meta: dict) -> Question:
    """``i``: the record's position in the file (0-based), for messages; ``answer``: the
    answer as the file gives it (after decryption)."""
    if not isinstance(question, str) or not question.strip():
        raise InputFormatError(f"{path} record {i + 1}: the question is empty or not text")
    try:
        g = gold()
    except ValueError as e:
        raise InputFormatError(f"{path} record {i + 1}: {e}") from None
    return Question(str(qid) if qid not in (None, "") else f"{path.stem}-{i}", clean_text(question), g, meta, answer)


def _record_item(path: Path, i: int, r: dict, gold: Callable[[], Gold], meta: dict) -> Question:
    """:func:`_item` of a record with ``id``, ``question`` and ``answer`` fields."""
    return _item(path, i, r.get("id"), r.get("question"), r.get("answer"), gold, meta)


def _plain(path: Path, rows: list[dict], lines: list[int] | None, fmt: str, require_answer: bool) -> list[Question]:
    """The ``jsonl`` and ``nq`` layouts: every record's question and id are checked first (up
    to :data:`MAX_LISTED_PROBLEMS` problems, by line), then the gold answers (the first bad
    one, by record)."""
    qcol = _column(rows, path, fmt, "question")
    names = ("golden_answers", "answer") if fmt == "nq" else ("answer", "golden_answers")
    try:
        acol: str | None = _column(rows, path, fmt, *names)
    except InputFormatError:
        if require_answer:
            raise
        acol = next((n for n in names if any(n in r for r in rows)), None)  # some records have one
    # where each record is: its line in a JSONL file; its row in a sheet (the header is row 1); else its position
    table = path.suffix.lower() in (".csv", ".xlsx")
    where = (
        [f"line {n}" for n in lines]
        if lines
        else [f"{'row' if table else 'record'} {i + (2 if table else 1)}" for i in range(len(rows))]
    )
    problems: list[str] = []
    seen: set[str] = set()
    checked: list[tuple[int, str, dict]] = []
    for i, (r, loc) in enumerate(zip(rows, where)):
        q = r.get(qcol)
        if not isinstance(q, str) or not q.strip():
            problems.append(f"{loc}: '{qcol}' must be a non-empty string")
            continue
        raw_id = r.get("id")
        if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, (str, int))):
            problems.append(f"{loc}: 'id' must be a string or an integer")
            continue
        if raw_id not in (None, ""):
            qid = clean_text(str(raw_id))
        else:  # named after its line in JSONL, after the file and its position in a table
            qid = f"line{lines[i]}" if lines else f"{path.stem}-{i}"
        if qid in seen:
            problems.append(f"{loc}: duplicate id {qid!r}")
            continue
        seen.add(qid)
        checked.append((i, qid, r))
    if problems:
        raise _problems(path, problems)
    items = []
    for i, qid, r in checked:
        answer = r.get(acol) if acol is not None else None
        try:
            gold: Gold | None = Gold.parse(answer, r.get("aliases") or [])
        except ValueError as e:
            if require_answer:
                raise InputFormatError(f"{path} record {i + 1}: {e}") from None
            gold = None
        items.append(Question(qid, clean_text(r[qcol]), gold, _level(r), answer))
    return items


def _level(r: dict) -> dict[str, int]:
    """``{"level": n}`` for a record with an integer ``level`` (synthesized items), else nothing."""
    level = r.get("level")
    return {"level": level} if isinstance(level, int) and not isinstance(level, bool) else {}


def question_level(q: Question) -> int | None:
    """The question's difficulty level: an integer ``level`` of its source (synthesized items;
    GAIA's ``Level``, also as a digit string), else ``None``. Evaluations give their figures
    by level when the questions have one."""
    level = q.meta.get("level")
    if isinstance(level, str) and level.strip().isdigit():
        return int(level)
    return level if isinstance(level, int) and not isinstance(level, bool) else None


def _synth(path: Path, rows: list[dict], split: str | None) -> list[Question]:
    split = split or "test"
    chosen = [(i, r) for i, r in enumerate(rows) if split == "all" or r.get("split") == split]
    if not chosen:
        have = sorted({str(r.get("split")) for r in rows if r.get("split")})
        raise InputFormatError(
            f"{path}: no items in split {split!r} (splits there: {', '.join(have) or 'none'}); "
            "pass --split train, test or all"
        )
    return [
        _record_item(
            path,
            i,
            r,
            lambda r=r: Gold.parse(r.get("answer"), r.get("aliases") or []),
            {"split": r.get("split"), **_level(r)},
        )
        for i, r in chosen
    ]


def _encrypted(path: Path, rows: list[dict], fmt: str) -> list[Question]:
    qcol = _column(rows, path, fmt, "problem", "question", "prompt")
    acol = _column(rows, path, fmt, "answer")
    try:
        ccol = _column(rows, path, fmt, "canary")
    except InputFormatError:
        raise InputFormatError(
            f"{path}: no 'canary' column; the {fmt} file is encrypted with each row's canary, so it "
            "cannot be read without it (use the file as distributed)"
        ) from None
    decrypt = canary_xor_decrypt if fmt == "xbench" else sha256_xor_decrypt
    topic = next((k for k in (rows[0] if rows else {}) if str(k).lower() in ("problem_topic", "topic", "type")), None)
    out = []
    for i, r in enumerate(rows):
        canary = str(r.get(ccol) or "")
        try:
            q, a = decrypt(str(r.get(qcol) or ""), canary), decrypt(str(r.get(acol) or ""), canary)
        except ValueError as e:
            raise InputFormatError(
                f"{path} row {i + 2}: cannot decrypt with its canary ({e}); is the canary "
                f"column wrong, or the file not the {fmt} file as distributed?"
            ) from None
        meta = {"topic": r.get(topic)} if topic else {}
        out.append(_item(path, i, r.get("id"), q, a, lambda a=a: Gold.parse(a), meta))
    return out


def _text_only(
    path: Path, rows: list[dict], fmt: str, id_col: str, q_col: str, a_col: str, attachment: str, meta: tuple[str, ...]
) -> list[Question]:
    """A layout whose items may carry an attachment (GAIA's ``file_name``, HLE's ``image``):
    only the text-only items are kept; ``meta`` columns go to :attr:`Question.meta`."""
    _column(rows, path, fmt, q_col)
    _column(rows, path, fmt, a_col)
    return [
        _item(
            path,
            i,
            r.get(id_col),
            r.get(q_col),
            r.get(a_col),
            lambda r=r: Gold.parse(r.get(a_col)),
            {m.lower(): r.get(m) for m in meta},
        )
        for i, r in enumerate(rows)
        if not r.get(attachment)
    ]


def _gaia(path: Path, rows: list[dict]) -> list[Question]:
    return _text_only(path, rows, "gaia", "task_id", "Question", "Final answer", "file_name", ("Level",))


def _hle(path: Path, rows: list[dict]) -> list[Question]:
    return _text_only(path, rows, "hle", "id", "question", "answer", "image", ("category", "answer_type"))


def _fanoutqa(path: Path, rows: list[dict]) -> list[Question]:
    _column(rows, path, "fanoutqa", "question")
    _column(rows, path, "fanoutqa", "answer")
    return [
        _record_item(
            path,
            i,
            r,
            lambda r=r: Gold.parse(r.get("answer"), list_answer=isinstance(r.get("answer"), list)),
            {"categories": r.get("categories")},
        )
        for i, r in enumerate(rows)
    ]


def detect_format(path: Path, rows: list[dict], require_answer: bool = True) -> str:
    """Guess the layout from the file's type and first record; without ``require_answer``, a
    JSONL file of questions alone is ``jsonl``.

    Raises:
        InputFormatError: nothing matches; the message lists the layouts.
    """
    keys = {str(k).strip().lower() for k in (rows[0] if rows else {})}
    suffix = path.suffix.lower()
    if "canary" in keys and "prompt" in keys:
        return "xbench"
    if "canary" in keys and "problem" in keys:
        return "browsecomp"
    if suffix == ".xlsx" or ("canary" in keys and "question" in keys and suffix == ".csv"):
        return "browsecomp-zh"
    if "final answer" in keys:
        return "gaia"
    if {"topology_hash", "constraints"} <= keys:
        return "synth"
    if "answer_type" in keys or suffix == ".parquet":
        return "hle"
    if "golden_answers" in keys:
        return "nq"
    if suffix == ".json" and "decomposition" in keys:
        return "fanoutqa"
    if {"question", "answer"} <= keys or ("question" in keys and not require_answer):
        return "jsonl"
    if "question" in keys:
        raise InputFormatError(
            f"{path}: cannot tell the benchmark layout: its records have a question but no answer (columns "
            f"{', '.join(sorted(keys))}); grading and training need a gold answer ('answer', or 'golden_answers' for alternatives); `websailor run "
            "--questions` takes questions alone"
        )
    raise InputFormatError(
        f"{path}: cannot tell the benchmark layout (columns {', '.join(sorted(keys)) or 'none'}); "
        f"name it as FORMAT:PATH with FORMAT one of {', '.join(FORMATS)}"
    )


def file_format(path: Path) -> str | None:
    """The layout :func:`detect_format` sees in the file at ``path``; ``None`` when the file
    cannot be read or matches nothing (:func:`load_questions` then says why)."""
    try:
        jsonl = path.suffix.lower() not in _TABLE_READERS
        return detect_format(path, _first_record(path) if jsonl else _rows(path)[0])
    except Exception:  # unreadable or unknown: the loader reports it with the details
        return None


def _first_record(path: Path) -> list[dict]:
    """The first record of a JSONL file (the layout is told by it), without reading the rest."""
    with path.open("rb") as fh:
        for raw in fh:
            if raw.strip():
                return [loads_object(raw.decode("utf-8-sig"))]
    return []


def resolve_split(spec: str | Path, split: str | None, synth_default: str) -> str | None:
    """``split`` as given, or ``synth_default`` when none is given and ``spec`` is a file of
    synthesized items (``train`` for training, ``all`` for ``run``; ``eval`` keeps ``test``)."""
    if split is None and Path(str(spec)).is_file() and file_format(Path(str(spec))) == "synth":
        return synth_default
    return split


def fetch_fanoutqa_dev() -> Path:
    """The FanOutQA dev set (310 questions), read from the ``fanoutqa`` wheel fetched once with
    pip into ``$WEBSAILOR_HOME/downloads`` and extracted next to it."""
    from websailor.config import downloads_dir
    from websailor.files import pip_download

    wheel = pip_download(FANOUTQA_WHEEL, FANOUTQA_WHEEL_FILE, FANOUTQA_WHEEL_SHA256, downloads_dir(), size="0.6 MB")
    out = downloads_dir() / "fanout-final-dev.json"
    with zipfile.ZipFile(wheel) as zf:  # the wheel is verified; its 1 MB member is extracted each time
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(zf.read("fanoutqa/data/fanout-final-dev.json"))
        tmp.replace(out)
    return out


NAMES = {"fanoutqa-dev": ("fanoutqa", fetch_fanoutqa_dev)}


def load_questions(
    spec: str | Path, split: str | None = None, limit: int | None = None, *, require_answer: bool = True
) -> list[Question]:
    """Load a questions file or benchmark: ``FORMAT:PATH``, a ``PATH`` (layout detected), or a
    name in :data:`NAMES`.

    Args:
        spec: what to load.
        split: for our synthesized items, ``train``, ``test`` (default) or ``all``.
        limit: keep the first ``limit`` items.
        require_answer: every question must have a gold answer (``eval``, training); without
            it (``run``) a JSONL file of questions alone is accepted and ``gold`` may be None.

    Raises:
        InputFormatError: a missing file, an unknown layout, a missing column (answer,
            canary, ...), a line that is not a JSON object, a row that cannot be decrypted, an
            empty question or answer, a duplicate id, or no items; each message names the
            file and the line, row or record.
    """
    spec = str(spec)
    fmt: str | None = None
    if spec in NAMES:
        fmt, fetch = NAMES[spec]
        path = fetch()
    else:
        head, sep, rest = spec.partition(":")
        if sep and head in FORMATS:
            fmt, path = head, Path(rest)
        else:
            path = Path(spec)
    if not path.is_file():
        raise InputFormatError(
            f"questions file {path} does not exist or is not a file (or use a name: {', '.join(NAMES)})"
        )
    try:
        rows, lines = _rows(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error, zipfile.BadZipFile) as e:
        raise InputFormatError(f"{path}: cannot read it as {path.suffix or 'JSONL'}: {e}") from None
    except Exception as e:  # parquet and xlsx readers raise their own types
        if isinstance(e, InputFormatError):
            raise
        raise InputFormatError(f"{path}: cannot read it: {type(e).__name__}: {e}") from None
    if not rows:
        raise InputFormatError(f"{path}: no questions (the file holds no records)")
    fmt = fmt or detect_format(path, rows, require_answer)
    if split is not None and fmt != "synth":
        raise InputFormatError(f"{path} is a {fmt} file: --split applies to synthesized QA items only")
    if fmt in ("jsonl", "nq"):
        items = _plain(path, rows, lines, fmt, require_answer)
    elif fmt == "synth":
        items = _synth(path, rows, split)
    elif fmt in ("browsecomp", "browsecomp-zh", "xbench"):
        items = _encrypted(path, rows, fmt)
    elif fmt == "gaia":
        items = _gaia(path, rows)
    elif fmt == "hle":
        items = _hle(path, rows)
    else:
        items = _fanoutqa(path, rows)
    if not items:
        raise InputFormatError(f"{path}: no text-only items in this {fmt} file")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise InputFormatError(f"{path}: duplicate id {it.id!r}")
        seen.add(it.id)
    return items[:limit] if limit else items
