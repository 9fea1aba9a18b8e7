"""Agent tools: the :class:`Tool` protocol and the local (offline Wikipedia) back ends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from websailor.corpus.corpus import Corpus
from websailor.tools.base import UNKNOWN_TOOL, Tool, ToolArgumentError, ToolResult
from websailor.tools.search import SearchTool
from websailor.tools.visit import VisitTool


def build_local_tools(corpus: Corpus, summary_model: Any = None) -> dict[str, Tool]:
    """The tools of the simulated environment over ``corpus``, by name.

    ``summary_model`` (a :class:`websailor.models.ChatModel`) switches ``visit`` to the LLM
    page extractor; by default it uses the goal-ranked passage extractor.
    """
    tools: list[Tool] = [SearchTool(corpus), VisitTool(corpus, summary_model=summary_model)]
    return {t.name: t for t in tools}


def execute_tool(tools: Mapping[str, Tool], name: str, arguments: str | Mapping[str, Any] | None) -> ToolResult:
    """Run tool ``name`` on raw ``arguments``. An unknown tool name gives an error observation
    listing the available tools."""
    available = ", ".join(sorted(tools))
    if not isinstance(name, str):
        kind = type(name).__name__
        return ToolResult(
            f"Error: the tool name must be a string, got {kind}. Available tools: {available}.",
            f"tool name is a {kind}",
            UNKNOWN_TOOL,
        )
    tool = tools.get(name)
    if tool is None:
        return ToolResult(
            f"Error: there is no tool named {name!r}. Available tools: {available}.",
            f"unknown tool {name!r}",
            UNKNOWN_TOOL,
        )
    return tool.execute(arguments)


def call_tool(tools: Mapping[str, Tool], name: str, arguments: str | Mapping[str, Any] | None) -> str:
    """Run tool ``name`` on raw ``arguments``; returns the observation the agent sees."""
    return execute_tool(tools, name, arguments).observation


__all__ = [
    "SearchTool",
    "Tool",
    "ToolArgumentError",
    "ToolResult",
    "VisitTool",
    "build_local_tools",
    "call_tool",
    "execute_tool",
]
