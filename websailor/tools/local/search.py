"""``search`` over the offline corpus: BM25 over passages, one result per page."""

from __future__ import annotations

from websailor.corpus.corpus import SNIPPET_CHARS, Corpus
from websailor.tools.search import BaseSearchTool, format_search_results, search_description


class SearchTool(BaseSearchTool):
    """Search the offline Wikipedia: top ``top_k`` pages per query (paper: 10).

    Args:
        corpus: the corpus to search.
        top_k: results per query (``--search-results``); the description the model reads says it.
        max_queries: queries per call; extra ones are dropped with a note.
        max_query_chars: longer queries are cut (with a note) before searching.
        snippet_chars: longest snippet of a result (``--snippet-chars``).
    """

    def __init__(
        self,
        corpus: Corpus,
        top_k: int = 10,
        max_queries: int = 10,
        max_query_chars: int = 500,
        snippet_chars: int = SNIPPET_CHARS,
    ) -> None:
        self.corpus = corpus
        self.top_k = top_k
        self.snippet_chars = snippet_chars
        self.description = search_description(top_k)
        self.max_queries = max_queries
        self.max_query_chars = max_query_chars

    def search_blocks(self, queries: list[str]) -> list[str]:
        """The result block of each query: the corpus's BM25 hits, laid out for the agent."""
        return [
            format_search_results(q, hits)
            for q, hits in zip(queries, self.corpus.search(queries, k=self.top_k, snippet_chars=self.snippet_chars))
        ]
