"""One entry point for the agent's tool set: the simulated environment (offline Wikipedia),
the real web, or a shared tool server; every tool is metered.

``open_environment("local")`` gives ``search`` and ``visit`` over the corpus;
``open_environment("web")`` gives ``search``, ``visit``, ``google_scholar``,
``PythonInterpreter`` and ``parse_file`` through the execution layer;
``open_environment(tools_url=URL)`` uses the tools a ``websailor serve tools`` process exposes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError
from websailor.tools.base import Tool
from websailor.tools.metered import MeteredTool
from websailor.tools.metrics import ToolMetrics

#: Tools each environment offers; the first ones are its default set.
DEFAULT_TOOLS = {
    "local": ("search", "visit"),
    "web": ("search", "visit", "google_scholar", "PythonInterpreter", "parse_file"),
    "none": (),
}
EXTRA_TOOLS = {"local": ("PythonInterpreter", "parse_file"), "web": (), "none": ()}
#: How long a client waits for a tool server's answer to one call (seconds): a web call may
#: spend several attempts and a failover on the server.
REMOTE_TIMEOUT_S = 600.0


@dataclass
class ToolEnvironment:
    """The tools of a run, by name, with their metrics; :meth:`close` releases connections.

    Attributes:
        name: recorded in trajectories (``local``, ``web``, ``none``; a tool server's own
            environment name when ``tools_url`` is used).
        tools: metered tools by name.
        metrics: calls, errors, retries, cache hits, failovers and latencies of this process.
        url: the tool server's address, when the tools are remote.
    """

    name: str
    tools: dict[str, Tool]
    metrics: ToolMetrics
    url: str | None = None
    _closers: list[Any] = field(default_factory=list, repr=False)

    def record_metrics(self, path: str | Path) -> dict[str, Any]:
        """Append this run's metrics to ``path`` (one JSON line with the environment's name and
        URL) when any tool was offered; returns them."""
        from websailor.tools.metrics import append_metrics

        summary = self.metrics.summary()
        if summary:
            append_metrics(path, summary, env=self.name, url=self.url)
        return summary

    def close(self) -> None:
        for close in self._closers:
            close()
        self._closers.clear()

    def __enter__(self) -> ToolEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_environment(
    env: str = "local",
    *,
    corpus: str | Path | None = None,
    summary_model: Any = None,
    web_config: str | Path | None = None,
    tools_url: str | None = None,
    tools: Sequence[str] | None = None,
    files_root: Path | None = None,
    allow_unsafe_python: bool = False,
) -> ToolEnvironment:
    """Build the tool set of a run.

    Args:
        env: ``local`` (offline Wikipedia), ``web`` (real providers) or ``none`` (no tools).
        corpus: the local environment's corpus directory (default: the embedded one).
        summary_model: a chat model for ``visit``'s LLM extractor (both environments).
        web_config: the web settings file (see :func:`~websailor.tools.web.load_web_settings`).
        tools_url: a ``websailor serve tools`` address; its tools replace ``env``'s.
        tools: tool names to offer instead of the environment's defaults
            (:data:`DEFAULT_TOOLS`; the local environment also has ``PythonInterpreter`` and
            ``parse_file`` on request).
        files_root: the folder ``parse_file`` may read local files from (none by default; the
            local environment's ``parse_file`` needs one).
        allow_unsafe_python: run Python without isolation where bubblewrap cannot run.

    Raises:
        ConfigError: an unknown environment or tool name, an unreachable tool server, missing
            web provider settings, or no sandbox for the Python tool.
    """
    metrics = ToolMetrics()
    if tools_url is not None:
        from websailor.server.client import connect_tools

        remote, name = connect_tools(tools_url, timeout_s=REMOTE_TIMEOUT_S)
        chosen = _choose(remote, tools, f"the tool server at {tools_url}")
        metrics.register(chosen)
        return ToolEnvironment(name, {n: MeteredTool(t, metrics) for n, t in chosen.items()}, metrics, url=tools_url)
    if env not in DEFAULT_TOOLS:
        raise ConfigError(f"unknown environment {env!r}; choose one of {', '.join(DEFAULT_TOOLS)}")
    wanted = list(tools) if tools is not None else list(DEFAULT_TOOLS[env])
    known = DEFAULT_TOOLS[env] + EXTRA_TOOLS[env]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ConfigError(
            f"the {env} environment has no tool {', '.join(map(repr, unknown))}; it offers {', '.join(known) or 'none'}"
        )
    closers: list[Any] = []
    built: dict[str, Tool] = {}
    if env == "local":
        from websailor.corpus import Corpus
        from websailor.tools.local import build_local_tools

        if {"search", "visit"} & set(wanted):
            built.update(build_local_tools(Corpus.open(corpus), summary_model=summary_model))
        built.update(_sandboxed_tools(wanted, files_root, allow_unsafe_python, fetch=None))
    elif env == "web":
        from websailor.tools.web import build_web_tools, load_web_settings
        from websailor.tools.web.tools import WEB_TOOLS, executor_fetch

        settings = load_web_settings(web_config)
        web_tools, executor = build_web_tools(
            settings, summary_model, metrics, names=[n for n in wanted if n in WEB_TOOLS]
        )
        closers.append(executor.close)
        built.update(web_tools)
        built.update(
            _sandboxed_tools(
                wanted, files_root, allow_unsafe_python, fetch=executor_fetch(executor, settings.allow_private_urls)
            )
        )
    chosen = {n: built[n] for n in wanted}
    metrics.register(chosen)
    return ToolEnvironment(env, {n: MeteredTool(t, metrics) for n, t in chosen.items()}, metrics, _closers=closers)


def _sandboxed_tools(wanted: Sequence[str], files_root: Path | None, allow_unsafe: bool, fetch: Any) -> dict[str, Tool]:
    out: dict[str, Tool] = {}
    if "PythonInterpreter" in wanted:
        from websailor.tools.python_interpreter import PythonInterpreterTool

        out["PythonInterpreter"] = PythonInterpreterTool(allow_unsafe=allow_unsafe)
    if "parse_file" in wanted:
        from websailor.tools.documents.parse_file import ParseFileTool

        if files_root is None and fetch is None:
            raise ConfigError(
                "parse_file in the local environment reads local files only: give the folder it may "
                "read (--files-dir DIR)"
            )
        out["parse_file"] = ParseFileTool(files_root=files_root, fetch=fetch)
    return out


def _choose(available: dict[str, Tool], names: Sequence[str] | None, where: str) -> dict[str, Tool]:
    if names is None:
        return available
    missing = [n for n in names if n not in available]
    if missing:
        raise ConfigError(f"{where} has no tool {', '.join(map(repr, missing))}; it offers {', '.join(available)}")
    return {n: available[n] for n in names}
