"""The client side of the tool server: :class:`RemoteTool` and :func:`connect_tools`.

A remote tool has the server tool's exact schema, so the agent's system prompt is the same as
with local tools, and returns the server's observation unchanged. Argument checking happens
once, on the server. Transport failures (connection refused or reset, timeouts, HTTP 5xx) are
retried with exponential back-off and jitter; when the retries are spent the call becomes an
error observation, never an exception into the agent.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from websailor.errors import ConfigError
from websailor.tools.base import ERROR_KINDS, INVALID_ARGUMENTS, TOOL_ERROR, TOOL_SERVER, Tool, ToolResult


@dataclass(frozen=True)
class RetryPolicy:
    """How transient transport failures are retried.

    Attributes:
        max_attempts: tries per request (1 = no retry).
        backoff_s: first wait in seconds; it doubles on each retry, plus up to ``backoff_s`` of
            random jitter so that many workers do not retry in step.
        max_backoff_s: cap of one wait, in seconds.
    """

    max_attempts: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be a positive integer, got {self.max_attempts!r}")
        for key in ("backoff_s", "max_backoff_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ConfigError(f"{key} must be a non-negative number of seconds, got {value!r}")

    def retrying(self) -> Retrying:
        """A tenacity ``Retrying`` that retries :func:`is_transient` failures and re-raises the last."""
        return Retrying(
            stop=stop_after_attempt(self.max_attempts),
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.backoff_s, max=self.max_backoff_s, jitter=self.backoff_s),
            retry=retry_if_exception(is_transient),
        )


class ServerStatusError(Exception):
    """The tool server answered with an HTTP error status."""

    def __init__(self, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.detail = _detail(response)
        super().__init__(f"HTTP {self.status_code}: {self.detail}")


def is_transient(exc: BaseException) -> bool:
    """Whether a request failure is worth retrying: connection errors, protocol errors and
    HTTP 502-504 (a restarting server or proxy). A read timeout is not: the server may still
    be running the call, and a retry would run it again beside it."""
    if isinstance(exc, httpx.ReadTimeout):
        return False
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ServerStatusError) and exc.status_code in (502, 503, 504)


def _detail(response: httpx.Response, limit: int = 300) -> str:
    """The ``detail`` of an error reply (FastAPI style), else the start of its body, on one line."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:limit] or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return (detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False))[:limit]


def _request(client: httpx.Client, retry: RetryPolicy, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request with retries.

    Raises:
        httpx.HTTPError: the last transport failure, once the retries are spent.
        ServerStatusError: an HTTP error status (4xx at once; 5xx once the retries are spent).
    """

    def once() -> httpx.Response:
        response = client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ServerStatusError(response)
        return response

    return retry.retrying()(once)


def _jsonable(value: object) -> object:
    """``json.dumps`` fallback: any mapping is an object; anything else cannot be sent."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a {type(value).__name__} cannot be sent as JSON")


def _check_schema(schema: object) -> dict[str, Any]:
    """A tool schema from ``GET /tools``, checked.

    Raises:
        ConfigError: not a dict with a string ``name`` and ``description`` and a dict ``parameters``.
    """
    if not isinstance(schema, Mapping):
        raise ConfigError(f"a tool schema must be a JSON object, got {type(schema).__name__}")
    name, description, parameters = schema.get("name"), schema.get("description"), schema.get("parameters")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a tool schema has no name: {json.dumps(schema, default=str)[:200]}")
    if not isinstance(description, str) or not isinstance(parameters, Mapping):
        raise ConfigError(f"the schema of tool {name!r} lacks a string description or an object of parameters")
    return copy.deepcopy(dict(schema))


