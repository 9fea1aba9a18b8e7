"""The tool server: a real uvicorn server in a background thread over the real local tools."""

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from fakes import ScriptedModel, call, serving
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from websailor.agent import Agent
from websailor.corpus import Corpus
from websailor.errors import ConfigError
from websailor.server import RemoteTool, RetryPolicy, connect_tools, create_app, serve_tools
from websailor.server.app import bind_socket
from websailor.tools import Tool, ToolResult, execute_tool
from websailor.tools.base import TOOL_SERVER_ERROR, TOOL_SERVER_REPLY, TOOL_SERVER_UNREACHABLE
from websailor.tools.local import build_local_tools
from websailor.tools.metered import MeteredTool
from websailor.tools.metrics import ToolMetrics

FAST = RetryPolicy(max_attempts=3, backoff_s=0.01, max_backoff_s=0.05)


class Boom(Tool):
    """A tool with a bug."""

    name = "boom"
    description = "Always raises."
    parameters = {"type": "object", "properties": {}}

    def forward(self, **kwargs) -> str:
        raise RuntimeError("kaboom")


class Degraded(Tool):
    """A search-like tool that answers while one of its operations failed in the environment."""

    name = "degraded"
    description = "Answers, with an environment failure."
    parameters = {"type": "object", "properties": {}}

    def forward(self, **kwargs) -> ToolResult:
        return ToolResult("one of two queries answered", None, None, ("server_error",))


class Slow(Tool):
    """A tool that takes ``seconds`` to answer."""

    name = "slow"
    description = "Sleeps, then answers."
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}

    def forward(self, seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds} s"


def dead_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def local(vital: Corpus) -> dict[str, Tool]:
    return build_local_tools(vital)


@pytest.fixture(scope="module")
def url(local) -> Iterator[str]:
    extra = {"boom": Boom(), "degraded": Degraded(), "slow": Slow()}
    app = create_app({**local, **extra}, "local", metrics=lambda: {"cache_hits": 3})
    with serving(app) as u:
        yield u


@pytest.fixture(scope="module")
def remote(url) -> Iterator[dict[str, Tool]]:
    tools, env = connect_tools(url, retry=FAST)
    assert env == "local"
    yield tools
    tools["search"].client.close()


def test_health_tools_and_metrics(url, local, remote):
    health = httpx.get(f"{url}/health").json()
    names = ["search", "visit", "boom", "degraded", "slow"]
    assert (health["status"], health["env"], health["tools"]) == ("ok", "local", names)
    assert httpx.get(f"{url}/tools").json()[:3] == [local["search"].schema(), local["visit"].schema(), Boom().schema()]
    assert httpx.get(f"{url}/metrics").json() == {"cache_hits": 3}
    assert list(remote) == names
    assert all(isinstance(t, RemoteTool) for t in remote.values())
    # same schemas, so the agent's system prompt is the same as with local tools
    assert [remote[n].schema() for n in ("search", "visit")] == [local[n].schema() for n in ("search", "visit")]


@pytest.mark.parametrize(
    "name, arguments",
    [
        ("search", {"query": ["Mona Lisa", "Great Wall of China"]}),
        ("search", {"query": "Mona Lisa"}),
        ("search", '{"query": ["Nile"]}'),
        ("search", {"query": ["Par\ud800is \u2028 capital"]}),  # a lone surrogate
        ("search", {"query": ["qwxzzy"], "k": 3}),  # an unknown argument is noted
        ("visit", {"url": "https://en.wikipedia.org/wiki/Nile", "goal": "How long is the river in kilometers?"}),
        ("visit", {"url": ["https://en.wikipedia.org/wiki/Leonardo_DaVinci", "Mona Lisa"], "goal": "painter"}),
        # bad arguments: the same error observation as locally
        ("search", {}),
        ("search", {"query": 3}),
        ("search", "not json"),
        ("search", None),
        ("search", ["Nile"]),
        ("visit", {"url": "Nile"}),
    ],
)
def test_remote_gives_exactly_the_local_result(local, remote, name, arguments):
    assert remote[name].execute(arguments) == local[name].execute(arguments)


