"""Streamed replies and their timeouts: a model server that stops answering in the middle of a
reply is found after a read timeout, not after the whole request's budget.

Both HTTP backends ask for their completions streamed (server-sent events: ``"stream": true``),
and read them with two limits:

* the **read timeout** (:func:`read_timeout`, default :data:`READ_TIMEOUT_S`, set by
  :data:`READ_TIMEOUT_ENV`): the longest silence allowed while a reply is under way, from the
  request to the reply's headers, to its first chunk (the time to the first token: a queued
  request waits here) and between any two chunks. A server that hangs (a stopped process, a
  stuck GPU, a dropped network path with the connection left open) is found after that many
  seconds; the attempt counts as a timeout for the retries and the circuit breaker
  (:mod:`websailor.breaker`), which then declares the server down;
* the **request timeout** (the backend's ``timeout_s``, or a question's remaining budget): the
  whole reply, checked at each chunk, so a server that trickles chunks forever is cut there too.

A server that answers a streamed request with a whole JSON reply (no ``text/event-stream``) is
read as such. The chunks are put back together into the shape of a non-streamed reply, so the
backends read one shape: :func:`chat_reply` for chat completions (``choices[0].delta``),
:func:`completion_reply` for vLLM's ``/v1/completions`` (text, ``token_ids`` and
``logprobs.token_logprobs`` in pieces). A chunk that carries an ``error`` (vLLM's way to report
an engine failure mid-stream) ends the reply with :class:`~websailor.errors.ModelError`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import httpx

from websailor.errors import ConfigError, ModelError

#: Seconds a streamed reply may go without a byte (headers, first chunk, between chunks).
READ_TIMEOUT_S = 60.0
#: The environment variable that sets the read timeout of every model server a run talks to.
READ_TIMEOUT_ENV = "WEBSAILOR_READ_TIMEOUT"
#: Seconds to open a connection: a host that does not answer at all (a dead machine, a
#: firewall dropping packets) is a failure in seconds, not after a whole request timeout.
CONNECT_TIMEOUT_S = 10.0


def read_timeout(value: float | str | None = None, name: str = READ_TIMEOUT_ENV) -> float:
    """The read timeout in seconds: ``value``, else :data:`READ_TIMEOUT_ENV`, else
    :data:`READ_TIMEOUT_S`.

    Raises:
        ConfigError: a value that is not a finite number of seconds above 0, naming ``name``
            (or the environment variable it came from).
    """
    if value is None:
        raw = os.environ.get(READ_TIMEOUT_ENV, "").strip()
        if not raw:
            return READ_TIMEOUT_S
        value, name = raw, READ_TIMEOUT_ENV
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} {value!r}: give the read timeout in seconds, a number above 0") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name} {value!r}: the read timeout must be a finite number of seconds above 0")
    return seconds


def request_timeout(seconds: float, kind: type = httpx.Timeout, read: float | None = None) -> Any:
    """The timeouts of one request of at most ``seconds`` (``kind``: ``httpx.Timeout``, or
    ``openai.Timeout`` for the OpenAI client, whose HTTP library is its own): connecting takes at
    most :data:`CONNECT_TIMEOUT_S`; each read waits at most ``read`` seconds (a streamed reply:
    see the module docstring), or ``seconds`` when ``read`` is ``None`` (a reply that is not
    streamed sends its first byte when it is whole). Neither exceeds ``seconds``; waiting for a
    free connection of the client's pool (a wait here, not the server's) may take all of it."""
    each = seconds if read is None else min(seconds, read)
    return kind(each, connect=min(seconds, CONNECT_TIMEOUT_S), pool=seconds)


def event_stream(content_type: str | None) -> bool:
    """Whether a reply's ``Content-Type`` is server-sent events (a streamed reply)."""
    return (content_type or "").split(";")[0].strip().lower() == "text/event-stream"


def _past(deadline: float, late: Callable[[], BaseException]) -> None:
    if time.monotonic() > deadline:
        raise late()


