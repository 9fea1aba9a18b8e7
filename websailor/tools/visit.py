"""``visit``: the schema, argument handling and observation layout that every back end shares.

:class:`BaseVisitTool` takes one URL or several and a goal, and lays out each page as the
released Tongyi DeepResearch visit tool does (evidence in page, then a summary); a back end
implements :meth:`BaseVisitTool.visit_one`: the offline corpus
(:class:`websailor.tools.local.VisitTool`) or the web readers
(:class:`websailor.tools.web.WebVisitTool`).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from websailor.text import truncate
from websailor.tools.base import Tool
from websailor.tools.search import BLOCK_SEPARATOR

#: Longest goal or URL echoed back in an observation (characters).
MAX_ECHO_CHARS = 500


@dataclass(frozen=True)
class Extraction:
    """Evidence (passages, most relevant to the goal first) and a short summary."""

    evidence: list[str]
    summary: str


def format_visit(url: str, goal: str, found: Extraction) -> str:
    """A visited page as the Tongyi DeepResearch visit tool lays it out: evidence, then summary."""
    goal = truncate(" ".join(goal.split()), MAX_ECHO_CHARS)
    return (
        f"Page {url}, read for the goal: {goal}\n\n"
        "Evidence in page:\n" + "\n".join(found.evidence) + "\n\n"
        f"Summary:\n{found.summary}\n"
    )


class BaseVisitTool(Tool):
    """The ``visit`` tool of the paper: ``url`` (a string or an array) and ``goal``, both
    required; each page gives the evidence that serves the goal and a short summary.

    Attributes:
        max_urls: pages per call; extra ones are dropped with a note.
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
    max_urls: int = 5

    @abstractmethod
    def visit_one(self, url: str, goal: str) -> str:
        """The observation block of one page (the back end)."""

    def forward(self, url: str | list[str], goal: str) -> str:
        urls = [url] if isinstance(url, str) else list(url)
        note = ""
        if len(urls) > self.max_urls:
            note = f"Note: only the first {self.max_urls} of {len(urls)} URLs were visited.\n"
            urls = urls[: self.max_urls]
        blocks = [self.visit_one(u, goal) for u in urls]
        return note + BLOCK_SEPARATOR.join(blocks)
