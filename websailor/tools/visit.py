"""``visit``: read pages of the offline Wikipedia with a goal."""

from __future__ import annotations

from typing import Any

from websailor.corpus.corpus import MAX_QUERY_CHARS, Corpus
from websailor.corpus.urls import title_to_url
from websailor.text import truncate
from websailor.tools.base import Tool
from websailor.tools.extract import Extraction, extract, llm_extract
from websailor.tools.search import BLOCK_SEPARATOR

#: Longest goal or URL echoed back in an observation (characters).
MAX_ECHO_CHARS = 500


def page_not_found(corpus: Corpus, url: str) -> str:
    """Observation for a URL that is not in the corpus, with the closest titles."""
    if not url.strip():
        return "Empty URL: give the URL of a page."
    close = corpus.closest_titles(url)
    text = (
        f"The page {truncate(url, MAX_ECHO_CHARS)} could not be found: it is not in the offline Wikipedia, or the URL is wrong. "
        "Use search to find pages, then visit the URLs it returns."
    )
    if close:
        text += "\nClosest pages:\n" + "\n".join(f"{i}. [{t}]({title_to_url(t)})" for i, t in enumerate(close, 1))
    return text


def format_visit(url: str, goal: str, found: Extraction) -> str:
    """A visited page as the Tongyi DeepResearch visit tool lays it out: evidence, then summary."""
    goal = truncate(" ".join(goal.split()), MAX_ECHO_CHARS)
    return (
        f"Page {url}, read for the goal: {goal}\n\n"
        "Evidence in page:\n" + "\n".join(found.evidence) + "\n\n"
        f"Summary:\n{found.summary}\n"
    )


class VisitTool(Tool):
    """Visit pages: evidence for the goal (most relevant passages first) and a summary.

    The observation is laid out like the released Tongyi DeepResearch visit tool. Unknown
    URLs give a "could not be found" observation with the closest titles.

    Args:
        corpus: the corpus pages come from.
        summary_model: a chat model for LLM extraction (``--summary-model``); the goal-ranked
            passage extractor is used without it, or when the model's output is unusable.
        max_urls: pages per call; extra ones are dropped with a note.
        max_evidence_chars: evidence budget per page.
    """

    name = "visit"
    description = "Read one or more web pages and return the passages that serve a goal, with a short summary."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "url": {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "minItems": 1,
                "description": "A page URL, or an array of page URLs.",
            },
            "goal": {"type": "string", "description": "What you want to learn from the page(s)."},
        },
        "required": ["url", "goal"],
    }

    def __init__(
        self, corpus: Corpus, max_urls: int = 5, max_evidence_chars: int = 4000, summary_model: Any = None
    ) -> None:
        self.corpus = corpus
        self.summary_model = summary_model
        self.max_urls = max_urls
        self.max_evidence_chars = max_evidence_chars

    def visit_one(self, url: str, goal: str) -> str:
        doc = self.corpus.get(url)
        if doc is None:
            return page_not_found(self.corpus, url)
        found = None
        if self.summary_model is not None:
            found = llm_extract(self.summary_model, doc, goal[:MAX_QUERY_CHARS])
        if found is None:  # no extractor model, or it gave no usable JSON
            found = extract(doc, goal[:MAX_QUERY_CHARS], self.corpus.index, self.max_evidence_chars)
        return format_visit(doc.url, goal, found)

    def forward(self, url: str | list[str], goal: str) -> str:
        urls = [url] if isinstance(url, str) else list(url)
        note = ""
        if len(urls) > self.max_urls:
            note = f"Note: only the first {self.max_urls} of {len(urls)} URLs were visited.\n"
            urls = urls[: self.max_urls]
        blocks = [self.visit_one(u, goal) for u in urls]
        return note + BLOCK_SEPARATOR.join(blocks)
