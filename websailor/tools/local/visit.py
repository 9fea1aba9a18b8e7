"""``visit`` over the offline corpus: a page's passages ranked for the goal, then a summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from websailor.corpus.corpus import MAX_QUERY_CHARS, Corpus
from websailor.corpus.store import Document
from websailor.corpus.urls import title_to_url
from websailor.text import truncate
from websailor.tools.extract import EVIDENCE_CHARS, extract_for_goal
from websailor.tools.visit import MAX_ECHO_CHARS, BaseVisitTool, Extraction, format_visit


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


@dataclass(frozen=True)
class PageView:
    """One URL as ``websailor visit`` shows it.

    Attributes:
        record: the JSON form: ``url``, ``found``, and ``closest`` titles when not found, else
            ``title``, ``description`` and either the whole ``text`` (no goal) or ``goal``,
            ``evidence`` and ``summary``.
        block: the text form: the not-found observation, the whole page (no goal), or exactly
            the agent's observation (with a goal).
    """

    record: dict[str, Any]
    block: str


class VisitTool(BaseVisitTool):
    """Visit pages: evidence for the goal (most relevant passages first) and a summary.

    The observation is laid out like the released Tongyi DeepResearch visit tool. Unknown
    URLs give a "could not be found" observation with the closest titles.

    Args:
        corpus: the corpus pages come from.
        summary_model: a chat model for LLM extraction (``--summary-model``); the goal-ranked
            passage extractor is used without it, or when the model's output is unusable.
        max_urls: pages per call; extra ones are dropped with a note.
        max_evidence_chars: evidence budget per page (``--evidence-chars``).
        cut_llm_evidence: cut the LLM extractor's evidence to ``max_evidence_chars`` too (when
            the budget was set rather than left at its default).
    """

    def __init__(
        self,
        corpus: Corpus,
        max_urls: int = 5,
        max_evidence_chars: int = EVIDENCE_CHARS,
        summary_model: Any = None,
        cut_llm_evidence: bool = False,
    ) -> None:
        self.corpus = corpus
        self.summary_model = summary_model
        self.max_urls = max_urls
        self.max_evidence_chars = max_evidence_chars
        self.cut_llm_evidence = cut_llm_evidence

    def extraction(self, doc: Document, goal: str) -> Extraction:
        """Evidence and summary of ``doc`` for ``goal``: the LLM extractor when a summary model
        is set and its output is usable, else the goal-ranked passage extractor."""
        return extract_for_goal(
            doc,
            goal[:MAX_QUERY_CHARS],
            self.corpus.index,
            self.summary_model,
            self.max_evidence_chars,
            self.cut_llm_evidence,
        )

    def visit_one(self, url: str, goal: str) -> str:
        doc = self.corpus.get(url)
        if doc is None:
            return page_not_found(self.corpus, url)
        return format_visit(doc.url, goal, self.extraction(doc, goal))

    def view(self, url: str, goal: str | None = None) -> PageView:
        """``url`` as ``websailor visit`` shows it: with a goal, exactly the agent's
        observation; without one, the whole page (see :class:`PageView`)."""
        doc = self.corpus.get(url)
        if doc is None:
            return PageView(
                {"url": url, "found": False, "closest": self.corpus.closest_titles(url)},
                page_not_found(self.corpus, url),
            )
        record: dict[str, Any] = {"url": doc.url, "found": True, "title": doc.title, "description": doc.description}
        if goal is None:
            record["text"] = doc.text
            head = f"# {doc.title}\n{doc.url}" + (f"\n{doc.description}" if doc.description else "")
            return PageView(record, f"{head}\n\n{doc.text}")
        found = self.extraction(doc, goal)
        record.update(goal=goal, evidence=found.evidence, summary=found.summary)
        return PageView(record, format_visit(doc.url, goal, found))