def test_unknown_tool_is_404_and_a_malformed_body_is_422(url):
    r = httpx.post(f"{url}/tools/browse", json={"arguments": {}})
    assert r.status_code == 404
    assert r.json()["available"] == ["search", "visit", "boom", "degraded", "slow"] and "browse" in r.json()["detail"]
    for body in [b"{not json", b"[]", b'{"args": {"query": ["Nile"]}}']:
        r = httpx.post(f"{url}/tools/search", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, body
    r = httpx.post(f"{url}/tools/search", content=b"x" * 5_000_000, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and "the limit is 4,000,000" in r.json()["detail"]
    chunks = (b"x" * 1_000_000 for _ in range(6))  # no Content-Length: sent chunked
    r = httpx.post(f"{url}/tools/search", content=chunks, headers={"Content-Type": "application/json"})
    assert r.status_code == 413


def test_a_raising_tool_is_an_error_observation(url, remote):
    r = httpx.post(f"{url}/tools/boom", json={"arguments": {}})
    assert r.status_code == 200
    assert r.json() == {
        "observation": "[boom] Error: the tool failed (RuntimeError: kaboom)",
        "error": "RuntimeError: kaboom",
        "kind": "tool_error",
        "env_failures": [],
    }
    assert remote["boom"].execute({}).error == "RuntimeError: kaboom"
    assert remote["boom"].execute({}).env_failures == ()  # a tool bug is not the environment's


def test_env_failures_round_trip(url, remote):
    r = httpx.post(f"{url}/tools/degraded", json={"arguments": {}})
    assert r.json() == {
        "observation": "one of two queries answered",
        "error": None,
        "kind": None,
        "env_failures": ["server_error"],
    }
    assert remote["degraded"].execute({}) == ToolResult("one of two queries answered", None, None, ("server_error",))
    assert remote["degraded"].execute({}) == Degraded().execute({})
    # the model's own failures are a 200 tool result, never an HTTP error, and no environment failure
    r = httpx.post(f"{url}/tools/search", json={"arguments": {"query": 3}})
    assert r.status_code == 200 and r.json()["kind"] == "invalid_arguments" and r.json()["env_failures"] == []


def test_error_kinds_are_the_same_remote_and_local_and_reach_the_metrics(local, remote):
    calls = [
        ("search", {"query": 5}),
        ("search", {"query": ["Nile"]}),
        ("visit", {"url": "Zzzxq Qqzzx", "goal": "x"}),
        ("visit", {"goal": "x"}),
    ]
    kinds = ["invalid_arguments", None, None, "invalid_arguments"]  # a missing page is an answer
    metrics = {"local": ToolMetrics(), "remote": ToolMetrics()}
    for where, tools in (("local", local), ("remote", remote)):
        metered = {n: MeteredTool(tools[n], metrics[where]) for n in ("search", "visit")}
        assert [metered[n].execute(a).kind for n, a in calls] == kinds, where
        assert metrics[where].summary()["search"]["errors"] == {"invalid_arguments": 1}, where
    boom = MeteredTool(remote["boom"], metrics["remote"])
    assert boom.execute({}).kind == "tool_error"
    assert metrics["remote"].summary()["boom"]["errors"] == {"tool_error": 1}
    assert execute_tool(remote, "serch", {}).kind == "unknown_tool"
    dead = MeteredTool(RemoteTool(local["search"].schema(), httpx.Client(base_url=dead_url()), FAST), ToolMetrics())
    assert dead.execute({"query": ["Nile"]}).kind == "tool_server"
    assert dead.metrics.summary()["search"]["errors"] == {"tool_server": 1}
    with pytest.raises(ValueError, match="unknown tool error kind"):
        ToolResult("x", "failed", "oops")
    with pytest.raises(ValueError, match="without an error"):
        ToolResult("x", None, "tool_error")


def test_50_concurrent_calls_all_succeed(local, remote):
    titles = ["Nile", "Mona Lisa", "Roman Empire", "Albert Einstein", "Great Wall of China"]
    jobs = [
        ("search", {"query": [titles[i % 5], f"history {i}"]})
        if i % 3
        else ("visit", {"url": titles[i % 5], "goal": "when"})
        for i in range(50)
    ]
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda job: remote[job[0]].execute(job[1]), jobs))
    assert all(r.error is None for r in results)
    assert results == [local[name].execute(args) for name, args in jobs]


