"""SQLite document store of a corpus: pages, passages and links.

Schema (``store.sqlite`` in the corpus directory)::

    docs(id, title, key UNIQUE, url, description, topic, text)   -- one row per page
    passages(id, doc_id, ord, text)                               -- row id = BM25 index row
    links(source, target, surface, sentence, start, end)          -- doc ids; entity-link evidence

SQLite gives random access by title or id at any corpus size without loading it in memory,
and can be inspected with the ``sqlite3`` shell.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from websailor.corpus.linking import Mention
from websailor.errors import CorpusError

SCHEMA = """
CREATE TABLE docs (id INTEGER PRIMARY KEY, title TEXT NOT NULL, key TEXT NOT NULL UNIQUE,
                   url TEXT NOT NULL, description TEXT NOT NULL, topic TEXT NOT NULL, text TEXT NOT NULL);
CREATE TABLE passages (id INTEGER PRIMARY KEY, doc_id INTEGER NOT NULL, ord INTEGER NOT NULL, text TEXT NOT NULL);
CREATE TABLE links (source INTEGER NOT NULL, target INTEGER NOT NULL, surface TEXT NOT NULL,
                    sentence TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL);
"""
INDEXES = """
CREATE INDEX passages_doc ON passages(doc_id);
CREATE INDEX links_source ON links(source);
CREATE INDEX links_target ON links(target);
"""


@dataclass(frozen=True)
class Document:
    """One page of a corpus.

    ``text`` holds paragraphs separated by blank lines (headings start with ``"## "``);
    ``url`` is the page's real Wikipedia URL.
    """

    id: int
    title: str
    url: str
    text: str
    description: str = ""
    topic: str = ""

    @property
    def paragraphs(self) -> list[str]:
        return [p for p in self.text.split("\n\n") if p.strip()]


class StoreWriter:
    """Write-once builder of ``store.sqlite`` (used inside a temporary build directory)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path)
        self.conn.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + SCHEMA)

    def add_docs(self, rows: Iterable[tuple[int, str, str, str, str, str, str]]) -> None:
        self.conn.executemany("INSERT INTO docs VALUES (?,?,?,?,?,?,?)", rows)

    def add_passages(self, rows: Iterable[tuple[int, int, int, str]]) -> None:
        self.conn.executemany("INSERT INTO passages VALUES (?,?,?,?)", rows)

    def add_links(self, rows: Iterable[tuple[int, int, str, str, int, int]]) -> None:
        self.conn.executemany("INSERT INTO links VALUES (?,?,?,?,?,?)", rows)

    def close(self) -> None:
        self.conn.executescript(INDEXES)
        self.conn.commit()
        self.conn.close()


class Store:
    """Read-only access to ``store.sqlite``; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    def _all(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            with self._lock:
                return self.conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            raise CorpusError(f"{self.path} is corrupt ({e}); rebuild the corpus with --force") from None

    def check(self) -> None:
        """Raise :class:`CorpusError` if the file is not a store (used by ``Corpus.open``)."""
        self._all("SELECT id, title, key, url, description, topic, text FROM docs LIMIT 1")
        self._all("SELECT id, doc_id, ord, text FROM passages LIMIT 1")
        self._all('SELECT source, target, surface, sentence, start, "end" FROM links LIMIT 1')

    def doc_by_key(self, key: str) -> Document | None:
        rows = self._all("SELECT id, title, url, text, description, topic FROM docs WHERE key = ?", (key,))
        return Document(*rows[0]) if rows else None

    def passages(self, ids: list[int]) -> dict[int, tuple[int, str, str | None, str | None]]:
        """``{passage_id: (doc_id, text, page title, page url)}`` for the given passage ids, in
        one query (title and url are ``None`` if the page is missing: a damaged store)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._all(
            "SELECT p.id, p.doc_id, p.text, d.title, d.url FROM passages p LEFT JOIN docs d "
            f"ON d.id = p.doc_id WHERE p.id IN ({marks})",
            tuple(ids),
        )
        return {r[0]: r[1:] for r in rows}

    def titles(self) -> list[str]:
        return [r[0] for r in self._all("SELECT title FROM docs ORDER BY id")]

    def iter_docs(self) -> Iterator[Document]:
        for r in self._all("SELECT id, title, url, text, description, topic FROM docs ORDER BY id"):
            yield Document(*r)

    def _mentions(self, where: str, args: tuple) -> list[Mention]:
        rows = self._all(
            'SELECT s.title, t.title, l.surface, l.sentence, l.start, l."end" FROM links l '
            f"JOIN docs s ON s.id = l.source JOIN docs t ON t.id = l.target {where} ORDER BY l.rowid",
            args,
        )
        return [Mention(*r) for r in rows]

    def links_from(self, doc_id: int) -> list[Mention]:
        return self._mentions("WHERE l.source = ?", (doc_id,))

    def links_to(self, doc_id: int) -> list[Mention]:
        return self._mentions("WHERE l.target = ?", (doc_id,))

    def all_links(self) -> list[Mention]:
        return self._mentions("", ())

    def close(self) -> None:
        self.conn.close()
