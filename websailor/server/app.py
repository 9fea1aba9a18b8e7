"""The tool server: the agent's tools behind HTTP, so that many rollout workers share one
index, one page cache and one summary model.

Routes (all JSON):

* ``GET /health`` -> ``{"status": "ok", "env": ..., "tools": [names], "version": ...}``
* ``GET /tools`` -> the tools' :meth:`~websailor.tools.Tool.schema` dicts, in order
* ``POST /tools/{name}`` with ``{"arguments": object | string | null}`` ->
  ``{"observation": str, "error": str | null, "kind": str | null, "env_failures": [str]}``
  (a :class:`~websailor.tools.ToolResult`; ``env_failures`` is ``[]`` when the environment
  held). Arguments the tool refuses are such a result too (kind ``invalid_arguments``), never
  an HTTP error. HTTP 404 for an unknown tool (the body names the available ones), 413 for a
  body over :data:`MAX_BODY_BYTES`, 422 for a body that is not ``{"arguments": ...}``
* ``GET /metrics`` -> whatever the ``metrics`` callable returns, or ``{}``

Tool calls block (BM25 search, page fetches, LLM summaries), so they run in a thread pool of
their own and never on the event loop. A tool that raises gives HTTP 200 with an error
observation, exactly as the agent loop would record it for a local tool, so no call is lost
to an HTTP 500.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from websailor import __version__
from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.tools.base import Tool, ToolResult

log = get_logger(__name__)

#: Default size of the thread pool that runs tool calls (concurrent calls in flight).
DEFAULT_MAX_WORKERS = 32


class ToolCallRequest(BaseModel):
    """Body of ``POST /tools/{name}``: the arguments exactly as the model wrote them (a JSON
    object, a JSON string to be parsed by the tool, or null). Any other key is rejected (422)."""

    model_config = ConfigDict(extra="forbid")

    arguments: Any = None


class ToolCallReply(BaseModel):
    """Reply of ``POST /tools/{name}``: a :class:`~websailor.tools.ToolResult` (``kind`` set
    when ``error`` is; ``env_failures`` the kinds of the environment failures that degraded
    the observation, ``[]`` when none)."""

    observation: str
    error: str | None = None
    kind: str | None = None
    env_failures: list[str] = []


def _json(body: object, status_code: int = 200) -> Response:
    """A JSON response. ASCII-escaped, so a lone surrogate in a tool's text cannot turn a
    finished call into an encoding error."""
    return Response(json.dumps(body), status_code=status_code, media_type="application/json")


def run_tool(tool: Tool, arguments: object) -> ToolResult:
    """``tool.execute(arguments)``; an exception becomes an error result (the same text the
    agent loop records for a local tool that raises), so the caller always gets a result."""
    try:
        result = tool.execute(arguments)  # type: ignore[arg-type]  # non-objects give an error observation
    except Exception as e:  # a tool bug must not lose the call
        log.exception("tool %s raised", tool.name)
        return ToolResult(f"[{tool.name}] Error: the tool failed ({type(e).__name__}: {e})", f"{type(e).__name__}: {e}")
    if not isinstance(result, ToolResult) or not isinstance(result.observation, str):
        kind = type(result).__name__
        return ToolResult(
            f"[{tool.name}] Error: the tool failed (it returned a {kind}, not a ToolResult)", f"tool returned a {kind}"
        )
    return result


def _check_tools(tools: Mapping[str, Tool], env: str) -> dict[str, Tool]:
    """Validate ``create_app``'s arguments.

    Raises:
        ConfigError: no tools, a value that is not a :class:`Tool`, a key that is not the
            tool's name, or an empty ``env``.
    """
    if not isinstance(env, str) or not env.strip():
        raise ConfigError(f"the tool server needs an environment name (local, web), got {env!r}")
    if not isinstance(tools, Mapping) or not tools:
        raise ConfigError("the tool server needs at least one tool")
    for name, tool in tools.items():
        if not isinstance(tool, Tool):
            raise ConfigError(f"tool {name!r} is a {type(tool).__name__}, not a websailor Tool")
        if name != tool.name:
            raise ConfigError(f"tool {tool.name!r} is registered under the name {name!r}")
    return dict(tools)


#: Largest request body accepted (bytes): tool arguments, code included, are far smaller.
MAX_BODY_BYTES = 4_000_000


class _BodyLimit:
    """ASGI middleware refusing bodies over :data:`MAX_BODY_BYTES`: at once when the declared
    length says so, else while reading a chunked body (plain ASGI rather than Starlette's
    ``BaseHTTPMiddleware``, which costs throughput)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > MAX_BODY_BYTES:
            await self._refuse(f"the request body is {int(length):,} bytes", scope, receive, send)
            return
        # a body without a declared length (chunked) is read here, up to the limit
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > MAX_BODY_BYTES:
                await self._refuse("the request body is larger", scope, receive, send)
                return
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(what: str, scope: dict, receive: Any, send: Any) -> None:
        reply = _json({"detail": f"{what}; the limit is {MAX_BODY_BYTES:,} bytes"}, status_code=413)
        await reply(scope, receive, send)


