"""Test doubles: a scripted chat model, a local OpenAI-compatible HTTP server, and the web
providers' imitation wired into the web settings' environment variables."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from websailor.errors import ModelError
from websailor.models.base import ChatModel, Generation, SamplingParams


class ScriptedModel(ChatModel):
    """Replies from a script: a list of strings (or exceptions to raise), or a function of
    the conversation. Counts tokens as words."""

    def __init__(self, script: list | Callable, max_context: int = 131072) -> None:
        self.script = script
        self.calls = 0
        self.name = "scripted"
        self.max_context = max_context

    def generate(self, conversations, params: SamplingParams):
        out = []
        for messages in conversations:
            if callable(self.script):
                reply = self.script(messages)
            else:
                reply = self.script[min(self.calls, len(self.script) - 1)]
            self.calls += 1
            if isinstance(reply, Exception):
                raise reply
            prompt = sum(len(m["content"].split()) for m in messages)
            out.append(Generation(reply, prompt, len(reply.split())))
        return out


def call(name: str, **arguments) -> str:
    return f"<think>I will use {name}.</think>\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class FakeOpenAIServer:
    """A local HTTP server that speaks /v1/chat/completions and answers at once.

    ``fail_first`` requests get HTTP 500 before the server starts answering; with ``raw``,
    every answer is HTTP 200 with that body (a broken server). ``token_ids`` and ``logprobs``
    (any JSON values, to imitate a broken server too) go into the choice when the request asks
    for them (``return_token_ids``, ``logprobs``), as vLLM does; each log-probability becomes a
    ``logprobs.content`` entry. With ``refuse_tokens``, a request that asks for either gets
    HTTP 400 (a hosted API). ``bodies`` holds the request bodies received.
    """

    def __init__(
        self,
        reply: str | Callable = "<answer>Paris</answer>",
        fail_first: int = 0,
        raw: bytes | None = None,
        token_ids: list | None = None,
        logprobs: list | None = None,
        refuse_tokens: bool = False,
    ) -> None:
        state = {"left": fail_first, "requests": 0}
        bodies: list[dict] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    bodies.append(body)
                    state["requests"] += 1
                    fail = state["left"] > 0
                    state["left"] -= 1
                if fail:
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "overloaded"}}')
                    return
                if raw is not None:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if refuse_tokens and ("logprobs" in body or "return_token_ids" in body):
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "Unrecognized request argument supplied: logprobs"}}')
                    return
                content = reply(body["messages"]) if callable(reply) else reply
                choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                if token_ids is not None and body.get("return_token_ids"):
                    choice["token_ids"] = token_ids
                if logprobs is not None and body.get("logprobs"):
                    entries = [
                        {"token": f"t{i}", "logprob": x, "bytes": None, "top_logprobs": []}
                        for i, x in enumerate(logprobs)
                    ]
                    choice["logprobs"] = {"content": entries}
                resp = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
                }
                data = json.dumps(resp).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.state = state
        self.bodies = bodies
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def web_providers(monkeypatch, tmp_path) -> Iterator:
    """The fault-injecting imitation of Serper, SearXNG and Jina (no faults unless its plan is
    scripted), reachable through the environment variables the web settings read; the web cache
    in ``tmp_path``; loopback pages allowed."""
    from websailor.tools.web.fault_server import FaultPlan, FaultServer

    with FaultServer(FaultPlan()) as server:
        for var, value in {
            "SERPER_API_KEY": server.api_key,
            "SERPER_BASE_URL": server.url,
            "SEARXNG_BASE_URL": f"{server.url}/searxng",
            "JINA_BASE_URL": f"{server.url}/jina",
            "WEBSAILOR_WEB_CACHE": str(tmp_path / "web_cache.sqlite"),
            "WEBSAILOR_WEB_ALLOW_PRIVATE": "1",
        }.items():
            monkeypatch.setenv(var, value)
        monkeypatch.delenv("WEBSAILOR_WEB_CONFIG", raising=False)
        yield server


__all__ = ["FakeOpenAIServer", "ModelError", "ScriptedModel", "call", "web_providers"]
