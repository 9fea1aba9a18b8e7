"""Agent tools: the :class:`Tool` protocol and the local (offline Wikipedia) back ends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from websailor.corpus.corpus import Corpus
from websailor.tools.base import Tool, ToolArgumentError
from websailor.tools.search import SearchTool
from websailor.tools.visit import VisitTool


def build_local_tools(corpus: Corpus) -> dict[str, Tool]:
    """The tools of the simulated environment over ``corpus``, by name."""
    tools: list[Tool] = [SearchTool(corpus), VisitTool(corpus)]
    return {t.name: t for t in tools}


def call_tool(tools: Mapping[str, Tool], name: str, arguments: str | Mapping[str, Any] | None) -> str:
    """Run tool ``name`` on raw ``arguments``; returns the observation the agent sees.

    An unknown tool name gives an error observation listing the available tools.
    """
    if not isinstance(name, str):
        return f"Error: the tool name must be a string, got {type(name).__name__}. Available tools: {', '.join(sorted(tools))}."
    tool = tools.get(name)
    if tool is None:
        return f"Error: there is no tool named {name!r}. Available tools: {', '.join(sorted(tools))}."
    return tool(arguments)


__all__ = ["SearchTool", "Tool", "ToolArgumentError", "VisitTool", "build_local_tools", "call_tool"]
