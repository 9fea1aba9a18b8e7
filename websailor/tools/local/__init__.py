"""The simulated environment's tools over an offline corpus: ``search`` (BM25) and ``visit``
(goal-ranked passages, or the LLM extractor with a summary model)."""

from __future__ import annotations

from typing import Any

from websailor.corpus.corpus import Corpus
from websailor.tools.base import Tool
from websailor.tools.local.search import SearchTool
from websailor.tools.local.visit import PageView, VisitTool, page_not_found


def build_local_tools(corpus: Corpus, summary_model: Any = None) -> dict[str, Tool]:
    """The tools of the simulated environment over ``corpus``, by name.

    ``summary_model`` (a :class:`websailor.models.ChatModel`) switches ``visit`` to the LLM
    page extractor; by default it uses the goal-ranked passage extractor.
    """
    tools: list[Tool] = [SearchTool(corpus), VisitTool(corpus, summary_model=summary_model)]
    return {t.name: t for t in tools}


__all__ = ["PageView", "SearchTool", "VisitTool", "build_local_tools", "page_not_found"]
