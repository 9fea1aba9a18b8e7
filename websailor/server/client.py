"""The client side of the tool server: :class:`RemoteTool` and :func:`connect_tools`.

A remote tool has the server tool's exact schema, so the agent's system prompt is the same as
with local tools, and returns the server's result unchanged, its ``env_failures`` included.
Argument checking happens once, on the server. Transport failures (connection refused or
reset, HTTP 502-504) are retried with exponential back-off and jitter; when the retries are
spent the call becomes an error observation naming the environment failure
(``tool_server_unreachable``, ``tool_server_error``, ``tool_server_reply``). A tool call that
times out is not retried: it may still be running. The tools of one server share a circuit
breaker (:mod:`websailor.breaker`): after its threshold of failed attempts in a row the server
is declared down and every call raises :class:`~websailor.errors.ServiceDown`, the one
exception a tool call lets into the agent: the run stops instead of every rollout retrying.

:func:`connect_tools` checks the server at start with short requests of its own
(:data:`HEALTH_TIMEOUT_S`, :data:`HEALTH_RETRY`), so a wrong URL is a one-line error within
seconds whatever the tool calls' timeout.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from websailor.breaker import ServiceBreaker, through
from websailor.errors import ConfigError
from websailor.tools.base import (
    ERROR_KINDS,
    INVALID_ARGUMENTS,
    TOOL_ERROR,
    TOOL_SERVER,
    TOOL_SERVER_ERROR,
    TOOL_SERVER_REPLY,
    TOOL_SERVER_UNREACHABLE,
    Tool,
    ToolResult,
)


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

    def retrying(self, timeouts: bool = False) -> Retrying:
        """A tenacity ``Retrying`` that retries :func:`is_transient` failures (read timeouts too
        with ``timeouts``) and re-raises the last."""
        return Retrying(
            stop=stop_after_attempt(self.max_attempts),
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.backoff_s, max=self.max_backoff_s, jitter=self.backoff_s),
            retry=retry_if_exception(lambda e: is_transient(e, timeouts)),
        )


#: The start-up check's timeout per request (seconds; connecting included): ``GET /health``
#: and ``GET /tools`` answer at once from a tool server, however busy its tool threads are.
HEALTH_TIMEOUT_S = 3.0
#: The start-up check's retries: 3 attempts, the waits between them 1-2 s and 2-3 s, so a
#: server that is restarting has about 3-5 s to listen again. Read timeouts are retried too
#: (a ``GET`` is safe to repeat, unlike a tool call).
HEALTH_RETRY = RetryPolicy(max_attempts=3, backoff_s=1.0, max_backoff_s=4.0)


class ServerStatusError(Exception):
    """The tool server answered with an HTTP error status."""

    def __init__(self, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.detail = _detail(response)
        super().__init__(f"HTTP {self.status_code}: {self.detail}")


class RequestFailed(Exception):
    """A request that failed after all its attempts.

    Attributes:
        cause: the last failure (an ``httpx.HTTPError`` or a :class:`ServerStatusError`).
        attempts: the requests really sent (1 when the failure is not retried).
        elapsed_s: seconds from the first attempt to the last failure.
    """

    def __init__(self, cause: Exception, attempts: int, elapsed_s: float) -> None:
        self.cause, self.attempts, self.elapsed_s = cause, attempts, elapsed_s
        super().__init__(f"{cause} ({self.tries()})")

    def tries(self) -> str:
        """``3 attempts over 4.1 s`` / ``1 attempt``."""
        n = self.attempts
        return f"{n} attempt{'s' * (n != 1)}" + (f" over {self.elapsed_s:.1f} s" if n > 1 else "")


def is_transient(exc: BaseException, timeouts: bool = False) -> bool:
    """Whether a request failure is worth retrying: connection errors, protocol errors and
    HTTP 502-504 (a restarting server or proxy). A read timeout only with ``timeouts``: a tool
    call that timed out may still be running on the server, and a retry would run it again
    beside it; a ``GET /health`` may be repeated."""
    if isinstance(exc, httpx.ReadTimeout):
        return timeouts
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, ServerStatusError) and exc.status_code in (502, 503, 504)


def _one_line(text: str, limit: int) -> str:
    return " ".join(text.split())[:limit]


def _detail(response: httpx.Response, limit: int = 300) -> str:
    """The ``detail`` of an error reply (FastAPI style), else the start of its body, on one line."""
    try:
        body = response.json()
    except ValueError:
        return _one_line(response.text, limit) or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return _one_line(detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False), limit)


def _refused(exc: BaseException) -> bool:
    """Whether a connection error is a refused connection (nothing listens on the port)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reason(exc: Exception, timeout_s: float | None) -> str:
    """A transport failure in a few words: ``connection refused``, ``no reply within 600 s``,
    else ``ExceptionName: message``."""
    if isinstance(exc, httpx.ConnectError) and _refused(exc):
        return "connection refused"
    if isinstance(exc, httpx.ReadTimeout) and timeout_s is not None:
        return f"no reply within {timeout_s:g} s"
    if isinstance(exc, httpx.ConnectTimeout) and timeout_s is not None:
        return f"no connection within {timeout_s:g} s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _request(
    client: httpx.Client,
    retry: RetryPolicy,
    method: str,
    path: str,
    *,
    timeouts: bool = False,
    breaker: ServiceBreaker | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One request with retries (``timeouts``: read timeouts are retried too); ``kwargs`` go to
    ``client.request``. Each attempt reports to ``breaker``: a transport failure, a timeout or
    an HTTP 5xx counts, any other answer breaks the row.

    Raises:
        RequestFailed: the last transport failure or HTTP error status (4xx at once; 502-504
            once the retries are spent), with the attempts really made.
        ServiceDown: ``breaker`` declared the server down (before this request, or on one of
            its attempts: no further attempt is made).
    """
    attempts, start = 0, time.monotonic()

    def once() -> httpx.Response:
        nonlocal attempts
        attempts += 1
        response = through(breaker, lambda: client.request(method, path, **kwargs), (httpx.TransportError,))
        if response.status_code >= 400:
            raise ServerStatusError(response)
        return response

    try:
        return retry.retrying(timeouts)(once)
    except (httpx.HTTPError, ServerStatusError) as e:
        raise RequestFailed(e, attempts, time.monotonic() - start) from e


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
        breaker: the server's circuit breaker, shared by its tools (:mod:`websailor.breaker`):
            once the server is declared down, :meth:`execute` raises
            :class:`~websailor.errors.ServiceDown` instead of returning an observation.

    Raises:
        ConfigError: the schema is malformed.
    """

    def __init__(
        self,
        schema: Mapping[str, Any],
        client: httpx.Client,
        retry: RetryPolicy | None = None,
        breaker: ServiceBreaker | None = None,
    ) -> None:
        self._schema = _check_schema(schema)
        self.name = self._schema["name"]
        self.description = self._schema["description"]
        self.parameters = self._schema["parameters"]
        self.client = client
        self.retry = retry or RetryPolicy()
        self.url = shown_url(str(client.base_url).rstrip("/"))
        self.breaker = breaker

    def __repr__(self) -> str:
        return f"RemoteTool({self.name!r}, url={self.url!r})"

    def schema(self) -> dict[str, Any]:
        """The server tool's schema, exactly as the server lists it."""
        return copy.deepcopy(self._schema)

    def execute(self, arguments: str | Mapping[str, Any] | None = None) -> ToolResult:
        """Run the tool on the server on the model's raw arguments (validated there). The
        server's result comes back with its ``env_failures``; a call that fails on the way is
        an error result of kind ``tool_server`` naming the environment failure (:meth:`_failed`).

        Raises:
            ServiceDown: the server was declared down (its breaker's threshold of failures in a
                row was reached): the run stops rather than every rollout retrying it.
        """
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
                breaker=self.breaker,
            )
        except RequestFailed as failed:
            return self._failed(failed)
        return self._result(response)

    def _failed(self, failed: RequestFailed) -> ToolResult:
        """The result of a call that failed after its attempts.

        * no answer (refused, reset, timed out, a protocol error): ``tool_server_unreachable``;
        * HTTP 413 (the arguments exceed the server's body limit): the model's own doing, an
          ``invalid_arguments`` result with no environment failure;
        * any other HTTP error: ``tool_server_error``. The server answers 404 only for a tool it
          does not have (this tool was listed by it: it changed since), 422 only for a body this
          client did not send well; the model's bad arguments are a 200 tool result;
        * a reply that cannot be decoded: ``tool_server_reply``.
        """
        e, tries = failed.cause, failed.tries()
        where = f"the tool server at {self.url}"
        if isinstance(e, ServerStatusError):
            if e.status_code == 413:
                return ToolResult(
                    f"[{self.name}] Invalid arguments: they are too large for {where} ({e.detail}). "
                    "Send shorter arguments.",
                    f"invalid arguments: too large ({e})",
                    INVALID_ARGUMENTS,
                )
            retry = " Try again later." if e.status_code >= 500 else ""
            return ToolResult(
                f"[{self.name}] Error: {where} refused the call ({e}; {tries}).{retry}",
                f"tool server refused the call ({e}; {tries})",
                TOOL_SERVER,
                (TOOL_SERVER_ERROR,),
            )
        if isinstance(e, httpx.TransportError):
            what = _reason(e, self.client.timeout.read)
            again = ", not retried: the server may still be running it" if isinstance(e, httpx.ReadTimeout) else ""
            return ToolResult(
                f"[{self.name}] Error: {where} did not answer ({what}; {tries}{again}). Try again later.",
                f"tool server unreachable ({what}; {tries})",
                TOOL_SERVER,
                (TOOL_SERVER_UNREACHABLE,),
            )
        what = _reason(e, None)  # a body that cannot be decoded, a redirect loop
        return ToolResult(
            f"[{self.name}] Error: {where} sent a reply that cannot be read ({what}).",
            f"malformed tool server reply ({what})",
            TOOL_SERVER,
            (TOOL_SERVER_REPLY,),
        )

    def _result(self, response: httpx.Response) -> ToolResult:
        """The server's tool result: ``observation`` (a string), ``error`` (a string or null),
        ``kind`` (read only with an error; one this client does not know is ``tool_error``) and
        ``env_failures`` (a list of strings; an older server without it: none). Any other reply
        is an error result with the environment failure ``tool_server_reply``."""
        try:
            body = response.json()
        except ValueError:
            body = None
        failures = body.get("env_failures", []) if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("observation"), str)
            or not isinstance(body.get("error"), (str, type(None)))
            or not isinstance(failures, list)
            or not all(isinstance(k, str) for k in failures)
        ):
            status = f"HTTP {response.status_code}, " if response.status_code != 200 else ""
            return ToolResult(
                f"[{self.name}] Error: the tool server at {self.url} sent a reply that is not a "
                f"tool result: {status}{response.text[:200]!r}",
                "malformed tool server reply",
                TOOL_SERVER,
                (TOOL_SERVER_REPLY,),
            )
        kind = body.get("kind") if body["error"] is not None else None
        if kind is not None and kind not in ERROR_KINDS:
            kind = TOOL_ERROR  # a newer server's kind this client does not know
        return ToolResult(body["observation"], body["error"], kind, tuple(failures))

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


