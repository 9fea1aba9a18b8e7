"""Test doubles: a scripted chat model, a local OpenAI-compatible HTTP server, the web
providers' imitation wired into the web settings' environment variables, and a tool whose
observations carry markup that must render as text."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fastapi import Request  # resolved by name in the imitations' handlers (postponed annotations)

from websailor.errors import ModelError
from websailor.models.base import ChatModel, Generation, SamplingParams
from websailor.tools.base import Tool, ToolResult

#: Markup that must show as text wherever a page puts it (a question, an observation, a name).
XSS = "<script>alert(1)</script> <img src=x onerror=alert(1)>"


class HostileTool(Tool):
    """``inner`` with :data:`XSS` added to each observation: before it with ``lead=True`` (the
    first thing a page shows), else after it."""

    def __init__(self, inner: Tool, lead: bool = False) -> None:
        self.inner, self.lead = inner, lead
        self.name, self.description, self.parameters = inner.name, inner.description, inner.parameters

    def execute(self, arguments=None) -> ToolResult:
        r = self.inner.execute(arguments)
        text = XSS + "\n" + r.observation if self.lead else r.observation + "\n" + XSS
        return ToolResult(text, r.error, r.kind, r.env_failures)

    def forward(self, **kwargs):
        return self.inner.forward(**kwargs)


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


#: The model names the suite's tests put in their ``openai:NAME@URL`` specs: what a
#: :class:`FakeOpenAIServer` lists in ``GET /models`` unless told otherwise.
DEFAULT_SERVED = ("fake", "m", "ref", "j", "w", "x")

#: vLLM's wordings of a context overflow (HTTP 400), oldest first (seen in its issues from 2023
#: to mid-2025, in late 2025, and in 2026 releases).
CONTEXT_WORDINGS = {
    "requested": (
        "This model's maximum context length is {limit} tokens. However, you requested {total} tokens "
        "({prompt} in the messages, {completion} in the completion). Please reduce the length of the messages "
        "or completion."
    ),
    "too_large": (
        "'max_tokens' or 'max_completion_tokens' is too large: {completion}. This model's maximum context length "
        "is {limit} tokens and your request has {prompt} input tokens ({completion} > {limit} - {prompt})."
    ),
    "at_least": (
        "This model's maximum context length is {limit} tokens. However, you requested {completion} output tokens "
        "and your prompt contains at least {prompt} input tokens, for a total of at least {total} tokens. Please "
        "reduce the length of the input prompt or the number of requested output tokens. "
        "(parameter=input_tokens, value={prompt})"
    ),
}

#: What an OpenAI reasoning model (o1, o3, gpt-5) accepts of each sampling parameter: its default only.
REASONING_DEFAULTS = {"temperature": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0}


class FakeOpenAIServer:
    """A local HTTP server that speaks /v1/chat/completions and /v1/models and answers at once.

    ``fail_first`` requests get HTTP 500 before the server starts answering; with ``raw``,
    every answer is HTTP 200 with that body, of ``raw_type`` (a broken server, or a proxy's HTML
    page). ``token_ids`` and ``logprobs`` (any JSON values, to imitate a broken server too) go
    into the choice when the request asks for them (``return_token_ids``, ``logprobs``), as vLLM
    does; each log-probability becomes a ``logprobs.content`` entry. With ``refuse_tokens``, a
    request that asks for either gets HTTP 400 (a hosted API). ``bodies`` holds the chat request
    bodies received, ``model_lists`` counts the ``GET /models`` answered.

    ``reply`` may be ``None`` (``content: null``). ``reasoning`` goes into the message's
    ``reasoning_field`` (vLLM with a reasoning parser: ``reasoning``, or ``reasoning_content``
    in older releases); ``finish_reason`` is the choice's.

    ``GET /models`` lists ``served`` (vLLM model cards, with ``max_model_len`` when given), or
    answers ``models_raw`` (of ``models_type``, with ``models_status``) as it is. With ``context_limit``, a chat request
    whose prompt (its words) plus ``max_tokens`` exceeds it gets vLLM's HTTP 400 in the wording of
    ``context_wording`` (:data:`CONTEXT_WORDINGS`), and the usage counts the prompt's words
    (``context_unstated`` more tokens count against the limit without being stated). With
    ``reasoning_model``, the server refuses what OpenAI's reasoning models refuse (HTTP 400, one
    refusal per request): ``max_tokens``, and any sampling parameter but its default
    (:data:`REASONING_DEFAULTS`). ``bad_request``: every chat request gets HTTP 400 with that
    message (or that error object; a callable: the message for a request's messages, ``None``
    to answer it). With ``api_key``, a request without that bearer key gets 401. After
    ``down_after`` chat requests answered, the server is down (:attr:`down`; set it to bring the
    server down, or back up for good): every request is dropped without a reply, as by a server
    that died behind its port.

    A request with ``"stream": true`` gets the reply as vLLM streams it (server-sent events): the
    content in two pieces, ``token_ids`` and the log-probabilities split the same way (a value
    that is not a list goes whole in the first chunk), the reasoning in the first chunk, the
    finish reason in the last, then a usage chunk when ``stream_options.include_usage`` asks for
    it, then ``[DONE]``, pausing ``stall_s`` seconds after each chunk but the last (a slow server,
    or with a long pause one that stops mid-reply). With ``no_stream`` it answers every request whole, as a server that
    does not stream. ``refuse_params`` are request parameters refused with HTTP 400 naming them
    (OpenAI's "Unsupported parameter" wording) when a request carries them.
    """

    def __init__(
        self,
        reply: str | Callable | None = "<answer>Paris</answer>",
        fail_first: int = 0,
        raw: bytes | None = None,
        token_ids: list | None = None,
        logprobs: list | None = None,
        refuse_tokens: bool = False,
        *,
        raw_type: str = "application/json",
        reasoning: str | None = None,
        reasoning_field: str = "reasoning",
        finish_reason: str = "stop",
        served: Sequence[str] = DEFAULT_SERVED,
        max_model_len: int | None = None,
        models_raw: bytes | None = None,
        models_type: str = "application/json",
        models_status: int = 200,
        context_limit: int | None = None,
        context_wording: str = "requested",
        context_unstated: int = 0,
        reasoning_model: bool = False,
        bad_request: str | dict | Callable | None = None,
        api_key: str | None = None,
        down_after: int | None = None,
        stall_s: float = 0.0,
        no_stream: bool = False,
        refuse_params: Sequence[str] = (),
    ) -> None:
        state = {"left": fail_first, "requests": 0, "answered": 0, "down": False, "die_at": down_after}
        bodies: list[dict] = []
        lists: list[int] = []
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict, resp: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.end_headers()
                choice = resp["choices"][0]
                pieces = [dict(index=0, delta={"role": "assistant"}), dict(index=0, delta={})]
                content = choice["message"].get("content")
                if content is not None:
                    half = len(content) // 2
                    pieces[0]["delta"]["content"], pieces[1]["delta"]["content"] = content[:half], content[half:]
                if reasoning is not None:
                    pieces[0]["delta"][reasoning_field] = reasoning
                for key, value in (("token_ids", choice.get("token_ids")),
                                   ("logprobs", (choice.get("logprobs") or {}).get("content"))):  # fmt: skip
                    if value is None:
                        continue
                    if not isinstance(value, list):
                        pieces[0][key] = value if key == "token_ids" else {"content": value}
                        continue
                    half = len(value) // 2
                    for piece, part in zip(pieces, (value[:half], value[half:]), strict=True):
                        piece[key] = part if key == "token_ids" else {"content": part}
                pieces[1]["finish_reason"] = choice["finish_reason"]
                chunks = [{"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                           "choices": [piece]} for piece in pieces]  # fmt: skip
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                                   "choices": [], "usage": resp["usage"]})  # fmt: skip
                try:
                    for i, chunk in enumerate(chunks):
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        if i < len(chunks) - 1 and stall_s:
                            time.sleep(stall_s)
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):  # the client gave up during the stall
                    pass

            def _refuse(self, status: int, message: str, param: str | None = None, code: object = None) -> None:
                err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
                self._send(status, json.dumps({"error": err}).encode())

            def _authorized(self) -> bool:
                if api_key is None or self.headers.get("Authorization") == f"Bearer {api_key}":
                    return True
                self._send(401, b'{"error": "Unauthorized"}')  # vLLM's answer with --api-key
                return False

            def _dropped(self) -> bool:
                if state["down"]:
                    self.close_connection = True  # no reply: the client sees the connection closed
                return state["down"]

            def do_GET(self):
                if self._dropped() or not self._authorized():
                    return
                if self.path.rstrip("/") != "/v1/models":
                    self._send(404, b'{"detail": "Not Found"}')
                    return
                with lock:
                    lists.append(1)
                if models_raw is not None:
                    self._send(models_status, models_raw, models_type)
                    return
                cards = [
                    {"id": name, "object": "model", "created": 0, "owned_by": "vllm", "root": name, "parent": None,
                     "max_model_len": max_model_len, "permission": []}
                    for name in served
                ]  # fmt: skip
                self._send(200, json.dumps({"object": "list", "data": cards}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    if state["die_at"] is not None and state["answered"] >= state["die_at"]:
                        state["down"] = True
                if self._dropped() or not self._authorized():
                    return
                with lock:
                    bodies.append(body)
                    state["requests"] += 1
                    state["answered"] += 1
                    fail = state["left"] > 0
                    state["left"] -= 1
                if fail:
                    self._send(500, b'{"error": {"message": "overloaded"}}')
                    return
                if raw is not None:
                    self._send(200, raw, raw_type)
                    return
                if isinstance(bad_request, dict):
                    self._send(400, json.dumps({"error": bad_request}).encode())
                    return
                refusal = bad_request(body["messages"]) if callable(bad_request) else bad_request
                if refusal is not None:
                    self._refuse(400, refusal)
                    return
                refused = next((name for name in refuse_params if name in body), None)
                if refused is not None:
                    self._refuse(400, f"Unsupported parameter: '{refused}'", refused, "unsupported_parameter")
                    return
                if refuse_tokens and ("logprobs" in body or "return_token_ids" in body):
                    self._refuse(400, "Unrecognized request argument supplied: logprobs")
                    return
                if reasoning_model and "max_tokens" in body:
                    self._refuse(
                        400,
                        "Unsupported parameter: 'max_tokens' is not supported with this model. "
                        "Use 'max_completion_tokens' instead.",
                        "max_tokens",
                        "unsupported_parameter",
                    )
                    return
                for name, default in REASONING_DEFAULTS.items() if reasoning_model else ():
                    if name in body and body[name] != default:
                        self._refuse(
                            400,
                            f"Unsupported value: '{name}' does not support {body[name]} with this model. "
                            f"Only the default ({default}) value is supported.",
                            name,
                            "unsupported_value",
                        )
                        return
                words = sum(len(str(m["content"]).split()) for m in body["messages"])
                completion = body.get("max_tokens", body.get("max_completion_tokens")) or 0
                if context_limit is not None and words + context_unstated + completion > context_limit:
                    message = CONTEXT_WORDINGS[context_wording].format(
                        limit=context_limit, prompt=words, completion=completion, total=words + completion
                    )
                    self._send(
                        400,
                        json.dumps({"object": "error", "message": message, "type": "BadRequestError", "param": None,
                                    "code": 400}).encode(),
                    )  # fmt: skip
                    return
                content = reply(body["messages"]) if callable(reply) else reply
                message = {"role": "assistant", "content": content}
                if reasoning is not None:
                    message[reasoning_field] = reasoning
                choice = {"index": 0, "finish_reason": finish_reason, "message": message}
                if token_ids is not None and body.get("return_token_ids"):
                    choice["token_ids"] = token_ids
                if logprobs is not None and body.get("logprobs"):
                    entries = [
                        {"token": f"t{i}", "logprob": x, "bytes": None, "top_logprobs": []}
                        for i, x in enumerate(logprobs)
                    ]
                    choice["logprobs"] = {"content": entries}
                prompt = words if context_limit is not None else 10
                resp = {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3},
                }
                if body.get("stream") and not no_stream:
                    self._stream(body, resp)
                    return
                self._send(200, json.dumps(resp).encode())

        self.state = state
        self.bodies = bodies
        self.model_lists = lists
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def down(self) -> bool:
        """Whether the server drops every request (set it to bring the server down or back)."""
        return self.state["down"]

    @down.setter
    def down(self, value: bool) -> None:
        self.state["down"] = value
        self.state["die_at"] = None  # brought back, it stays up

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def dead_url() -> str:
    """The ``/v1`` URL of a loopback port nobody listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@contextmanager
def silent_socket() -> Iterator[str]:
    """The ``/v1`` URL of a socket that accepts connections (the kernel's backlog) and never
    reads or answers: a stuck server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"


@contextmanager
def web_providers(monkeypatch, tmp_path) -> Iterator:
    """The fault-injecting imitation of Serper, SearXNG and Jina (no faults unless its plan is
    scripted), reachable through the environment variables the web settings read; the web cache
    in ``tmp_path``; loopback pages allowed."""
    from websailor.tools.web.fault_server import FaultPlan, FaultServer

    with FaultServer(FaultPlan()) as server:
        for var, value in provider_environ(
            server, tmp_path, WEBSAILOR_WEB_CACHE=str(tmp_path / "web_cache.sqlite")
        ).items():
            monkeypatch.setenv(var, value)
        monkeypatch.delenv("WEBSAILOR_WEB_CONFIG", raising=False)
        yield server


def vllm_imitation(
    tok,
    reply: str | list[str],
    stop_tail: str = "",
    dev_mode: bool = True,
    logprobs_mode="processed_logprobs",
    dtype=None,
    delay_s: float = 0.0,
    die_after: int | None = None,
    root: str = "/nonexistent/model",
    weight_transfer: bool = False,
    stall_s: float = 0.0,
    streams: bool = True,
):
    """An ASGI app answering like vLLM: ``/v1/models`` with ``root`` (the served model's folder), ``/v1/completions``
    with ``reply`` (a list: the n-th request of one prompt gets ``reply[n % len(reply)]``, so a group
    of rollouts holds each of them whatever order they come in) and
    ``token_ids`` (the stop string's tokens among them, as vLLM returns them) and
    ``logprobs.token_logprobs``, each after ``delay_s``; the dev-mode endpoints when
    ``dev_mode``. ``app.state.requests`` keeps the completion requests. A request with ``"stream": true`` gets the reply
    streamed as vLLM streams it (server-sent events, three token ids a chunk with their text and
    log-probabilities, the finish and stop reasons in the last, then ``[DONE]``), pausing
    ``stall_s`` seconds after the first chunk (a server that stops mid-reply); without
    ``streams``, every reply comes whole (a server that does not stream).
    ``app.state.reloads`` keeps the weight folders it was told to reload (a folder that does not exist is an HTTP 500, as
    vLLM's reload fails on it), and setting ``app.state.dead`` makes every endpoint answer
    HTTP 503 from then on (a server that died), as it does by itself after ``die_after``
    completion requests. ``app.state.events`` times each reload and each completion's start
    and end. ``weight_transfer`` lists vLLM's weight-transfer endpoints in ``/openapi.json``."""
    import asyncio
    import os
    import time

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI(openapi_url=None)  # its own /openapi.json below, as vLLM's lists its routes
    app.state.requests = []
    app.state.reloads = []
    app.state.dead = False
    app.state.events = []  # (what, monotonic seconds): reloads, and each completion's start and end
    replies = [reply] if isinstance(reply, str) else list(reply)
    asked: dict = {}  # prompt -> requests so far
    paths: dict = {"/v1/models": {}, "/v1/completions": {}}
    if dev_mode:
        paths.update({"/collective_rpc": {}, "/reset_prefix_cache": {}, "/server_info": {}})
    if weight_transfer:  # listed only: a test's transfer client stands in for the NCCL side
        for path in ("/init_weight_transfer_engine", "/pause", "/resume", "/start_weight_update"):
            paths[path] = {}
        paths.update({"/update_weights": {}, "/finish_weight_update": {}})

    @app.middleware("http")
    async def died(request: Request, call_next):
        if app.state.dead:
            return JSONResponse({"error": "the server is gone"}, status_code=503)
        return await call_next(request)

    @app.get("/v1/models")
    def models():
        return {"data": [{"id": "policy", "root": root, "max_model_len": 4096}]}

    @app.get("/openapi.json")
    def openapi():
        return {"paths": paths}

    @app.get("/server_info")
    def info():
        config = {"logprobs_mode": logprobs_mode} | ({"dtype": dtype} if dtype else {})
        return {"vllm_config": {"model_config": config}}

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request):
        body = await request.json()
        path = (body.get("kwargs") or {}).get("weights_path")
        if path is not None:
            if not os.path.isdir(path):
                return JSONResponse({"error": f"FileNotFoundError: {path}"}, status_code=500)
            app.state.reloads.append(path)
            app.state.events.append(("reload", time.monotonic()))
        return {"results": [None]}

    @app.post("/reset_prefix_cache")
    def reset_prefix_cache():
        return {}

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        app.state.requests.append(body)
        if die_after is not None and len(app.state.requests) > die_after:
            app.state.dead = True
            return JSONResponse({"error": "the server is gone"}, status_code=503)
        app.state.events.append(("start", time.monotonic()))
        if delay_s:
            await asyncio.sleep(delay_s)
        app.state.events.append(("end", time.monotonic()))
        key = json.dumps(body.get("prompt"))
        text = replies[asked.get(key, 0) % len(replies)]
        asked[key] = asked.get(key, 0) + 1
        ids = tok(text + stop_tail, add_special_tokens=False)["input_ids"]
        stopped = bool(stop_tail)
        if not stopped:
            ids = ids + [tok.eos_token_id]
        choice = {
            "text": text,
            "finish_reason": "stop",
            "stop_reason": stop_tail if stopped else None,
            "token_ids": ids,
            "logprobs": {"token_logprobs": [-0.25] * len(ids), "tokens": [], "top_logprobs": []},
        }
        if body.get("stream") and streams:
            return StreamingResponse(chunked(ids), media_type="text/event-stream")
        return {"choices": [choice], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}}

    async def chunked(ids: list[int]):
        for start in range(0, len(ids), 3):
            piece = ids[start : start + 3]
            last = start + 3 >= len(ids)
            choice = {"index": 0, "text": tok.decode(piece), "token_ids": piece,
                      "logprobs": {"token_logprobs": [-0.25] * len(piece), "tokens": [], "top_logprobs": []},
                      "finish_reason": "stop" if last else None,
                      "stop_reason": (stop_tail or None) if last else None}  # fmt: skip
            yield f"data: {json.dumps({'object': 'text_completion', 'choices': [choice]})}\n\n"
            if start == 0 and stall_s:
                await asyncio.sleep(stall_s)
        yield "data: [DONE]\n\n"

    return app


@contextmanager
def serving(app, timeout_s: float = 30.0) -> Iterator[str]:
    """Run the ASGI ``app`` with uvicorn in a daemon thread on a free loopback port (a real
    server: a URL reaches it as sent); yields its base URL, without a trailing slash."""
    import time

    import uvicorn

    from websailor.server.app import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def provider_environ(server, tmp_path, **extra: str) -> dict[str, str]:
    """The environment variables that point the web settings at the provider imitation
    ``server`` (a :class:`~websailor.tools.web.fault_server.FaultServer`), with the web cache in
    ``tmp_path`` and loopback pages allowed; ``extra`` adds or overrides variables."""
    return {
        "SERPER_API_KEY": server.api_key,
        "SERPER_BASE_URL": server.url,
        "SEARXNG_BASE_URL": f"{server.url}/searxng",
        "JINA_BASE_URL": f"{server.url}/jina",
        "WEBSAILOR_WEB_CACHE": str(tmp_path / "cache.sqlite"),
        "WEBSAILOR_WEB_ALLOW_PRIVATE": "1",
        **extra,
    }


__all__ = [
    "FakeOpenAIServer",
    "ModelError",
    "ScriptedModel",
    "call",
    "dead_url",
    "provider_environ",
    "serving",
    "silent_socket",
    "web_providers",
]


_FAKE_VLLM = '''#!{python}
"""A stand-in for `python -m vllm.entrypoints.openai.api_server`: the parts of vLLM's HTTP API the
rollouts use (each reply after $FAKE_VLLM_DELAY seconds), a worker process in its process group and a shared-memory file it maps (as
vLLM's CPU workers do), with the pids written to $FAKE_VLLM_PIDS."""
import argparse, mmap, os, subprocess, sys

p = argparse.ArgumentParser()
p.add_argument("-m")
p.add_argument("--model")
p.add_argument("--served-model-name")
p.add_argument("--host")
p.add_argument("--port", type=int)
p.add_argument("--max-model-len", type=int, default=8192)
a, _ = p.parse_known_args()
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
shm = "/dev/shm/psm_websailor_test_" + str(os.getpid())
fd = os.open(shm, os.O_CREAT | os.O_RDWR)
os.ftruncate(fd, 4096)
mapped = mmap.mmap(fd, 4096)
with open(os.environ["FAKE_VLLM_PIDS"], "a") as fh:
    fh.write(f"{{os.getpid()}} {{worker.pid}} {{shm}}\\n")

import uvicorn
from fastapi import FastAPI, Request
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(a.model)
reply = os.environ.get("FAKE_VLLM_REPLY", "<think>I know it.</think>\\n<answer>Paris</answer>")
ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
app = FastAPI(openapi_url=None)

@app.get("/v1/models")
def models():
    return {{"data": [{{"id": a.served_model_name, "root": a.model, "max_model_len": a.max_model_len}}]}}

@app.get("/openapi.json")
def openapi():
    return {{"paths": {{"/v1/models": {{}}, "/v1/completions": {{}}, "/collective_rpc": {{}}, "/reset_prefix_cache": {{}}}}}}

@app.post("/v1/completions")
async def completions(request: Request):
    import asyncio

    body = await request.json()
    await asyncio.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
    choice = {{"text": reply, "finish_reason": "stop", "stop_reason": None, "token_ids": ids,
              "logprobs": {{"token_logprobs": [-0.5] * len(ids), "tokens": [], "top_logprobs": []}}}}
    return {{"choices": [choice], "usage": {{"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}}}}

uvicorn.run(app, host=a.host, port=a.port, log_level="warning")
'''


def write_fake_vllm(folder) -> tuple:
    """An executable stand-in for vLLM's Python (:data:`_FAKE_VLLM`) in ``folder``, and the file
    it writes ``server_pid worker_pid shm_path`` lines to (set ``FAKE_VLLM_PIDS`` to it)."""
    import sys
    from pathlib import Path

    folder = Path(folder)
    python = folder / "fake_vllm_python"
    python.write_text(_FAKE_VLLM.format(python=sys.executable))
    python.chmod(0o755)
    return python, folder / "fake_vllm_pids"


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