def test_a_dead_server_is_an_error_observation_after_retries(local):
    base = dead_url()
    sent = []
    client = httpx.Client(base_url=base, event_hooks={"request": [sent.append]})
    tool = RemoteTool(local["search"].schema(), client, FAST)
    t = time.perf_counter()
    result = tool.execute({"query": ["Nile"]})
    assert time.perf_counter() - t < 2
    assert result.observation.startswith(
        f"[search] Error: the tool server at {base} did not answer (connection refused; 3 attempts over "
    )
    assert result.error.startswith("tool server unreachable (connection refused; 3 attempts")
    assert (result.kind, result.env_failures) == ("tool_server", (TOOL_SERVER_UNREACHABLE,))
    assert len(sent) == 3


def test_5xx_is_retried_and_4xx_is_not(local):
    replies = [
        httpx.Response(503, json={"detail": "overloaded"}),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(200, json={"observation": "ok", "error": None}),
    ]
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        return replies[len(calls) - 1] if len(calls) <= len(replies) else httpx.Response(404, json={"detail": "gone"})

    tool = RemoteTool(
        local["search"].schema(), httpx.Client(base_url="http://tools", transport=httpx.MockTransport(handler)), FAST
    )
    assert tool.execute('{"query": ["Nile"]}').observation == "ok"
    assert calls == [{"arguments": '{"query": ["Nile"]}'}] * 3
    refused = tool.execute({"query": ["Nile"]})
    assert len(calls) == 4 and "refused the call (HTTP 404: gone; 1 attempt)" in refused.observation
    assert (refused.kind, refused.env_failures) == ("tool_server", (TOOL_SERVER_ERROR,))


def _mock_tool(local, reply) -> tuple[RemoteTool, list]:
    """A remote ``search`` whose every request gets ``reply()`` (a response, or an exception raised)."""
    sent = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        out = reply()
        if isinstance(out, Exception):
            raise out
        return out

    client = httpx.Client(base_url="http://tools:1", transport=httpx.MockTransport(handler), timeout=600)
    return RemoteTool(local["search"].schema(), client, FAST), sent


OK = {"observation": "found", "error": None, "kind": None}