def _error(data: Any, where: str) -> None:
    if isinstance(data, dict) and data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise ModelError(f"{where}: the server reported an error mid-reply: {str(message)[:300]}")


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` of an OpenAI client object, its extra fields included (vLLM's ``token_ids``)."""
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def _extend(total: Any, piece: Any) -> Any:
    """The pieces of a list sent in chunks, put together; a piece that is not a list (a broken
    server) is kept as it is, for the reader's own checks to refuse."""
    if piece is None or (total is not None and not isinstance(total, list)):
        return total
    if not isinstance(piece, list):
        return piece
    return (total or []) + piece


def chat_reply(chunks: Iterable[Any], deadline: float, late: Callable[[], BaseException]) -> Any | None:
    """A streamed chat completion (the OpenAI client's ``ChatCompletionChunk`` objects) put back
    together as a non-streamed one: ``choices[0]`` with ``message.content`` (and
    ``message.reasoning``, a reasoning parser's thought), ``finish_reason``, ``token_ids`` (vLLM's
    ``return_token_ids``) and ``logprobs.content``; ``usage`` from the chunk that carries it.
    ``None`` when no chunk came (a server that does not stream).

    Raises:
        the exception ``late()`` makes: a chunk came after ``deadline`` (``time.monotonic()``).
    """
    content: list[str] = []
    reasoning: list[str] = []
    ids: Any = None
    entries: Any = None
    finish, usage, seen = None, None, False
    for chunk in chunks:
        seen = True
        _past(deadline, late)
        usage = getattr(chunk, "usage", None) or usage
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = getattr(choice, "delta", None)
            if delta is not None:
                if isinstance(getattr(delta, "content", None), str):
                    content.append(delta.content)
                for name in ("reasoning", "reasoning_content"):
                    piece = _field(delta, name)
                    if isinstance(piece, str):
                        reasoning.append(piece)
                        break
            ids = _extend(ids, _field(choice, "token_ids"))
            logprobs = getattr(choice, "logprobs", None)
            if logprobs is not None:
                entries = _extend(entries, getattr(logprobs, "content", None))
            finish = getattr(choice, "finish_reason", None) or finish
    if not seen:
        return None
    message = SimpleNamespace(content="".join(content), reasoning="".join(reasoning) or None, model_extra={})
    choice = SimpleNamespace(
        message=message,
        finish_reason=finish,
        token_ids=ids,
        logprobs=None if entries is None else SimpleNamespace(content=entries),
    )
    return SimpleNamespace(choices=[choice], usage=usage)


def completion_reply(
    lines: Iterable[str], deadline: float, late: Callable[[], BaseException], where: str
) -> dict[str, Any]:
    """A streamed ``/v1/completions`` reply (its server-sent event lines) put back together as a
    non-streamed one: ``{"choices": [{"text", "token_ids", "logprobs": {"token_logprobs"},
    "finish_reason", "stop_reason"}], "usage"}`` (the first choice; what a chunk does not send
    stays absent, for the reader's checks).

    Raises:
        ModelError: a chunk carries an ``error``.
        ValueError: a chunk is not JSON.
        the exception ``late()`` makes: a chunk came after ``deadline`` (``time.monotonic()``).
    """
    text: list[str] = []
    out: dict[str, Any] = {}
    ids: Any = None
    logprobs: Any = None
    usage = None
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, comments, event names
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            break
        _past(deadline, late)
        data = json.loads(payload)
        _error(data, where)
        usage = data.get("usage") or usage
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("text"), str):
                text.append(choice["text"])
            ids = _extend(ids, choice.get("token_ids"))
            piece = choice.get("logprobs")
            if piece is not None:
                logprobs = _extend(logprobs, piece.get("token_logprobs") if isinstance(piece, dict) else piece)
            for key in ("finish_reason", "stop_reason"):
                if choice.get(key) is not None:
                    out[key] = choice[key]
    out["text"] = "".join(text)
    if ids is not None:
        out["token_ids"] = ids
    if logprobs is not None:
        out["logprobs"] = {"token_logprobs": logprobs}
    return {"choices": [out], "usage": usage}
