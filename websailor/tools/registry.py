"""Calling a tool by name, as the agent does: an unknown name is an observation, not an error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from websailor.tools.base import UNKNOWN_TOOL, Tool, ToolResult


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
