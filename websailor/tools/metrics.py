"""Per-tool metrics of the execution layer: calls, errors by kind, retries, cache hits,
failovers and latency percentiles. Thread-safe; one registry per run (no global state)."""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Latencies kept per tool for the percentiles (the latest ones; older ones drop out).
LATENCY_WINDOW = 100_000


@dataclass
class ToolStats:
    """Counters of one tool.

    ``calls``/``errors``/``latencies_s`` count the agent's tool calls (one per ``<tool_call>``);
    the ``requests`` fields count provider operations under it (one query, one page), where
    ``request_errors`` holds every failed attempt by kind, ``retries`` the attempts repeated,
    ``failovers`` the switches to a backup provider, ``degraded`` the operations that every
    provider failed (the agent got an explanatory observation instead); ``env_failed`` the
    agent's calls whose observation an environment failure degraded
    (:attr:`websailor.tools.ToolResult.env_failures`).
    """

    calls: int = 0
    env_failed: int = 0
    errors: Counter = field(default_factory=Counter)
    latencies_s: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    failovers: int = 0
    degraded: int = 0
    request_errors: Counter = field(default_factory=Counter)
    request_latencies_s: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures; latencies in milliseconds (``None`` with no samples)."""
        return {
            "calls": self.calls,
            "errors": dict(self.errors),
            "env_failed": self.env_failed,
            "p50_ms": _percentile(self.latencies_s, 50),
            "p99_ms": _percentile(self.latencies_s, 99),
            "requests": self.requests,
            "cache_hits": self.cache_hits,
            "retries": self.retries,
            "failovers": self.failovers,
            "degraded": self.degraded,
            "request_errors": dict(self.request_errors),
            "request_p50_ms": _percentile(self.request_latencies_s, 50),
            "request_p99_ms": _percentile(self.request_latencies_s, 99),
        }


def _percentile(values: deque, q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 3) if values else None


class ToolMetrics:
    """Registry of :class:`ToolStats` by tool name, safe to update from many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, ToolStats] = {}

    def _get(self, tool: str) -> ToolStats:
        s = self._stats.get(tool)
        if s is None:
            s = self._stats[tool] = ToolStats()
        return s

    def register(self, tools: Any) -> None:
        """Give each of ``tools`` (names) a row, so tools never called show zeros."""
        with self._lock:
            for name in tools:
                self._get(name)

    def record_call(self, tool: str, latency_s: float, error_kind: str | None = None, env_failed: bool = False) -> None:
        """One tool call of the agent (``error_kind`` when its result was an error,
        ``env_failed`` when the environment degraded its observation)."""
        with self._lock:
            s = self._get(tool)
            s.calls += 1
            s.env_failed += env_failed
            s.latencies_s.append(latency_s)
            if error_kind:
                s.errors[error_kind] += 1

    def record_request(self, tool: str, latency_s: float, *, cache_hit: bool = False, degraded: bool = False) -> None:
        """One provider operation finished (from the cache, a provider, or degraded)."""
        with self._lock:
            s = self._get(tool)
            s.requests += 1
            s.request_latencies_s.append(latency_s)
            s.cache_hits += cache_hit
            s.degraded += degraded

    def record_attempt_error(self, tool: str, kind: str) -> None:
        with self._lock:
            self._get(tool).request_errors[kind] += 1

    def record_retry(self, tool: str) -> None:
        with self._lock:
            self._get(tool).retries += 1

    def record_failover(self, tool: str) -> None:
        with self._lock:
            self._get(tool).failovers += 1

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{tool: ToolStats.summary()}``, tools sorted by name."""
        with self._lock:
            return {name: self._stats[name].summary() for name in sorted(self._stats)}


def metrics_table(summary: dict[str, dict[str, Any]]) -> Any:
    """A rich table of :meth:`ToolMetrics.summary` for the end of a run."""
    from rich.table import Table

    table = Table(title="Tool metrics")
    for col in (
        "tool",
        "calls",
        "errors",
        "env failed",
        "requests",
        "cache hits",
        "retries",
        "failovers",
        "degraded",
        "p50 ms",
        "p99 ms",
    ):
        table.add_column(col, justify="left" if col == "tool" else "right")
    for name, s in summary.items():
        errors = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items())) or "0"
        table.add_row(
            name,
            str(s["calls"]),
            errors,
            str(s.get("env_failed", 0)),
            str(s["requests"]),
            str(s["cache_hits"]),
            str(s["retries"]),
            str(s["failovers"]),
            str(s["degraded"]),
            *("-" if s[k] is None else f"{s[k]:.1f}" for k in ("p50_ms", "p99_ms")),
        )
    return table


def append_metrics(path: str | Path, summary: dict[str, dict[str, Any]], **context: Any) -> None:
    """Append one JSON line ``{"time", **context, "tools": summary}`` to ``path`` (one line per
    invocation, so a resumed run keeps the figures of the earlier ones)."""
    import json
    import time

    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **context, "tools": summary}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