class RemoteTool(Tool):
    """A tool that runs on a websailor tool server.

    Args:
        schema: the tool's schema as returned by ``GET /tools``; :meth:`schema` returns it
            unchanged.
        client: an ``httpx.Client`` whose ``base_url`` is the server; shared by all the tools
            of one server (it is thread-safe and pools connections).
        retry: how transport failures are retried.

    Raises:
        ConfigError: the schema is malformed.
    """

    def __init__(self, schema: Mapping[str, Any], client: httpx.Client, retry: RetryPolicy | None = None) -> None:
        self._schema = _check_schema(schema)
        self.name = self._schema["name"]
        self.description = self._schema["description"]
        self.parameters = self._schema["parameters"]
        self.client = client
        self.retry = retry or RetryPolicy()
        self.url = str(client.base_url).rstrip("/")

    def __repr__(self) -> str:
        return f"RemoteTool({self.name!r}, url={self.url!r})"

    def schema(self) -> dict[str, Any]:
        """The server tool's schema, exactly as the server lists it."""
        return copy.deepcopy(self._schema)

    def execute(self, arguments: str | Mapping[str, Any] | None = None) -> ToolResult:
        """Run the tool on the server on the model's raw arguments (validated there); never
        raises: transport failures, after the retries, and server errors are error results."""
        try:
            body = json.dumps({"arguments": arguments}, default=_jsonable)
        except (TypeError, ValueError) as e:
            return ToolResult(
                f"[{self.name}] Invalid arguments: {e}. Expected a JSON object matching "
                f"{json.dumps(self.parameters, ensure_ascii=False)}",
                f"invalid arguments: {e}",
                INVALID_ARGUMENTS,
            )
        try:
            response = _request(
                self.client,
                self.retry,
                "POST",
                f"/tools/{self.name}",
                content=body,
                headers={"Content-Type": "application/json"},
            )
        except ServerStatusError as e:
            if is_transient(e):
                return self._unavailable(e)
            return ToolResult(
                f"[{self.name}] Error: the tool server at {self.url} refused the call ({e})",
                f"tool server refused the call ({e})",
                TOOL_SERVER,
            )
        except httpx.HTTPError as e:
            return self._unavailable(e)
        return self._result(response)

    def _unavailable(self, e: Exception) -> ToolResult:
        """The error result of a call that failed after all its attempts."""
        n = self.retry.max_attempts
        what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        tries = f" after {n} attempt{'s' * (n > 1)}"
        return ToolResult(
            f"[{self.name}] Error: the tool server at {self.url} did not answer ({what}){tries}. Try again later.",
            f"tool server unavailable ({what}){tries}",
            TOOL_SERVER,
        )

    def _result(self, response: httpx.Response) -> ToolResult:
        """The server's tool result, or an error result if the reply is not one."""
        try:
            body = response.json()
        except ValueError:
            body = None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("observation"), str)
            or not isinstance(body.get("error"), (str, type(None)))
        ):
            return ToolResult(
                f"[{self.name}] Error: the tool server at {self.url} sent a reply that is not a "
                f"tool result: {response.text[:200]!r}",
                "malformed tool server reply",
                TOOL_SERVER,
            )
        kind = body.get("kind") if body["error"] is not None else None
        if kind is not None and kind not in ERROR_KINDS:
            kind = TOOL_ERROR  # a newer server's kind this client does not know
        return ToolResult(body["observation"], body["error"], kind)

    def forward(self, **kwargs: Any) -> str:
        """The observation of a server call with these keyword arguments."""
        return self.execute(kwargs).observation


def _base_url(url: str) -> str:
    """``url`` without a trailing slash.

    Raises:
        ConfigError: not an ``http://`` or ``https://`` URL with a host.
    """
    if not isinstance(url, str):
        raise ConfigError(f"the tool server URL must be a string, got {type(url).__name__}")
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError) as e:
        raise ConfigError(f"the tool server URL {url!r} is invalid ({e})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"the tool server URL must look like http://HOST:PORT, got {url!r}")
    return str(parsed).rstrip("/")


def _get_json(client: httpx.Client, retry: RetryPolicy, path: str, url: str) -> object:
    """``GET path`` as JSON.

    Raises:
        ConfigError: unreachable after the retries, an HTTP error, or a body that is not JSON.
    """
    try:
        response = _request(client, retry, "GET", path)
    except ServerStatusError as e:
        raise ConfigError(f"{url} does not look like a websailor tool server (GET {path} gave {e})") from None
    except httpx.HTTPError as e:
        raise ConfigError(
            f"cannot reach the tool server at {url} ({type(e).__name__}: {e}; "
            f"{retry.max_attempts} attempts); start one with `websailor serve tools`"
        ) from None
    try:
        return response.json()
    except ValueError:
        raise ConfigError(f"{url} does not look like a websailor tool server (GET {path} is not JSON)") from None


def _check_health(health: object, url: str) -> str:
    """The env name from a ``/health`` body.

    Raises:
        ConfigError: the body is not a websailor tool server's health reply.
    """
    if (
        not isinstance(health, dict)
        or health.get("status") != "ok"
        or not isinstance(health.get("env"), str)
        or not isinstance(health.get("tools"), list)
    ):
        raise ConfigError(
            f"{url} does not look like a websailor tool server (GET /health gave "
            f"{json.dumps(health, default=str)[:200]})"
        )
    return health["env"]


def connect_tools(url: str, timeout_s: float = 60.0, retry: RetryPolicy | None = None) -> tuple[dict[str, Tool], str]:
    """Connect to the tool server at ``url``: check ``/health``, read ``/tools``.

    Args:
        url: e.g. ``http://127.0.0.1:8000``.
        timeout_s: per-request timeout in seconds (a tool call included; connecting is capped
            at 10 s). A timed-out call is retried like any transport failure.
        retry: how transport failures are retried (also while connecting, so workers may
            start while the server is still loading its index).

    Returns:
        ``(tools by name, the server's env name)``; the tools share one pooled HTTP client.
        Proxy environment variables are ignored: the tool server is an internal service.

    Raises:
        ConfigError: a bad URL or timeout, no server answering at ``url``, or something there
            that is not a websailor tool server. The message names the URL.
    """
    base = _base_url(url)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    retry = retry or RetryPolicy()
    client = httpx.Client(
        base_url=base,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        trust_env=False,
    )
    try:
        env = _check_health(_get_json(client, retry, "/health", base), base)
        schemas = _get_json(client, retry, "/tools", base)
        if not isinstance(schemas, list) or not schemas:
            raise ConfigError(
                f"{base} does not look like a websailor tool server (GET /tools is not a list of schemas)"
            )
        tools: dict[str, Tool] = {}
        for schema in schemas:
            try:
                tool = RemoteTool(schema, client, retry)
            except ConfigError as e:
                raise ConfigError(f"{base} listed a bad tool: {e}") from None
            if tool.name in tools:
                raise ConfigError(f"{base} lists the tool {tool.name!r} twice")
            tools[tool.name] = tool
    except BaseException:
        client.close()
        raise
    return tools, env
