"""The knowledge graph SailorFog-QA-V2 samples from, built over a corpus.

Nodes are the corpus's pages (entities) with typed attributes
(:mod:`websailor.synth.attributes`); an undirected edge joins two pages when one mentions the
other, and keeps every mention as evidence (sentence, the URL of the page it is on, which page
mentions which, and the relation phrase the sentence states). The procedure that found each
edge is this evidence, which is what lets a question's solution path be rebuilt later.

The store grows with the corpus (docs/synthesis.md, "Synthesis at Wikipedia scale"): the
adjacency is a compressed sparse row array (two int arrays, 12 bytes a link), the pages'
attributes are kept in memory, and the evidence sentences (the largest part) live in an SQLite
table read one edge at a time. The in-memory size of a graph is estimated from the corpus's
page and link counts before anything is built, so a memory limit refuses a corpus too large
before work is lost (:func:`estimate_memory_gb`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import threading
import time
import zipfile
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import networkx as nx
import numpy as np

from websailor.corpus.corpus import Corpus
from websailor.errors import InvalidArgumentError
from websailor.log import get_logger
from websailor.synth.attributes import Attributes, parse_attributes
from websailor.synth.relations import read_relation

logger = get_logger(__name__)

#: the cache folder in a corpus's ``synth/`` (bump when what is stored changes, the relation
#: reader included)
GRAPH_DIR = "knowledge_graph.v7"
#: a life span or period at the end of a description: "Italian polymath (1452–1519)"
SPAN_IN_DESC = re.compile(r"\s*\([^)]*\d[^)]*\)\s*$")
#: bytes a page and a link mention take at the peak of a synthesis run over a loaded graph, for
#: :func:`estimate_memory_gb` (benchmarks/synth_scale.py at 1M pages and 3.4M links: 1.27 GB at
#: peak, 1.06 GB resident; docs/synthesis.md, "Synthesis at Wikipedia scale")
BYTES_PER_PAGE = 1000
BYTES_PER_LINK = 60


def description_key(description: str) -> str:
    """A description without its span, lower-cased: "Country in Oceania" -> "country in oceania"."""
    return " ".join(SPAN_IN_DESC.sub("", description).lower().split())


def estimate_memory_gb(pages: int, links: int) -> float:
    """The resident memory (GB) a graph of ``pages`` pages and ``links`` link mentions needs
    once built or loaded (:data:`BYTES_PER_PAGE`, :data:`BYTES_PER_LINK`)."""
    return (pages * BYTES_PER_PAGE + links * BYTES_PER_LINK) / 1e9


def check_memory(pages: int, links: int, max_memory_gb: float | None) -> None:
    """Refuse a graph whose estimated size is over ``max_memory_gb`` (no limit when ``None``).

    Raises:
        InvalidArgumentError: the estimate is over the limit (the message gives both figures).
    """
    if max_memory_gb is None:
        return
    need = estimate_memory_gb(pages, links)
    if need > max_memory_gb:
        raise InvalidArgumentError(
            f"the knowledge graph of {pages:,} pages and {links:,} links needs about {need:.3g} GB of memory "
            f"({BYTES_PER_PAGE:,} bytes a page, {BYTES_PER_LINK} a link), over --max-memory-gb {max_memory_gb:g}: "
            "raise the limit, run on a machine with more memory, or build a smaller corpus"
        )


class EvidenceStore:
    """Evidence sentences by edge, in an SQLite table (in memory, or a file for large graphs).

    Rows keep their insertion order, which is the order the corpus's links were read in.
    Thread-safe: one connection behind a lock."""

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS evidence (a INTEGER NOT NULL, b INTEGER NOT NULL, source INTEGER NOT NULL, "
        "target INTEGER NOT NULL, sentence TEXT NOT NULL, relation TEXT)"
    )

    def __init__(self, path: Path | str = ":memory:", readonly: bool = False) -> None:
        self.path = path
        if readonly:  # a cache: never created or changed by reading it
            self._conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        else:
            self._conn = sqlite3.connect(str(path), check_same_thread=False)
        self._lock = threading.Lock()
        if not readonly:
            self._conn.execute(self._SCHEMA)

    def count(self) -> int:
        """Rows stored."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM evidence").fetchone()[0])

    def add(self, rows: Iterable[tuple[int, int, int, int, str, str | None]]) -> None:
        """Append ``(a, b, source, target, sentence, relation)`` rows (``a < b``: the edge)."""
        with self._lock:
            self._conn.executemany("INSERT INTO evidence VALUES (?, ?, ?, ?, ?, ?)", rows)

    def finish(self) -> None:
        """Keep the first of each sentence stored twice for one edge, and index the table by
        edge (once every row is in)."""
        with self._lock:
            self._conn.execute(
                "DELETE FROM evidence WHERE rowid NOT IN (SELECT MIN(rowid) FROM evidence GROUP BY a, b, sentence)"
            )
            self._conn.execute("CREATE INDEX IF NOT EXISTS by_edge ON evidence (a, b)")
            self._conn.commit()

    def scan(self, size: int = 100_000) -> Iterator[list[tuple[int, int, str, str | None]]]:
        """Every row as ``(a, b, sentence, relation)``, in insertion order, ``size`` at a time."""
        with self._lock:
            cursor = self._conn.execute("SELECT a, b, sentence, relation FROM evidence ORDER BY rowid")
            while chunk := cursor.fetchmany(size):
                yield chunk

    def get(self, a: int, b: int) -> list[tuple[int, int, str, str | None]]:
        """``(source, target, sentence, relation)`` of edge ``{a, b}``, in insertion order."""
        lo, hi = min(a, b), max(a, b)
        with self._lock:
            return self._conn.execute(
                "SELECT source, target, sentence, relation FROM evidence WHERE a = ? AND b = ? ORDER BY rowid", (lo, hi)
            ).fetchall()

    def copy_to(self, path: Path) -> None:
        """Write the whole table to an SQLite file."""
        with self._lock:
            dest = sqlite3.connect(str(path))
            try:
                self._conn.backup(dest)
            finally:
                dest.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass
