"""Agent tools: the :class:`Tool` protocol, :class:`ToolResult` and calling tools by name.

The back ends live in sub-packages: :mod:`websailor.tools.local` (the offline corpus),
:mod:`websailor.tools.web` (providers behind the execution layer),
:mod:`websailor.tools.documents` (``parse_file``), and
:mod:`websailor.tools.python_interpreter` over :mod:`websailor.sandbox`;
:mod:`websailor.tools.environment` assembles a run's tool set from an
:class:`~websailor.tools.environment.EnvSpec`. Importing this package loads none of them:
``SearchTool``, ``VisitTool`` and ``build_local_tools`` are still importable from here (they
come from :mod:`websailor.tools.local` on first use).
"""

from __future__ import annotations

from typing import Any

from websailor.tools.base import Tool, ToolArgumentError, ToolResult
from websailor.tools.registry import call_tool, execute_tool

_LOCAL = ("SearchTool", "VisitTool", "build_local_tools")


def __getattr__(name: str) -> Any:
    if name in _LOCAL:
        from websailor.tools import local

        return getattr(local, name)
    raise AttributeError(f"module 'websailor.tools' has no attribute {name!r}")


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