@pytest.mark.parametrize(
    "reply, kind, env_failures, attempts, says",
    [
        # no answer: unreachable; a timed-out call is not retried (it may still be running)
        (
            lambda: httpx.ReadTimeout("timed out"),
            "tool_server",
            (TOOL_SERVER_UNREACHABLE,),
            1,
            "did not answer (no reply within 600 s; 1 attempt, not retried: the server may still be running it)",
        ),
        (
            lambda: httpx.RemoteProtocolError("Server disconnected"),
            "tool_server",
            (TOOL_SERVER_UNREACHABLE,),
            3,
            "did not answer (RemoteProtocolError: Server disconnected; 3 attempts over",
        ),
        (lambda: httpx.ReadError("reset"), "tool_server", (TOOL_SERVER_UNREACHABLE,), 3, "ReadError: reset"),
        # HTTP errors: the server's or this client's, not the model's
        (
            lambda: httpx.Response(503, json={"detail": "overloaded"}),
            "tool_server",
            (TOOL_SERVER_ERROR,),
            3,
            "refused the call (HTTP 503: overloaded; 3 attempts over",
        ),
        (
            lambda: httpx.Response(500, text="Internal Server Error"),
            "tool_server",
            (TOOL_SERVER_ERROR,),
            1,
            "(HTTP 500: Internal Server Error; 1 attempt). Try again later.",
        ),
        (
            lambda: httpx.Response(404, json={"detail": "there is no tool named 'search'"}),
            "tool_server",
            (TOOL_SERVER_ERROR,),
            1,
            "refused the call (HTTP 404: there is no tool named 'search'; 1 attempt).",
        ),
        (
            lambda: httpx.Response(405, json={"detail": "Method Not Allowed"}),
            "tool_server",
            (TOOL_SERVER_ERROR,),
            1,
            "HTTP 405",
        ),
        (lambda: httpx.Response(401, text="auth required"), "tool_server", (TOOL_SERVER_ERROR,), 1, "HTTP 401"),
        (
            lambda: httpx.Response(422, json={"detail": [{"msg": "Field required"}]}),
            "tool_server",
            (TOOL_SERVER_ERROR,),
            1,
            "HTTP 422",
        ),
        # arguments over the body limit: the model's doing
        (
            lambda: httpx.Response(413, json={"detail": "the request body is 5,000,000 bytes"}),
            "invalid_arguments",
            (),
            1,
            "Invalid arguments: they are too large for the tool server at http://tools:1",
        ),
        # replies that are not tool results
        (
            lambda: httpx.Response(200, text="<html>hello</html>"),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "sent a reply that is not a tool result: '<html>hello</html>'",
        ),
        (
            lambda: httpx.Response(200, json={**OK, "env_failures": "timeout"}),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "not a tool result",
        ),
        (
            lambda: httpx.Response(200, json={**OK, "env_failures": [1]}),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "not a tool result",
        ),
        (
            lambda: httpx.Response(200, json={**OK, "env_failures": None}),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "not a tool result",
        ),
        (
            lambda: httpx.Response(301, headers={"Location": "/x"}),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "not a tool result: HTTP 301",
        ),
        (
            lambda: httpx.Response(200, content=b"not gzip", headers={"Content-Encoding": "gzip"}),
            "tool_server",
            (TOOL_SERVER_REPLY,),
            1,
            "sent a reply that cannot be read (DecodingError",
        ),
        # tool results: an older server without env_failures, a newer one with them
        (lambda: httpx.Response(200, json=OK), None, (), 1, "found"),
        (
            lambda: httpx.Response(200, json={**OK, "env_failures": ["timeout", "circuit_open"]}),
            None,
            ("timeout", "circuit_open"),
            1,
            "found",
        ),
    ],
)
def test_each_failure_is_named(local, reply, kind, env_failures, attempts, says):
    tool, sent = _mock_tool(local, reply)
    result = tool.execute({"query": ["Nile"]})
    assert (result.kind, result.env_failures, len(sent)) == (kind, env_failures, attempts)
    assert says in result.observation
    if kind == "tool_server":
        assert result.observation.startswith("[search] Error: the tool server at http://tools:1 ")


def test_the_real_server_refuses_too_large_arguments_and_a_tool_it_lost(url, local, remote):
    big = remote["search"].execute({"query": ["x" * 5_000_000]})
    assert (big.kind, big.env_failures) == ("invalid_arguments", ())
    assert "the limit is 4,000,000 bytes" in big.observation
    schema = {**local["search"].schema(), "name": "browse"}  # listed once, gone since (a restarted server)
    lost = RemoteTool(schema, remote["search"].client, FAST).execute({"query": ["Nile"]})
    assert (lost.kind, lost.env_failures) == ("tool_server", (TOOL_SERVER_ERROR,))
    assert "HTTP 404: there is no tool named 'browse'" in lost.observation


def test_tool_calls_keep_their_long_timeout(url):
    tools, _ = connect_tools(url, timeout_s=30, retry=FAST, health_timeout_s=0.1, health_retry=FAST)
    try:
        assert tools["slow"].execute({"seconds": 0.5}) == ToolResult("slept 0.5 s")
    finally:
        tools["slow"].client.close()


@contextmanager
def silent_port() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback port that accepts connections and never replies; yields its URL and the
    connections accepted so far."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def other_services() -> FastAPI:
    """Services that are not websailor tool servers, one per path prefix."""
    app = FastAPI()
    app.get("/other/health")(lambda: {"status": "ok"})
    app.get("/page/health")(lambda: HTMLResponse("<!doctype html>\n<html><body>Welcome   to nginx</body></html>"))
    app.get("/down/health")(lambda: JSONResponse({"detail": "upstream down"}, status_code=503))
    app.get("/notools/health")(lambda: {"status": "ok", "env": "local", "tools": ["search"], "version": "1"})
    app.get("/notools/tools")(lambda: {"tools": []})
    return app


