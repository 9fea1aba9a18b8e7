"""A tool wrapper that records every call in a :class:`~websailor.tools.metrics.ToolMetrics`."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from websailor.tools.base import Tool, ToolResult
from websailor.tools.metrics import ToolMetrics


class MeteredTool(Tool):
    """``tool`` with the same name and schema, whose calls (latency, error kind) are counted.

    A tool that raises (a bug) is counted as ``exception`` and the exception propagates to the
    agent, which turns it into an observation.
    """

    def __init__(self, tool: Tool, metrics: ToolMetrics) -> None:
        self.inner = tool
        self.metrics = metrics
        self.name = tool.name
        self.description = tool.description
        self.parameters = tool.parameters

    def schema(self) -> dict[str, Any]:
        return self.inner.schema()

    def execute(self, arguments: str | Mapping[str, Any] | None = None) -> ToolResult:
        t0 = time.perf_counter()
        try:
            result = self.inner.execute(arguments)
        except Exception:
            self.metrics.record_call(self.name, time.perf_counter() - t0, "exception")
            raise
        self.metrics.record_call(self.name, time.perf_counter() - t0, result.kind, bool(result.env_failures))
        return result

    def forward(self, **kwargs: Any) -> str:
        return self.inner.forward(**kwargs)
