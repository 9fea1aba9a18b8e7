"""The tool server: a real uvicorn server in a background thread over the real local tools."""

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from fakes import ScriptedModel, call

from websailor.agent import Agent
from websailor.corpus import Corpus
from websailor.errors import ConfigError
from websailor.server import RemoteTool, RetryPolicy, connect_tools, create_app, serve_tools
from websailor.server.app import bind_socket
from websailor.tools import Tool, ToolResult, execute_tool
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


@contextmanager
def serving(app) -> Iterator[str]:
    """Run ``app`` with uvicorn in a daemon thread on a free loopback port; yields its URL."""
    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the tool server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


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
    app = create_app({**local, "boom": Boom()}, "local", metrics=lambda: {"cache_hits": 3})
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
    assert (health["status"], health["env"], health["tools"]) == ("ok", "local", ["search", "visit", "boom"])
    assert httpx.get(f"{url}/tools").json() == [local["search"].schema(), local["visit"].schema(), Boom().schema()]
    assert httpx.get(f"{url}/metrics").json() == {"cache_hits": 3}
    assert list(remote) == ["search", "visit", "boom"]
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
    assert r.json()["available"] == ["search", "visit", "boom"] and "browse" in r.json()["detail"]
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
    }
    assert remote["boom"].execute({}).error == "RuntimeError: kaboom"


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
    assert result.observation.startswith(f"[search] Error: the tool server at {base} did not answer (ConnectError")
    assert "after 3 attempts" in result.observation and result.error.startswith("tool server unavailable")
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
    assert len(calls) == 4 and "refused the call (HTTP 404: gone)" in refused.observation and refused.error


def test_connect_tools_errors_name_the_url(url):
    base = dead_url()
    with pytest.raises(ConfigError, match=f"cannot reach the tool server at {base}"):
        connect_tools(base, retry=FAST)
    with pytest.raises(ConfigError, match="does not look like a websailor tool server"):
        connect_tools(f"{url}/nothing", retry=FAST)  # HTTP 404 there
    with pytest.raises(ConfigError, match="does not look like a websailor tool server"):
        connect_tools(f"{url}/tools/", retry=FAST)  # GET /tools/health: 404
    for bad in ["localhost:8000", "ftp://x", ""]:
        with pytest.raises(ConfigError, match="URL"):
            connect_tools(bad)


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