def connect_error(url: str, **kwargs) -> str:
    """The message of the ConfigError ``connect_tools(url)`` raises (fast retries, a 600 s call timeout)."""
    with pytest.raises(ConfigError) as e:
        connect_tools(url, timeout_s=600, retry=FAST, **{"health_retry": FAST, **kwargs})
    assert "\n" not in str(e.value)
    return str(e.value)


def test_connect_tools_errors_name_the_url_and_the_attempts(url):
    base = dead_url()
    assert re.fullmatch(
        rf"nothing listens at {base} \(connection refused, 3 attempts over 0\.\d s\); "
        "start one with `websailor serve tools`",
        connect_error(base),
    )
    with silent_port() as (silent, accepted):
        t = time.perf_counter()
        message = connect_error(silent, health_timeout_s=0.2)
        assert time.perf_counter() - t < 3  # the start-up timeout, not the calls' 600 s
        assert len(accepted) == 3  # a read timeout at start is retried
    assert re.fullmatch(
        rf"something listens at {silent} but does not answer as a tool server "
        r"\(no reply within 0\.2 s to GET /health, 3 attempts over \d\.\d s\)",
        message,
    )
    assert connect_error(f"{url}/nothing") == (
        f"{url}/nothing answers but is not a websailor tool server (GET /health gave HTTP 404: Not Found)"
    )
    for bad in ["localhost:8000", "ftp://x", ""]:
        with pytest.raises(ConfigError, match="URL"):
            connect_tools(bad)
    with pytest.raises(ConfigError, match="health_timeout_s must be a positive number"):
        connect_tools(url, health_timeout_s=0)


def test_connect_tools_refuses_other_services():
    with serving(other_services()) as other:
        assert connect_error(f"{other}/other") == (
            f"{other}/other answers but is not a websailor tool server "
            '(GET /health gave another service\'s JSON: {"status": "ok"})'
        )
        assert connect_error(f"{other}/page") == (
            f"{other}/page answers but is not a websailor tool server "
            "(GET /health gave an HTML page: <!doctype html> <html><body>Welcome to nginx</body></html>)"
        )
        assert connect_error(f"{other}/down").startswith(
            f"{other}/down answers but not as a working tool server "
            "(GET /health gave HTTP 503: upstream down; 3 attempts over "
        )
        assert connect_error(f"{other}/notools") == (
            f"{other}/notools answers but is not a websailor tool server "
            '(GET /tools gave no list of tool schemas: {"tools": []})'
        )


def test_bad_server_arguments_are_config_errors(local):
    with pytest.raises(ConfigError, match="at least one tool"):
        create_app({}, "local")
    with pytest.raises(ConfigError, match="registered under the name"):
        create_app({"find": local["search"]}, "local")
    with pytest.raises(ConfigError, match="max_workers"):
        create_app(local, "local", max_workers=0)
    busy = bind_socket("127.0.0.1", 0)
    busy.listen()
    try:
        with pytest.raises(ConfigError, match="cannot serve on 127.0.0.1"):
            serve_tools(local, "local", port=busy.getsockname()[1])
    finally:
        busy.close()


def test_agent_with_remote_tools_gives_the_same_trajectory(local, remote):
    script = [
        call("search", query=["Mona Lisa painter"]),
        call("visit", url="https://en.wikipedia.org/wiki/Mona_Lisa", goal="who painted it"),
        call("search"),  # bad arguments
        call("browse", url="x"),  # unknown tool
        "<think>Leonardo.</think>\n<answer>Leonardo da Vinci</answer>",
    ]
    remote_tools = {n: remote[n] for n in ("search", "visit")}
    a = Agent(ScriptedModel(script), local).run("Who painted the Mona Lisa?", id="q1")
    b = Agent(ScriptedModel(script), remote_tools).run("Who painted the Mona Lisa?", id="q1")
    assert b.termination == a.termination == "answer"
    assert b.messages == a.messages
    assert [(c.name, c.arguments, c.error) for c in b.tool_calls] == [
        (c.name, c.arguments, c.error) for c in a.tool_calls
    ]
    assert (b.num_tool_calls, b.prediction) == (4, "Leonardo da Vinci")


