"""``search``: the schema, argument handling and observation layout that every back end shares.

:class:`BaseSearchTool` cleans the queries the model wrote (whitespace, length, count) and
lays out the results as the released Tongyi DeepResearch search tool does; a back end
implements :meth:`BaseSearchTool.search_blocks`: the offline corpus
(:class:`websailor.tools.local.SearchTool`) or the web providers
(:class:`websailor.tools.web.WebSearchTool`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

from websailor.text import truncate
from websailor.tools.base import Tool

#: Separator between the results of several queries (or pages), as in the Tongyi tools.
BLOCK_SEPARATOR = "\n=======\n"


class Hit(Protocol):
    """What :func:`format_search_results` reads of a search result."""

    rank: int
    title: str
    url: str
    snippet: str


def format_search_results(query: str, hits: Sequence[Hit]) -> str:
    """One query's results laid out like the released Tongyi DeepResearch search tool:
    a header, then numbered ``[title](url)`` lines each followed by the snippet (any objects
    with ``rank``, ``title``, ``url`` and ``snippet`` will do)."""
    if not hits:
        return f"No results found for '{query}'. Try a shorter or more general query."
    lines = [f"{h.rank}. [{h.title}]({h.url})\n{h.snippet}" for h in hits]
    noun = "result" if len(hits) == 1 else "results"
    return f"A search for '{query}' found {len(hits)} {noun}:\n\n## Web Results\n" + "\n\n".join(lines)


def search_description(results: int = 10) -> str:
    """The ``search`` tool's description for ``results`` results per query (paper: 10), so
    that what the model reads matches what the tool returns."""
    best = "best result" if results == 1 else f"{results} best results"
    return (
        f"Search the web. Give one or more queries in the array 'query'; each returns its {best} (title, URL, snippet)."
    )


class BaseSearchTool(Tool):
    """The ``search`` tool of the paper: ``query`` is an array of strings, each answered with
    its best results (paper: 10). A back end with another number of results sets its own
    :attr:`description` with :func:`search_description`.

    Attributes:
        max_queries: queries per call; extra ones are dropped with a note.
        max_query_chars: longer queries are cut (with a note) before searching.
    """

    name = "search"
    description = search_description(10)
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
    max_queries: int = 10
    max_query_chars: int = 500

    @abstractmethod
    def search_blocks(self, queries: list[str]) -> list[str]:
        """The result block of each cleaned, non-empty query, in order (the back end)."""

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
