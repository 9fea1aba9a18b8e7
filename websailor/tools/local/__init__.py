"""The simulated environment's tools over an offline corpus: ``search`` (BM25) and ``visit``
(goal-ranked passages, or the LLM extractor with a summary model)."""

from __future__ import annotations

from typing import Any

from websailor.corpus.corpus import SNIPPET_CHARS, Corpus
from websailor.tools.base import Tool
from websailor.tools.extract import EVIDENCE_CHARS
from websailor.tools.local.search import SearchTool
from websailor.tools.local.visit import PageView, VisitTool, page_not_found


def build_local_tools(
    corpus: Corpus,
    summary_model: Any = None,
    *,
    search_results: int | None = None,
    snippet_chars: int | None = None,
    evidence_chars: int | None = None,
) -> dict[str, Tool]:
    """The tools of the simulated environment over ``corpus``, by name.

    ``summary_model`` (a :class:`websailor.models.ChatModel`) switches ``visit`` to the LLM
    page extractor; by default it uses the goal-ranked passage extractor. The observation
    settings (``None``: the paper's; see :class:`websailor.tools.environment.EnvSpec`) are the
    results per query and the snippet length of ``search`` and the evidence budget of
    ``visit`` per page.
    """
    search = SearchTool(
        corpus,
        top_k=search_results if search_results is not None else 10,
        snippet_chars=snippet_chars if snippet_chars is not None else SNIPPET_CHARS,
    )
    visit = VisitTool(
        corpus,
        max_evidence_chars=evidence_chars if evidence_chars is not None else EVIDENCE_CHARS,
        summary_model=summary_model,
        cut_llm_evidence=evidence_chars is not None,
    )
    tools: list[Tool] = [search, visit]
    return {t.name: t for t in tools}


__all__ = ["PageView", "SearchTool", "VisitTool", "build_local_tools", "page_not_found"]