class KnowledgeGraph:
    """An undirected graph keyed by page title, stored for size (see the module docstring).

    Pages are numbered in corpus order. ``indptr``/``indices``: the adjacency in compressed
    sparse row form (the neighbours of page ``i`` are ``indices[indptr[i]:indptr[i+1]]``,
    sorted); ``worded`` says, for each of those entries, whether the link's evidence states a
    relation phrase. Per page: ``titles``, ``urls``, ``attrs`` (:class:`Attributes`) and
    ``findable`` (a BM25 search of the page's description returns it in the top 10, so a
    question may name it by its description and expect a solver to find it). ``evidence``
    holds every mention of each link (:meth:`evidence`). ``common_words``: for each word written
    after the first of a description or an evidence sentence, whether it is lower case more often
    than capitalized there ("country": True; "hindu", "disney": False), computed at build time; it
    decides how a description's first word is cased mid-sentence, and whether a one-word title is
    a common noun. ``sentence_counts`` is ``(sentences with a relation phrase, all evidence sentences)``.
    """

    titles: list[str]
    urls: list[str]
    attrs: list[Attributes]
    findable: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    worded: np.ndarray
    evidence_store: EvidenceStore
    common_words: dict[str, bool] = field(default_factory=dict)
    sentence_counts: tuple[int, int] = (0, 0)

    @cached_property
    def ids(self) -> dict[str, int]:
        """Page number by title."""
        return {t: i for i, t in enumerate(self.titles)}

    def __len__(self) -> int:
        return len(self.titles)

    def __contains__(self, title: object) -> bool:
        return title in self.ids

    def nodes(self) -> list[str]:
        """Every page title, in corpus order."""
        return self.titles

    def number_of_edges(self) -> int:
        return int(len(self.indices) // 2)

    def _row(self, title: str) -> np.ndarray:
        i = self.ids[title]
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def neighbors(self, title: str) -> list[str]:
        """Titles linked to ``title`` (in page order)."""
        return [self.titles[j] for j in self._row(title)]

    def degree(self, title: str) -> int:
        i = self.ids[title]
        return int(self.indptr[i + 1] - self.indptr[i])

    def _slot(self, a: str, b: str) -> int | None:
        """The position of ``b`` in ``a``'s row of :attr:`indices`, or ``None`` when they are
        not linked (or either is not a page)."""
        ia, ib = self.ids.get(a), self.ids.get(b)
        if ia is None or ib is None:
            return None
        start = int(self.indptr[ia])
        row = self.indices[start : self.indptr[ia + 1]]
        k = int(np.searchsorted(row, ib))
        return start + k if k < len(row) and int(row[k]) == ib else None

    def has_edge(self, a: str, b: str) -> bool:
        return self._slot(a, b) is not None

    def is_worded(self, a: str, b: str) -> bool:
        """Whether the link between ``a`` and ``b`` has a relation phrase to state."""
        slot = self._slot(a, b)
        return slot is not None and bool(self.worded[slot])

    def url(self, title: str) -> str:
        return self.urls[self.ids[title]]

    def is_findable(self, title: str) -> bool:
        return bool(self.findable[self.ids[title]])

    def attributes(self, title: str) -> Attributes:
        return self.attrs[self.ids[title]]

    def evidence(self, a: str, b: str) -> list[dict]:
        """Every mention of the link ``{a, b}``: ``{"source", "target", "sentence", "url",
        "relation"}`` (``source`` mentions ``target`` in ``sentence``, on the page at ``url``;
        ``relation`` is the phrase the sentence states from ``source`` to ``target``, "is an
        oil-on-canvas painting by", or ``None`` where
        :func:`websailor.synth.relations.read_relation` reads none), in corpus order."""
        return [
            {
                "source": self.titles[s],
                "target": self.titles[t],
                "sentence": sentence,
                "url": self.urls[s],
                "relation": relation,
            }
            for s, t, sentence, relation in self.evidence_store.get(self.ids[a], self.ids[b])
        ]

    def subgraph(self, nodes: Iterable[str]) -> nx.Graph:
        """The induced subgraph on ``nodes`` as a small :class:`networkx.Graph` (pages in page
        order, no attributes)."""
        ids = sorted(self.ids[n] for n in nodes)
        chosen = set(ids)
        g = nx.Graph()
        g.add_nodes_from(self.titles[i] for i in ids)
        for i in ids:
            for j in self.indices[self.indptr[i] : self.indptr[i + 1]]:
                if int(j) in chosen and i < j:
                    g.add_edge(self.titles[i], self.titles[int(j)])
        return g

    @cached_property
    def walk_starts(self) -> list[str]:
        """Pages a subgraph walk may start from (at least two links), in page order."""
        return [self.titles[i] for i in np.flatnonzero(np.diff(self.indptr) >= 2)]

    def largest_component(self) -> int:
        """Pages in the largest group of linked pages."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        n = len(self.titles)
        if n == 0:
            return 0
        matrix = csr_matrix((np.ones(len(self.indices), dtype=np.int8), self.indices, self.indptr), shape=(n, n))
        _, labels = connected_components(matrix, directed=False)
        return int(np.bincount(labels).max())

    @cached_property
    def same_description(self) -> dict[str, list[str]]:
        """Pages by normalized description (lower case, span removed), for descriptions that
        several pages share ("country in oceania": Australia, Fiji, Papua New Guinea, ...)."""
        groups: dict[str, list[str]] = {}
        for title, a in zip(self.titles, self.attrs):
            key = description_key(a.description)
            if key:
                groups.setdefault(key, []).append(title)
        return {k: sorted(v) for k, v in groups.items() if len(v) > 1}

    def referents(self, node: str) -> list[str]:
        """Every page that ``node``'s description may name (itself included), sorted."""
        return self.same_description.get(description_key(self.attributes(node).description), [node])

    def relation_counts(self) -> tuple[int, int]:
        """(evidence sentences with a relation phrase, all evidence sentences)."""
        return self.sentence_counts

    def restrict(self, nodes: Iterable[str], edges: Iterable[tuple[str, str]] | None = None) -> KnowledgeGraph:
        """A new graph of ``nodes`` only (in page order), with the links among them, or only
        ``edges`` when given, each with all its evidence. For tests and small experiments."""
        keep = sorted({self.ids[n] for n in nodes})
        titles = [self.titles[i] for i in keep]
        pages = [Page(self.titles[i], self.urls[i], self.attrs[i], bool(self.findable[i])) for i in keep]
        pairs = list(edges) if edges is not None else [
            (a, b) for a in titles for b in self.neighbors(a) if self.ids[a] < self.ids[b] and b in set(titles)
        ]  # fmt: skip
        links = [Link(e["source"], e["target"], e["sentence"]) for a, b in pairs for e in self.evidence(a, b)]
        return build_graph(pages, links)

    def edges(self) -> Iterator[tuple[str, str]]:
        """Every link once, as ``(a, b)`` with ``a`` before ``b`` in page order."""
        for i in range(len(self.titles)):
            for j in self.indices[self.indptr[i] : self.indptr[i + 1]]:
                if i < j:
                    yield self.titles[i], self.titles[int(j)]

    def save(self, folder: Path, source: dict | None = None) -> None:
        """Write the graph to ``folder`` (made whole or not at all: written beside it, then
        renamed into place). ``source`` (the corpus's build stamp) is kept so that a cache of
        another build of the corpus is not read."""
        tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        np.savez(tmp / "adjacency.npz", indptr=self.indptr, indices=self.indices, worded=self.worded,
                 findable=self.findable)  # fmt: skip
        nodes = {"titles": self.titles, "urls": self.urls, "attributes": [a.to_dict() for a in self.attrs]}
        (tmp / "nodes.json").write_text(json.dumps(nodes, ensure_ascii=True), encoding="utf-8")
        meta = {"pages": len(self), "links": self.sentence_counts[1], "sentence_counts": list(self.sentence_counts),
                "titles_sha1": _titles_sha1(self.titles), "source": source or {},
                "common_words": self.common_words}  # fmt: skip
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=True), encoding="utf-8")
        self.evidence_store.copy_to(tmp / "evidence.sqlite")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)

    @classmethod
    def load(cls, folder: Path, max_memory_gb: float | None = None, source: dict | None = None) -> KnowledgeGraph:
        """Read a graph written by :meth:`save`; its evidence stays on disk, opened read-only.

        Raises:
            InvalidArgumentError: the graph is larger than ``max_memory_gb`` (checked before
                anything large is read).
            ValueError: the folder is not a whole, consistent graph (a part missing, cut or
                out of step with the others, or, with ``source``, made from another build of
                the corpus).
        """
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        check_memory(meta["pages"], meta["links"], max_memory_gb)
        if source is not None and meta.get("source") != source:
            raise ValueError(f"it was built from another build of the corpus ({meta.get('source')} against {source})")
        arrays = np.load(folder / "adjacency.npz")
        nodes = json.loads((folder / "nodes.json").read_text(encoding="utf-8"))
        if not isinstance(meta.get("common_words"), dict):
            raise ValueError("meta.json has no word table")
        kg = cls(
            titles=nodes["titles"],
            urls=nodes["urls"],
            attrs=[Attributes.from_dict(a) for a in nodes["attributes"]],
            findable=arrays["findable"],
            indptr=arrays["indptr"],
            indices=arrays["indices"],
            worded=arrays["worded"],
            evidence_store=EvidenceStore(folder / "evidence.sqlite", readonly=True),
            common_words=meta["common_words"],
            sentence_counts=tuple(meta["sentence_counts"]),
        )
        n = len(kg.titles)
        sizes = (len(kg.urls), len(kg.attrs), len(kg.findable), len(kg.indptr) - 1, meta["pages"])
        if any(size != n for size in sizes) or not int(kg.indptr[-1]) == len(kg.indices) == len(kg.worded):
            raise ValueError(f"its parts disagree on the number of pages or links ({n}, {sizes}, {len(kg.indices)})")
        if _titles_sha1(kg.titles) != meta.get("titles_sha1"):
            raise ValueError("nodes.json does not hold the pages the graph was saved with")
        if kg.evidence_store.count() != meta["links"]:
            raise ValueError(f"evidence.sqlite holds {kg.evidence_store.count()} sentences, not {meta['links']}")
        return kg


