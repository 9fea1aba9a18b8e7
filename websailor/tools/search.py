"""``search``: batched web-style search over the local corpus (BM25)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from websailor.corpus.corpus import Corpus, SearchHit
from websailor.text import truncate
from websailor.tools.base import Tool

#: Separator between the results of several queries (or pages), as in the Tongyi tools.
BLOCK_SEPARATOR = "\n=======\n"


def format_search_results(query: str, hits: Sequence[SearchHit]) -> str:
    """One query's results laid out like the released Tongyi DeepResearch search tool:
    a header, then numbered ``[title](url)`` lines each followed by the snippet (any objects
    with ``rank``, ``title``, ``url`` and ``snippet`` will do)."""
    if not hits:
        return f"No results found for '{query}'. Try a shorter or more general query."
    lines = [f"{h.rank}. [{h.title}]({h.url})\n{h.snippet}" for h in hits]
    noun = "result" if len(hits) == 1 else "results"
    return f"A search for '{query}' found {len(hits)} {noun}:\n\n## Web Results\n" + "\n\n".join(lines)


class SearchTool(Tool):
    """Search the offline Wikipedia: top ``top_k`` pages per query (paper: 10).

    Args:
        corpus: the corpus to search.
        top_k: results per query.
        max_queries: queries per call; extra ones are dropped with a note.
        max_query_chars: longer queries are cut (with a note) before searching.
    """

    name = "search"
    description = (
        "Search the web. Give one or more queries in the array 'query'; each returns its 10 best "
        "results (title, URL, snippet)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "Queries to run in this call; several phrasings of the same need can go together.",
            }
        },
        "required": ["query"],
    }

    def __init__(self, corpus: Corpus, top_k: int = 10, max_queries: int = 10, max_query_chars: int = 500) -> None:
        self.corpus = corpus
        self.top_k = top_k
        self.max_queries = max_queries
        self.max_query_chars = max_query_chars

    def search_blocks(self, queries: list[str]) -> list[str]:
        """The result block of each cleaned, non-empty query (the back end: override per environment)."""
        return [format_search_results(q, hits) for q, hits in zip(queries, self.corpus.search(queries, k=self.top_k))]

    def forward(self, query: list[str]) -> str:
        notes: list[str] = []
        if len(query) > self.max_queries:
            notes.append(f"Note: only the first {self.max_queries} of {len(query)} queries were run.")
            query = query[: self.max_queries]
        blocks: dict[int, str] = {}
        live: list[int] = []
        shown: list[str] = []
        for i, q in enumerate(query):
            q = " ".join(q.split())
            if len(q) > self.max_query_chars:
                notes.append(f"Note: query {i + 1} was {len(q)} characters long and was cut to {self.max_query_chars}.")
                q = truncate(q, self.max_query_chars)
            shown.append(q)
            if q:
                live.append(i)
            else:
                blocks[i] = "Empty query: write what you are looking for."
        if live:
            for i, block in zip(live, self.search_blocks([shown[i] for i in live])):
                blocks[i] = block
        text = BLOCK_SEPARATOR.join(blocks[i] for i in range(len(query)))
        return "\n".join(notes + [text]) if notes else text
