"""BM25 retrieval over passages (bm25s), with one text analyzer shared by indexing,
queries, snippets and goal ranking.

The analyzer lower-cases, keeps runs of two or more letters or digits (``_`` separates words), drops English stop
words (bm25s's list) and applies the Snowball English stemmer (PyStemmer).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

_TOKEN = re.compile(r"[^\W_]{2,}")  # runs of 2+ letters/digits; "_" separates ("longest_river")
#: Stands in for a passage with no index terms (only stop words), which bm25s cannot index.
EMPTY_TERM = "\x00"


class Analyzer:
    """Text -> list of stemmed index terms. Stems are cached, so repeated words cost a dict hit."""

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("english")
        self._stop = frozenset(STOPWORDS_EN)
        self._cache: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        cache = self._cache
        out = []
        for w in _TOKEN.findall(unicodedata.normalize("NFC", text).lower()):
            s = cache.get(w)
            if s is None:
                s = "" if w in self._stop else self._stemmer.stemWord(w)
                if len(cache) < 2_000_000:
                    cache[w] = s
            if s:
                out.append(s)
        return out


class BM25Index:
    """A bm25s index over passages. Row ``i`` of the index is passage ``i``.

    Use :meth:`build` then :meth:`save`, or :meth:`load`.
    """

    def __init__(self, model: bm25s.BM25, analyzer: Analyzer | None = None) -> None:
        self.model = model
        self.analyzer = analyzer or Analyzer()

    @classmethod
    def build(cls, texts: Sequence[str], analyzer: Analyzer | None = None, show_progress: bool = False) -> BM25Index:
        """Index ``texts`` (one string per passage) with BM25 (k1=1.5, b=0.75, Lucene IDF)."""
        analyzer = analyzer or Analyzer()
        tokens = [analyzer(t) or [EMPTY_TERM] for t in texts]
        model = bm25s.BM25()
        model.index(tokens, show_progress=show_progress)
        return cls(model, analyzer)

    def save(self, path: Path) -> None:
        self.model.save(str(path), show_progress=False)

    @classmethod
    def load(cls, path: Path, mmap: bool = False) -> BM25Index:
        model = bm25s.BM25.load(str(path), mmap=mmap, show_progress=False)
        return cls(model)

    @property
    def n_rows(self) -> int:
        return int(self.model.scores["num_docs"])

    def query_terms(self, query: str) -> list[str]:
        """Analyzed terms of ``query`` that occur in the index (others cannot score)."""
        vocab = self.model.vocab_dict
        return [t for t in self.analyzer(query) if t in vocab]

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 score of every row for analyzed ``terms`` (all in the vocabulary); shape ``(n_rows,)``."""
        return self.model.get_scores(terms)

    @staticmethod
    def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
        """Rows with the ``k`` highest positive scores, best first (ties: lower row first).

        Selection runs over the non-zero rows only: bm25s's own top-k calls
        ``np.argpartition(scores, -k)``, which on a mostly-zero score vector of 1M rows took
        160 ms per query with numpy 2.4 here, against about 6 ms for this
        (``benchmarks/search_latency.py``).
        """
        rows = np.flatnonzero(scores > 0)
        vals = scores[rows]
        if len(rows) > k:
            part = np.argpartition(-vals, k - 1)[:k]
            rows, vals = rows[part], vals[part]
        order = np.lexsort((rows, -vals))
        return [(int(rows[i]), float(vals[i])) for i in order]

    def retrieve(self, queries: Sequence[str], k: int, n_threads: int = 0) -> list[list[tuple[int, float]]]:
        """Top ``k`` rows per query as ``[(row, score), ...]`` with score > 0, best first.

        Args:
            queries: raw query strings (analyzed here).
            k: rows per query (positive).
            n_threads: worker threads for a batch (0 or 1 = in the caller's thread).
        """

        def one(query: str) -> list[tuple[int, float]]:
            terms = self.query_terms(query)
            return self.top_k(self.scores(terms), k) if terms else []

        if n_threads > 1 and len(queries) > 1:
            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                return list(pool.map(one, queries))
        return [one(q) for q in queries]

    def score_texts(self, query: str, texts: Sequence[str]) -> np.ndarray:
        """BM25 scores of ``query`` against a small ad-hoc set of ``texts`` (e.g. one page's
        paragraphs), using a throw-away index. Shape ``(len(texts),)``; zeros if nothing matches."""
        q = self.analyzer(query)
        toks = [self.analyzer(t) for t in texts]
        if not q or not any(toks):
            return np.zeros(len(texts), dtype=np.float32)
        toks = [t or [EMPTY_TERM] for t in toks]
        model = bm25s.BM25()
        model.index(toks, show_progress=False)
        known = [t for t in q if t in model.vocab_dict]
        if not known:
            return np.zeros(len(texts), dtype=np.float32)
        return np.asarray(model.get_scores(known), dtype=np.float32)