def _titles_sha1(titles: list[str]) -> str:
    return hashlib.sha1("\n".join(titles).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Page:
    """A page as the graph builder takes it."""

    title: str
    url: str
    attributes: Attributes
    findable: bool = False


@dataclass
class Link:
    """A link mention as the graph builder takes it: ``source``'s page mentions ``target`` in
    ``sentence``."""

    source: str
    target: str
    sentence: str


def _word_case_counts(text: str, lower: Counter, upper: Counter) -> None:
    for word in text.split()[1:]:
        word = word.strip(".,;:()\"'")
        if word[:1].isalpha():
            (lower if word[:1].islower() else upper)[word.lower()] += 1


def build_graph(
    pages: Iterable[Page], links: Iterable[Link], evidence_path: Path | str = ":memory:", batch: int = 50_000
) -> KnowledgeGraph:
    """A :class:`KnowledgeGraph` from pages and link mentions. The evidence is streamed to
    SQLite in batches, and a sentence stored twice for one edge (in either direction) is kept
    once; then the adjacency is built from the table, so memory holds the pages and the link
    ids only. A link to or from a title that is not a page, and a self-link, are skipped. Each
    sentence's relation phrase is read with :func:`read_relation`."""
    titles: list[str] = []
    urls: list[str] = []
    attrs: list[Attributes] = []
    findable: list[bool] = []
    for p in pages:
        titles.append(p.title)
        urls.append(p.url)
        attrs.append(p.attributes)
        findable.append(p.findable)
    ids = {t: i for i, t in enumerate(titles)}
    store = EvidenceStore(evidence_path)
    rows: list[tuple] = []
    for m in links:
        s, t = ids.get(m.source), ids.get(m.target)
        if s is None or t is None or s == t:
            continue
        relation = read_relation(m.sentence, m.source, m.target)
        rows.append((min(s, t), max(s, t), s, t, m.sentence, relation.phrase if relation else None))
        if len(rows) >= batch:
            store.add(rows)
            rows.clear()
    store.add(rows)
    store.finish()
    lower: Counter = Counter()
    upper: Counter = Counter()
    for a in attrs:
        _word_case_counts(a.description, lower, upper)
    a_ids, b_ids, flags = array("q"), array("q"), array("b")  # 8, 8 and 1 bytes a link
    for chunk in store.scan():
        for a, b, sentence, relation in chunk:
            a_ids.append(a)
            b_ids.append(b)
            flags.append(relation is not None)
            _word_case_counts(sentence, lower, upper)
    indptr, indices, worded_arr = _csr(len(titles), np.frombuffer(a_ids, dtype=np.int64),
                                       np.frombuffer(b_ids, dtype=np.int64),
                                       np.frombuffer(flags, dtype=np.int8).astype(bool))  # fmt: skip
    # lower case when the word is common in lower case at all ("canal", despite "Suez Canal")
    common = {w: lower[w] >= max(3, upper[w] // 10) or lower[w] > upper[w] for w in lower.keys() | upper.keys()}
    if flags and not any(flags):
        logger.warning(
            "no relation phrase could be read from the %d link sentences: every link will be worded 'is associated "
            "with' (synth stats counts the share)",
            len(flags),
        )
    return KnowledgeGraph(
        titles=titles,
        urls=urls,
        attrs=attrs,
        findable=np.array(findable, dtype=bool),
        indptr=indptr,
        indices=indices,
        worded=worded_arr,
        evidence_store=store,
        common_words=common,
        sentence_counts=(int(sum(flags)), len(flags)),
    )


def _csr(n: int, a: np.ndarray, b: np.ndarray, worded: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Symmetric CSR adjacency (sorted rows, one entry per edge and direction) from edge
    mentions; an edge is worded when any of its mentions is."""
    if len(a) == 0:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=bool)
    key = a * n + b
    order = np.argsort(key, kind="stable")
    key, worded = key[order], worded[order]
    edges, first = np.unique(key, return_index=True)
    edge_worded = np.logical_or.reduceat(worded, first)
    ea, eb = edges // n, edges % n
    rows = np.concatenate([ea, eb])
    cols = np.concatenate([eb, ea])
    flags = np.concatenate([edge_worded, edge_worded])
    order = np.lexsort((cols, rows))
    rows, cols, flags = rows[order], cols[order], flags[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(np.int32), flags


def corpus_pages(corpus: Corpus) -> Iterator[Page]:
    """The corpus's pages with their attributes and ``findable`` flag."""
    findable = _findable(corpus)
    for doc in corpus.iter_documents():
        body = "\n\n".join(p for p in doc.paragraphs if not p.startswith("## "))
        attrs = parse_attributes(doc.description, doc.topic, body)
        yield Page(doc.title, doc.url, attrs, findable.get(doc.title, False))


def build_knowledge_graph(
    corpus: Corpus, evidence_path: Path | str = ":memory:", max_memory_gb: float | None = None
) -> KnowledgeGraph:
    """Pages from every document, edges from the corpus's entity links, each evidence sentence
    with the relation phrase it states (about 6 s for the 10,033-page vital corpus). Warns when
    no relation phrase could be read at all (a corpus whose link sentences are not lead-section
    prose, :func:`build_graph` warns): every link is then worded as an association.

    Raises:
        InvalidArgumentError: the graph's estimated size is over ``max_memory_gb``
            (:func:`check_memory`), before anything is built.
    """
    t0 = time.perf_counter()
    meta = corpus.meta
    check_memory(int(meta.get("n_docs", 0)), int(meta.get("n_links", 0)), max_memory_gb)
    links = (Link(m.source, m.target, m.sentence) for m in corpus.iter_links())
    kg = build_graph(corpus_pages(corpus), links, evidence_path)
    worded, total = kg.relation_counts()
    logger.info(
        "knowledge graph of %s: %d nodes, %d edges, %d of %d evidence sentences with a relation phrase (%.1f s)",
        corpus.path,
        len(kg),
        kg.number_of_edges(),
        worded,
        total,
        time.perf_counter() - t0,
    )
    return kg


def _findable(corpus: Corpus, k: int = 10) -> dict[str, bool]:
    """For every page: its description, searched with BM25, returns the page among the top
    ``k`` pages (about 1 s for 10k pages: index only, no snippets)."""
    pages = [(d.title, d.description) for d in corpus.iter_documents()]
    rows = corpus.index.retrieve([desc or "\x00" for _, desc in pages], k=k * 3)
    doc_of = corpus.store.passages(sorted({r for hits in rows for r, _ in hits}))
    ids = {t: i for i, t in enumerate(corpus.titles)}
    out = {}
    for (title, desc), hits in zip(pages, rows):
        top: list[int] = []
        for r, _ in hits:
            d = doc_of[r][0]
            if d not in top:
                top.append(d)
        out[title] = bool(desc) and ids[title] in top[:k]
    return out


def load_or_build(corpus: Corpus, max_memory_gb: float | None = None) -> KnowledgeGraph:
    """The graph cached in the corpus directory's ``synth/`` folder, built on first use.

    Raises:
        InvalidArgumentError: the graph is larger than ``max_memory_gb``.
    """
    cache = corpus.path / "synth" / GRAPH_DIR
    source = {k: corpus.meta.get(k) for k in ("built_at", "n_docs", "n_links")}
    if (cache / "meta.json").exists():
        try:
            return KnowledgeGraph.load(cache, max_memory_gb, source)
        except InvalidArgumentError:
            raise  # over the memory limit: not a damaged cache
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, EOFError, sqlite3.Error,
                zipfile.BadZipFile) as e:  # fmt: skip
            logger.warning(
                "the cached knowledge graph %s is unreadable (%s: %s); building it again", cache, type(e).__name__, e
            )
    kg = build_knowledge_graph(corpus, max_memory_gb=max_memory_gb)
    try:
        cache.parent.mkdir(exist_ok=True)
        kg.save(cache, source)
    except OSError as e:  # a read-only corpus still works, just without the cache
        logger.warning("could not cache the knowledge graph in %s: %s", cache.parent, e.strerror)
    return kg