def create_app(
    tools: Mapping[str, Tool],
    env: str,
    metrics: Callable[[], dict] | None = None,
    max_workers: int = DEFAULT_MAX_WORKERS,
) -> FastAPI:
    """The FastAPI application serving ``tools``.

    Args:
        tools: the tools by name (e.g. :func:`websailor.tools.build_local_tools`). They are
            called from up to ``max_workers`` threads at once, so they must be thread-safe.
        env: the environment's name (``local``, ``web``), reported by ``/health`` and recorded
            by the clients in their trajectories.
        metrics: returns a JSON-able dict for ``GET /metrics`` (cache hit rates, ...).
        max_workers: threads running tool calls; calls beyond that wait in a queue.

    Raises:
        ConfigError: bad tools, env or ``max_workers``.
    """
    tools = _check_tools(tools, env)
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ConfigError(f"max_workers must be a positive integer, got {max_workers!r}")
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="websailor-tool")
    names = list(tools)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="websailor tool server", version=__version__, lifespan=lifespan)

    app.add_middleware(_BodyLimit)

    @app.get("/health")
    async def health() -> Response:
        """Liveness, the environment's name and the tool names."""
        return _json({"status": "ok", "env": env, "tools": names, "version": __version__})

    @app.get("/tools")
    async def schemas() -> Response:
        """The tools' function schemas, as listed in the agent's system prompt."""
        return _json([t.schema() for t in tools.values()])

    @app.post("/tools/{name}", response_model=ToolCallReply)
    async def call(name: str, body: ToolCallRequest) -> Response:
        """Run tool ``name`` on the model's raw arguments (in the thread pool)."""
        tool = tools.get(name)
        if tool is None:
            return _json(
                {"detail": f"there is no tool named {name!r}; available tools: {', '.join(names)}", "available": names},
                status_code=404,
            )
        result = await asyncio.get_running_loop().run_in_executor(pool, run_tool, tool, body.arguments)
        return _json(
            {
                "observation": result.observation,
                "error": result.error,
                "kind": result.kind,
                "env_failures": list(result.env_failures),
            }
        )

    @app.get("/metrics")
    def get_metrics() -> Response:
        """The ``metrics`` callable's dict, or ``{}``."""
        if metrics is None:
            return _json({})
        try:
            return _json(metrics())
        except Exception as e:  # a metrics bug is reported, not hidden behind a bare 500
            log.exception("metrics failed")
            return _json({"detail": f"metrics failed ({type(e).__name__}: {e})"}, status_code=500)

    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``host:port`` (``port`` 0: a free port; read it
    back with ``sock.getsockname()[1]``). Binding first, then handing the socket to uvicorn,
    means a busy port is a clear error and a free port is never raced for.

    Raises:
        ConfigError: ``port`` is not in 0..65535, ``host`` does not resolve, or the address
            cannot be bound (in use, not allowed).
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"the port must be an integer in 0..65535, got {port!r}")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"cannot resolve the host {host!r} ({e})") from None
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY on accepted connections only
    # then, and without it every reply waits about 40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ConfigError(
            f"cannot serve on {host}:{port} ({e.strerror or e}); is another server using the port?"
        ) from None
    return sock


def serve_tools(
    tools: Mapping[str, Tool],
    env: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    metrics: Callable[[], dict] | None = None,
    log_level: str = "warning",
    max_workers: int = DEFAULT_MAX_WORKERS,
) -> None:
    """Serve ``tools`` over HTTP (one uvicorn process) until interrupted (Ctrl-C / SIGTERM).

    Args:
        tools, env, metrics, max_workers: as for :func:`create_app`.
        host: the interface to listen on; ``0.0.0.0`` exposes the tools to the network.
        port: the TCP port (0: any free one, which is logged).
        log_level: uvicorn's log level (``warning`` hides the per-request access log).

    Raises:
        ConfigError: bad tools, env, port or log level, or the address cannot be bound.
    """
    if log_level not in uvicorn.config.LOG_LEVELS:
        raise ConfigError(f"log_level must be one of {', '.join(uvicorn.config.LOG_LEVELS)}, got {log_level!r}")
    app = create_app(tools, env, metrics=metrics, max_workers=max_workers)
    sock = bind_socket(host, port)
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}"
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=bound, log_level=log_level, workers=1))
    log.info("tool server (env %s; tools %s) at %s", env, ", ".join(tools), url)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
