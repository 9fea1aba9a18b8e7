"""One entry point for the agent's tool set: the simulated environment (offline Wikipedia),
the real web, or a shared tool server; every tool is metered.

An :class:`EnvSpec` holds every environment option of a run (the ``--env``, ``--corpus``,
``--tools-url``, ``--web-config``, ``--tools``, ``--files-dir``, ``--unsafe-python``,
``--summary-model`` and the observation settings ``--search-results``, ``--snippet-chars``,
``--evidence-chars`` and ``--observations`` of every command that runs the agent);
:func:`open_environment` builds the tools from it:

- ``EnvSpec(kind="local")``: ``search`` and ``visit`` over the corpus (``PythonInterpreter`` and
  ``parse_file`` on request);
- ``EnvSpec(kind="web")``: ``search``, ``visit``, ``google_scholar``, ``PythonInterpreter`` and
  ``parse_file`` through the execution layer;
- ``EnvSpec(tools_url=URL)``: the tools a ``websailor serve tools`` process exposes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from websailor.errors import ConfigError
from websailor.log import get_logger
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
#: spend several attempts and a failover on the server. The start-up check (``/health``,
#: ``/tools``) has its own short timeout (:data:`websailor.server.client.HEALTH_TIMEOUT_S`).
REMOTE_TIMEOUT_S = 600.0

logger = get_logger(__name__)

#: The command-line option of each :class:`EnvSpec` field.
OPTIONS = {
    "kind": "--env",
    "corpus": "--corpus",
    "tools_url": "--tools-url",
    "web_config": "--web-config",
    "tools": "--tools",
    "files_dir": "--files-dir",
    "unsafe_python": "--unsafe-python",
    "summary_model": "--summary-model",
    "search_results": "--search-results",
    "snippet_chars": "--snippet-chars",
    "evidence_chars": "--evidence-chars",
}

#: The observation settings: how much of the corpus or the web one tool call shows the model.
OBSERVATION_FIELDS = ("search_results", "snippet_chars", "evidence_chars")
#: The paper's observations (what every field left unset means): 10 results per query, the
#: local snippet of 300 characters (on the web, the provider's snippet), 4,000 characters of
#: evidence per visited page.
PAPER_OBSERVATIONS = {"search_results": 10, "snippet_chars": 300, "evidence_chars": 4000}
#: ``--observations compact``: small observations for a small model on CPU (a 135M model with
#: a short context), measured in docs/tools.md.
COMPACT_OBSERVATIONS = {"search_results": 5, "snippet_chars": 160, "evidence_chars": 800}
#: The presets of ``--observations``; ``paper`` leaves every field at its default.
OBSERVATION_PRESETS = {"paper": {}, "compact": COMPACT_OBSERVATIONS}


class EnvSpec(BaseModel):
    """Every option that decides a run's tools, built once from the command line (or in code)
    and given to :func:`open_environment`; the same fields in every command that runs the
    agent (``run``, ``eval``, ``synth --filter-with``, ``traj build --source expert``,
    ``train rl``) and in ``tool`` and ``serve tools``.

    Attributes:
        kind: ``local`` (offline Wikipedia), ``web`` (real providers) or ``none`` (no tools:
            the direct-answer baseline).
        corpus: the local environment's corpus directory (default: the embedded one).
        tools_url: a ``websailor serve tools`` address; its tools replace ``kind``'s.
        web_config: the web settings file (see :func:`~websailor.tools.web.load_web_settings`;
            default ``$WEBSAILOR_WEB_CONFIG``).
        tools: tool names to offer instead of the environment's defaults (:data:`DEFAULT_TOOLS`;
            the local environment also has ``PythonInterpreter`` and ``parse_file`` on request);
            a comma-separated string is split.
        files_dir: the folder ``parse_file`` may read local files from (the local environment's
            ``parse_file`` needs one).
        unsafe_python: run ``PythonInterpreter`` without isolation where bubblewrap cannot run.
        summary_model: model spec of ``visit``'s LLM extractor (``smollm2``, ``hf:PATH`` or
            ``openai:MODEL@URL``); default: the goal-ranked passage extractor.
        search_results: results per query of ``search`` (and ``google_scholar``); the tool's
            description says the number. Default (``None``): the paper's 10.
        snippet_chars: longest snippet of a search result, in characters. Default: 300 in the
            local environment; on the web, the provider's snippet.
        evidence_chars: evidence budget of one visited page, in characters (the LLM
            extractor's evidence is cut to it too when it is set). Default: 4,000.

    The observation settings (:data:`OBSERVATION_FIELDS`) are positive integers or ``None``
    for the paper's value; :meth:`from_options` also takes ``observations`` (a preset of
    :data:`OBSERVATION_PRESETS`) that the three single options override. With a tool server,
    the server's own settings apply. Unknown fields are refused; :meth:`ignored` names the
    options given that the chosen environment does not use.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local", "web", "none"] = "local"
    corpus: Path | None = None
    tools_url: str | None = None
    web_config: Path | None = None
    tools: tuple[str, ...] | None = None
    files_dir: Path | None = None
    unsafe_python: bool = False
    summary_model: str | None = None
    search_results: int | None = None
    snippet_chars: int | None = None
    evidence_chars: int | None = None

    @field_validator(*OBSERVATION_FIELDS, mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if value is None:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"must be a positive integer, got {value!r}")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _split_tools(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [n.strip() for n in value.split(",") if n.strip()]
            if not value:
                raise ValueError("is empty: give comma-separated tool names")
        return value

    @field_validator("tools")
    @classmethod
    def _no_repeats(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None:
            twice = sorted({n for n in value if value.count(n) > 1})
            if twice:
                raise ValueError(f"names {', '.join(twice)} more than once")
        return value

    @field_validator("tools_url", "summary_model")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is empty")
        return value

    @field_validator("tools_url")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        from urllib.parse import urlsplit

        if value is None:
            return value
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError as e:
            raise ValueError(f"{value}: not a valid URL ({e})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value}: expected http(s)://HOST[:PORT] of a `websailor serve tools` server")
        return value

    @field_validator("files_dir")
    @classmethod
    def _a_folder(cls, value: Path | None) -> Path | None:
        # the corpus and the web settings file are checked, with a hint, where they are read
        if value is not None and not value.is_dir():
            raise ValueError(f"{value}: {'not a directory' if value.exists() else 'no such directory'}")
        return value

    @classmethod
    def from_options(cls, **options: Any) -> EnvSpec:
        """An :class:`EnvSpec` from option values (``None`` for options not given).

        ``observations`` (``paper`` or ``compact``, see :data:`OBSERVATION_PRESETS`) fills the
        observation settings not given one by one.

        Raises:
            ConfigError: a value that is not valid, naming its option (``--tools is empty: ...``).
        """
        options = {k: v for k, v in options.items() if v is not None}
        preset = options.pop("observations", None)
        if preset is not None:
            preset = getattr(preset, "value", preset)
            if preset not in OBSERVATION_PRESETS:
                raise ConfigError(f"--observations must be one of {', '.join(OBSERVATION_PRESETS)}, got {preset!r}")
            options = {**OBSERVATION_PRESETS[preset], **options}
        try:
            return cls(**options)
        except ValidationError as e:
            err = e.errors()[0]
            field = str(err["loc"][0]) if err["loc"] else ""
            message = err["msg"].removeprefix("Value error, ")
            sep = " " if message.startswith(("is ", "names ", "must ")) else ": "
            raise ConfigError(f"{OPTIONS.get(field, field)}{sep}{message}") from None

    def observations(self) -> dict[str, int]:
        """The observation settings that are set to something other than the paper's, by field
        name (``--search-results 10`` is the default, not a setting): what :meth:`record` and
        every trajectory (``env_settings``) record."""
        # an explicit paper value is the default (a web snippet is the provider's unless cut, so
        # --snippet-chars 300 on the web is a setting)
        same = {f: v for f, v in PAPER_OBSERVATIONS.items() if f != "snippet_chars" or self.kind != "web"}
        return {f: v for f in OBSERVATION_FIELDS if (v := getattr(self, f)) is not None and same.get(f) != v}

    def trajectory_settings(self) -> dict[str, int]:
        """The ``env_settings`` that trajectories run with this spec record: :meth:`observations`,
        or nothing with a tool server (its own settings apply) or with ``--env none``."""
        return {} if self.tools_url is not None or self.kind == "none" else self.observations()

    def given(self) -> list[str]:
        """The options set to something other than their default, as written on the command line."""
        defaults = EnvSpec()
        return [OPTIONS[f] for f in OPTIONS if getattr(self, f) != getattr(defaults, f)]

    def offered(self) -> tuple[str, ...]:
        """The tools the run asks for: :attr:`tools`, or the environment's defaults."""
        return self.tools if self.tools is not None else DEFAULT_TOOLS[self.kind]

    def ignored(self) -> list[str]:
        """One line for each option given that the chosen environment does not use (``--web-config``
        with ``--env local``, ``--corpus`` with a tool server, ``--files-dir`` without
        ``parse_file``, ...); :func:`open_environment` logs them as warnings."""
        given = [
            f
            for f in ("corpus", "web_config", "files_dir", "unsafe_python", "summary_model", *OBSERVATION_FIELDS)
            if getattr(self, f)
        ]
        if self.tools_url is not None:
            where = f"the tools are the tool server's at {_shown(self.tools_url)}"
            lines = [f"--env {self.kind} is ignored: {where}"] if self.kind != "local" else []
            return lines + [f"{OPTIONS[f]} is ignored: {where} (give it to `websailor serve tools`)" for f in given]
        if self.kind == "none":
            return [f"{OPTIONS[f]} is ignored: --env none has no tools" for f in given]
        lines = []
        if self.web_config is not None and self.kind != "web":
            lines.append("--web-config is ignored: it configures --env web")
        if self.corpus is not None and self.kind == "web":
            lines.append("--corpus is ignored: --env web searches and reads the real web")
        offered = self.offered()
        for f, tool in (
            ("files_dir", "parse_file"),
            ("unsafe_python", "PythonInterpreter"),
            ("summary_model", "visit"),
        ):  # (an observation setting without its tool is not named: a preset sets all three)
            if getattr(self, f) and tool not in offered:
                lines.append(f"{OPTIONS[f]} is ignored: {tool} is not among the tools ({', '.join(offered) or 'none'})")
        return lines

    def record(self) -> dict[str, Any]:
        """What identifies the environment of a run that resumes (``train rl``): the corpus (as
        an absolute path), and the kind, tools URL, tool list, summary model and observation
        settings (:meth:`observations`) when they are not the defaults. Operational options
        (web settings file, files folder, unsafe Python) are left out."""
        out: dict[str, Any] = {}
        if self.corpus is not None:
            out["corpus"] = str(Path(self.corpus).resolve())
        if self.kind != "local" or self.tools_url is not None or self.tools is not None:
            out.update(
                env=self.kind,
                tools_url=_shown(self.tools_url),
                tools=list(self.tools) if self.tools is not None else None,
            )
        if self.summary_model is not None:
            out["summary_model"] = self.summary_model
        out.update(self.observations())
        return out


@dataclass
class ToolEnvironment:
    """The tools of a run, by name, with their metrics; :meth:`close` releases connections.

    Attributes:
        name: recorded in trajectories (``local``, ``web``, ``none``; a tool server's own
            environment name when ``tools_url`` is used).
        tools: metered tools by name.
        metrics: calls, errors, retries, cache hits, failovers and latencies of this process.
        url: the tool server's address, when the tools are remote.
        settings: the observation settings that are not the paper's
            (:meth:`EnvSpec.observations`), recorded in every trajectory as ``env_settings``;
            empty with a tool server (its own settings apply and are not known here).
    """

    name: str
    tools: dict[str, Tool]
    metrics: ToolMetrics
    url: str | None = None
    settings: dict[str, int] = field(default_factory=dict)
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


def open_environment(spec: EnvSpec | None = None, *, summary_model: Any = None) -> ToolEnvironment:
    """Build the tool set of a run from ``spec`` (default: the local environment over the
    embedded corpus), after logging each option it ignores (:meth:`EnvSpec.ignored`).

    Args:
        spec: the environment options.
        summary_model: an already loaded chat model for ``visit``'s LLM extractor, instead of
            loading ``spec.summary_model`` (a model loaded here is closed by
            :meth:`ToolEnvironment.close`).

    Raises:
        ConfigError: an unknown tool name, an unreachable tool server, missing web provider
            settings, no sandbox for the Python tool, ``parse_file`` in the local environment
            without a files folder, or a bad summary model spec.
    """
    spec = spec or EnvSpec()
    for line in spec.ignored():
        logger.warning(line)
    metrics = ToolMetrics()
    if spec.tools_url is not None:
        from websailor.server.client import connect_tools

        remote, name = connect_tools(spec.tools_url, timeout_s=REMOTE_TIMEOUT_S)
        chosen = _choose(remote, spec.tools, f"the tool server at {_shown(spec.tools_url)}")
        metrics.register(chosen)
        tools = {n: MeteredTool(t, metrics) for n, t in chosen.items()}
        return ToolEnvironment(name, tools, metrics, url=_shown(spec.tools_url))
    env = spec.kind
    wanted = list(spec.offered())
    known = DEFAULT_TOOLS[env] + EXTRA_TOOLS[env]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        hint = (
            "; add --env web for the web's tools"
            if env == "local" and set(unknown) <= set(DEFAULT_TOOLS["web"])
            else ""
        )
        raise ConfigError(
            f"the {env} environment has no tool {', '.join(map(repr, unknown))}; it offers {', '.join(known) or 'none'}"
            + hint
        )
    closers: list[Any] = []
    if summary_model is None and spec.summary_model is not None and "visit" in wanted:
        from websailor.models import load_model

        try:
            summary_model = load_model(spec.summary_model)
        except ConfigError as e:
            raise ConfigError(f"--summary-model: {e}") from None
        closers.append(summary_model.close)
    built: dict[str, Tool] = {}
    try:
        if env == "local":
            from websailor.corpus import Corpus
            from websailor.tools.local import build_local_tools

            if {"search", "visit"} & set(wanted):
                built.update(
                    build_local_tools(Corpus.open(spec.corpus), summary_model=summary_model, **spec.observations())
                )
            built.update(_sandboxed_tools(wanted, spec.files_dir, spec.unsafe_python, fetch=None))
        elif env == "web":
            from websailor.tools.web import build_web_tools, load_web_settings
            from websailor.tools.web.tools import WEB_TOOLS, executor_fetch

            settings = load_web_settings(spec.web_config)
            web_tools, executor = build_web_tools(
                settings, summary_model, metrics, names=[n for n in wanted if n in WEB_TOOLS], **spec.observations()
            )
            closers.append(executor.close)
            built.update(web_tools)
            fetch = executor_fetch(executor, settings.allow_private_urls)
            built.update(_sandboxed_tools(wanted, spec.files_dir, spec.unsafe_python, fetch=fetch))
    except BaseException:
        for close in closers:
            close()
        raise
    chosen = {n: built[n] for n in wanted}
    metrics.register(chosen)
    return ToolEnvironment(
        env,
        {n: MeteredTool(t, metrics) for n, t in chosen.items()},
        metrics,
        settings=spec.trajectory_settings(),
        _closers=closers,
    )


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


def _shown(url: str | None) -> str | None:
    """A tool server URL without its credentials (:func:`websailor.server.client.shown_url`)."""
    from websailor.server.client import shown_url

    return None if url is None else shown_url(url)