def shown_url(url: str) -> str:
    """``url`` as messages, observations and records show it: without a user name and
    password (``http://alice:secret@host:8000`` -> ``http://host:8000``), which stay secrets.
    A URL that cannot be parsed is returned as is."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url
    return str(parsed.copy_with(userinfo=b"")) if parsed.userinfo else url


def _not_a_tool_server(url: str, what: str) -> ConfigError:
    return ConfigError(f"{url} answers but is not a websailor tool server ({what})")


def _body(response: httpx.Response) -> str:
    """What a reply that is not the expected JSON is, for a message: ``an HTML page: <html>...``."""
    html = "html" in response.headers.get("content-type", "") or response.text.lstrip().startswith("<")
    return f"{'an HTML page' if html else 'a reply that is not JSON'}: {_one_line(response.text, 200)}"


def _start_failure(failed: RequestFailed, url: str, path: str, timeout_s: float) -> ConfigError:
    """The one-line error of a start-up request (``GET path``) that failed after its attempts."""
    e, tries = failed.cause, failed.tries()
    if isinstance(e, ServerStatusError):
        if e.status_code >= 500:
            return ConfigError(
                f"{url} answers but not as a working tool server (GET {path} gave {e}; {tries}): "
                "a proxy whose server is down, or a server in trouble (see its log)"
            )
        return _not_a_tool_server(url, f"GET {path} gave HTTP {e.status_code}: {e.detail[:200]}")
    if isinstance(e, httpx.ConnectError) and _refused(e):
        return ConfigError(
            f"nothing listens at {url} (connection refused, {tries}); start one with `websailor serve tools`"
        )
    if isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ConfigError(f"cannot connect to {url} ({_reason(e, timeout_s)}, {tries}); are the host and port right?")
    if isinstance(e, httpx.TransportError):
        return ConfigError(
            f"something listens at {url} but does not answer as a tool server "
            f"({_reason(e, timeout_s)} to GET {path}, {tries})"
        )
    return _not_a_tool_server(url, f"GET {path}: {_reason(e, None)}")


def _get_json(client: httpx.Client, retry: RetryPolicy, path: str, url: str, timeout_s: float) -> object:
    """``GET path`` as JSON, each attempt within ``timeout_s``, read timeouts retried.

    Raises:
        ConfigError: no answer after the retries, an HTTP error, or a body that is not JSON;
            one line naming ``url`` and the attempts made.
    """
    try:
        response = _request(client, retry, "GET", path, timeouts=True, timeout=httpx.Timeout(timeout_s))
    except RequestFailed as failed:
        raise _start_failure(failed, url, path, timeout_s) from None
    try:
        return response.json()
    except ValueError:
        raise _not_a_tool_server(url, f"GET {path} gave {_body(response)}") from None


def _check_health(health: object, url: str) -> str:
    """The env name from a ``/health`` body.

    Raises:
        ConfigError: the body is not a websailor tool server's health reply (``status`` "ok",
            a string ``env``, a list of tool names).
    """
    if (
        not isinstance(health, dict)
        or health.get("status") != "ok"
        or not isinstance(health.get("env"), str)
        or not isinstance(health.get("tools"), list)
        or not all(isinstance(n, str) for n in health["tools"])
    ):
        shown = json.dumps(health, ensure_ascii=False, default=str)[:200]
        raise _not_a_tool_server(url, f"GET /health gave another service's JSON: {shown}")
    return health["env"]


def connect_tools(
    url: str,
    timeout_s: float = 60.0,
    retry: RetryPolicy | None = None,
    health_timeout_s: float = HEALTH_TIMEOUT_S,
    health_retry: RetryPolicy | None = None,
) -> tuple[dict[str, Tool], str]:
    """Connect to the tool server at ``url``: check ``/health``, read ``/tools``.

    Args:
        url: e.g. ``http://127.0.0.1:8000``.
        timeout_s: timeout of one tool call in seconds (connecting is capped at 10 s). A call
            that times out is not retried (it may still be running on the server).
        retry: how the tool calls' transport failures are retried.
        health_timeout_s: timeout of each start-up request (``GET /health``, ``GET /tools``).
        health_retry: how the start-up requests are retried (default :data:`HEALTH_RETRY`);
            their read timeouts are retried too.

    Returns:
        ``(tools by name, the server's env name)``; the tools share one pooled HTTP client.
        Proxy environment variables are ignored: the tool server is an internal service.

    Raises:
        ConfigError: a bad URL or timeout; nothing listening at ``url``; something listening
            that does not answer; something answering that is not a websailor tool server.
            One line naming the URL and the attempts made.
    """
    base = _base_url(url)
    shown = shown_url(base)
    for key, value in (("timeout_s", timeout_s), ("health_timeout_s", health_timeout_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise ConfigError(f"{key} must be a positive number of seconds, got {value!r}")
    retry = retry or RetryPolicy()
    health_retry = health_retry or HEALTH_RETRY
    client = httpx.Client(
        base_url=base,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
        trust_env=False,
    )
    try:
        env = _check_health(_get_json(client, health_retry, "/health", shown, health_timeout_s), shown)
        schemas = _get_json(client, health_retry, "/tools", shown, health_timeout_s)
        if not isinstance(schemas, list) or not schemas:
            listed = json.dumps(schemas, ensure_ascii=False, default=str)[:200]
            raise _not_a_tool_server(shown, f"GET /tools gave no list of tool schemas: {listed}")
        tools: dict[str, Tool] = {}
        breaker = ServiceBreaker("tool server", shown)
        for schema in schemas:
            try:
                tool = RemoteTool(schema, client, retry, breaker)
            except ConfigError as e:
                raise ConfigError(f"{shown} listed a bad tool: {e}") from None
            if tool.name in tools:
                raise ConfigError(f"{shown} lists the tool {tool.name!r} twice")
            tools[tool.name] = tool
    except BaseException:
        client.close()
        raise
    return tools, env
