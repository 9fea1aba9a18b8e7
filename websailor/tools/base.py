"""The tool protocol shared by local and web back ends.

A tool is a small object with a ``name``, a ``description`` and ``parameters`` (a JSON
schema), called with the arguments the model wrote and returning the observation string the
model will read. A tool never raises on bad arguments or missing pages: it returns an error
observation that tells the model what was wrong, because the caller is an agent.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from websailor.errors import ServiceDown, WebsailorError
from websailor.jsonio import loads_object
from websailor.text import clean_strings

#: Kinds of failed tool calls, as :class:`ToolResult` ``kind`` and in the tool metrics.
INVALID_ARGUMENTS = "invalid_arguments"  # not JSON, not an object, or not matching the schema
UNKNOWN_TOOL = "unknown_tool"  # no tool of that name (or a name that is not a string)
TOOL_ERROR = "tool_error"  # the tool ran and failed (missing page, provider down, a bug)
TOOL_SERVER = "tool_server"  # a remote tool's server did not answer, refused or garbled the call
FORMAT_ERROR = "format_error"  # the model's turn had no valid tool call (agent feedback, not a call)
ERROR_KINDS = (INVALID_ARGUMENTS, UNKNOWN_TOOL, TOOL_ERROR, TOOL_SERVER, FORMAT_ERROR)

#: Kinds of environment failures (:attr:`ToolResult.env_failures`): what went wrong outside the
#: model when a call's observation was degraded. The execution layer's provider fault kinds
#: (``timeout``, ``server_error``, ``rate_limited``, ``connection``, ``truncated``,
#: ``bad_response``, ``auth``, ``unusable``, ``upstream_unavailable``, ``provider_error``,
#: ``circuit_open``, ``cancelled``) come from :mod:`websailor.tools.web.failures`; these come
#: from the tool server's client.
TOOL_SERVER_UNREACHABLE = "tool_server_unreachable"  # nothing answered, or a timeout/reset after the retries
TOOL_SERVER_ERROR = "tool_server_error"  # the server answered an HTTP error (5xx, or a 4xx for a valid call)
TOOL_SERVER_REPLY = "tool_server_reply"  # the server's reply is not a tool result


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: the ``observation`` the model reads and, if the call failed,
    a short ``error`` and its ``kind`` (one of :data:`ERROR_KINDS`; :data:`TOOL_ERROR` when
    an error is given without one).

    ``env_failures`` names the environment failures that degraded the observation, one kind
    per failed operation (a search query every provider failed for a server error, a tool
    server that did not answer): failures outside the model, which eval leaves ungraded and RL
    leaves out of the loss. Empty when the environment held, including calls that failed for
    the model's own reasons (a bad argument, a dead link, a 404 page). A call may have
    ``env_failures`` without an ``error``: a search where one of three queries failed still
    answers the other two.

    Raises:
        ValueError: a ``kind`` without an ``error``, a kind not in :data:`ERROR_KINDS`, or
            ``env_failures`` that are not a tuple of strings.
    """

    observation: str
    error: str | None = None
    kind: str | None = None
    env_failures: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.env_failures, tuple) or not all(isinstance(k, str) for k in self.env_failures):
            raise ValueError(f"env_failures must be a tuple of kind names, got {self.env_failures!r}")
        if self.error is None:
            if self.kind is not None:
                raise ValueError(f"a ToolResult without an error has no error kind, got {self.kind!r}")
        elif self.kind is None:
            object.__setattr__(self, "kind", TOOL_ERROR)
        elif self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown tool error kind {self.kind!r}; valid: {', '.join(ERROR_KINDS)}")


class ToolArgumentError(WebsailorError):
    """The arguments of a tool call are not valid JSON or do not match the tool's schema."""


class Tool(ABC):
    """Base class of the agent's tools (smolagents-style: metadata plus one ``forward``).

    Subclasses set ``name``, ``description`` and ``parameters`` and implement
    :meth:`forward`, which receives validated keyword arguments.
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {}

    def schema(self) -> dict[str, Any]:
        """The function schema listed in the system prompt's ``<tools>`` block."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def coerce(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Fix common, unambiguous slips before validation (override per tool; a lone string
        given for an ``array`` parameter is already wrapped in a list by :meth:`parse_arguments`)."""
        return arguments

    def _wrap_lone_strings(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``{"query": "x"}`` -> ``{"query": ["x"]}`` for every parameter whose type is ``array``."""
        for name, spec in self.parameters.get("properties", {}).items():
            if spec.get("type") == "array" and isinstance(arguments.get(name), str):
                arguments[name] = [arguments[name]]
        return arguments

    def parse_arguments(self, arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """JSON text or a mapping -> validated argument dict.

        Raises:
            ToolArgumentError: not JSON, not an object, or not matching :attr:`parameters`.
        """
        if arguments is None:
            arguments = {}
        if isinstance(arguments, str):
            try:
                arguments = loads_object(arguments.strip() or "{}")
            except ValueError as e:
                raise ToolArgumentError(str(e)) from None
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(f"expected a JSON object, got {type(arguments).__name__}")
        args = self.coerce(self._wrap_lone_strings(clean_strings(dict(arguments))))
        errors = sorted(Draft202012Validator(self.parameters).iter_errors(args), key=lambda e: list(e.path))
        if errors:
            raise ToolArgumentError(
                "; ".join(("/".join(str(p) for p in e.path) + ": " if e.path else "") + e.message for e in errors[:3])
            )
        return args

    def execute(self, arguments: str | Mapping[str, Any] | None = None) -> ToolResult:
        """Run the tool on raw arguments; never raises for bad input.

        Arguments the schema does not name are ignored, with a note in the observation.
        """
        try:
            args = self.parse_arguments(arguments)
        except ToolArgumentError as e:
            return ToolResult(
                f"[{self.name}] Invalid arguments: {e}. Expected a JSON object matching "
                f"{json.dumps(self.parameters, ensure_ascii=False)}",
                f"invalid arguments: {e}",
                INVALID_ARGUMENTS,
            )
        known = self.parameters.get("properties", {})
        unknown = sorted(k for k in args if k not in known)
        note = f"Note: ignored unknown argument(s) {', '.join(map(repr, unknown))}.\n" if unknown else ""
        try:
            out = self.forward(**{k: v for k, v in args.items() if k in known})
        except ServiceDown:  # a service the tool uses (a summary model) was declared down: the run stops
            raise
        except WebsailorError as e:
            return ToolResult(f"[{self.name}] Error: {e}", str(e), env_failures=tuple(getattr(e, "env_failures", ())))
        if isinstance(out, ToolResult):  # a tool that reports environment failures returns its result
            return ToolResult(note + out.observation, out.error, out.kind, out.env_failures)
        return ToolResult(note + out)

    def __call__(self, arguments: str | Mapping[str, Any] | None = None) -> str:
        """Run the tool on raw arguments; always returns the observation string."""
        return self.execute(arguments).observation

    @abstractmethod
    def forward(self, **kwargs: Any) -> str | ToolResult:
        """Do the work on validated arguments and return the observation (or a
        :class:`ToolResult`, to report :attr:`ToolResult.env_failures`). A
        :class:`~websailor.errors.WebsailorError` raised here becomes an error observation; one
        with an ``env_failures`` attribute (a tuple of kinds) reports them too;
        :class:`~websailor.errors.ServiceDown` (a service declared down) goes through."""