#: A tool server in a process of its own (killed with SIGKILL, then restarted): one ``echo``
#: tool that answers after ``sleep`` seconds.
ECHO_SERVER = """
import sys, time
from websailor.server import serve_tools
from websailor.tools import Tool

class Echo(Tool):
    name = "echo"
    description = "Echoes the text after sleep seconds."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}, "sleep": {"type": "number"}}}

    def forward(self, text="", sleep=0.0):
        time.sleep(sleep)
        return text

serve_tools({"echo": Echo()}, "echo-env", port=int(sys.argv[1]))
"""


def start_echo_server(port: int) -> subprocess.Popen:
    """Start :data:`ECHO_SERVER` on ``port``; returns once ``/health`` answers."""
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"the echo server exited: {proc.stderr.read().decode()}"
        assert time.monotonic() < deadline, "the echo server did not start within 60 s"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)


def test_a_server_killed_mid_run_and_restarted(monkeypatch):
    """Each call to a dead server is an error observation, and the same client works again
    once the server is back (the breaker is set out of reach here: tests/test_breaker.py
    shows the server declared down)."""
    monkeypatch.setenv("WEBSAILOR_SERVICE_FAILURES", "100")
    port = int(dead_url().rsplit(":", 1)[1])
    proc = start_echo_server(port)
    try:
        tools, env = connect_tools(f"http://127.0.0.1:{port}", timeout_s=30, retry=FAST, health_retry=FAST)
        echo = tools["echo"]
        assert env == "echo-env"
        assert [echo.execute({"text": f"hi {i}"}) for i in range(3)] == [ToolResult(f"hi {i}") for i in range(3)]
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(echo.execute, {"text": "late", "sleep": 10})
            time.sleep(0.5)  # the call is running on the server
            proc.kill()
            proc.wait(10)
            lost = in_flight.result(timeout=20)
        after = [echo.execute({"text": "anyone?"}) for _ in range(2)]
        for result in [lost, *after]:
            assert (result.kind, result.env_failures) == ("tool_server", (TOOL_SERVER_UNREACHABLE,))
            assert result.observation.startswith(f"[echo] Error: the tool server at http://127.0.0.1:{port} did not")
        assert "connection refused; 3 attempts over" in after[0].observation
        script = [call("echo", text="anyone?"), "<answer>no one</answer>"]
        traj = Agent(ScriptedModel(script), tools).run("Is the server up?", id="q")
        assert traj.tool_calls[0].env_failures == [TOOL_SERVER_UNREACHABLE]
        assert traj.env_failures == {"calls": 1, "tools": {"echo": 1}, "kinds": {TOOL_SERVER_UNREACHABLE: 1}}
        proc = start_echo_server(port)  # the same port, the same client
        assert [echo.execute({"text": f"back {i}"}) for i in range(3)] == [ToolResult(f"back {i}") for i in range(3)]
        echo.client.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_credentials_in_the_tool_server_url_are_never_shown():
    url = dead_url().replace("http://", "http://alice:s3cret@")
    with pytest.raises(ConfigError) as err:
        connect_tools(url, health_retry=FAST)
    assert "s3cret" not in str(err.value) and "alice" not in str(err.value)
    assert f"nothing listens at {dead_url_of(url)}" in str(err.value)
    client = httpx.Client(base_url=url, trust_env=False)
    tool = RemoteTool({"name": "echo", "description": "d", "parameters": {"type": "object"}}, client, FAST)
    result = tool.execute({})
    assert "s3cret" not in result.observation + (result.error or "") and tool.url == dead_url_of(url)
    client.close()


def dead_url_of(url: str) -> str:
    return url.replace("alice:s3cret@", "")
