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
  whole reply, checked at every read of the body (:func:`until`), so a server that keeps a
  reply going with keep-alive comments, blank lines or a byte at a time is cut there too.

A server that answers a streamed request with a whole JSON reply (no ``text/event-stream``) is
read as such; one that sends nothing at all before its whole reply is ready (its headers
included) must do so within the read timeout. The chunks are put back together into the shape
of a non-streamed reply, so the backends read one shape: :func:`chat_reply` for chat
completions (``choices[0].delta``), :func:`completion_reply` for vLLM's ``/v1/completions``
(text, ``token_ids`` and ``logprobs.token_logprobs`` in pieces). Nothing a broken server sends
is taken on trust: each chunk must carry as many log-probabilities as token ids, a stream that
ends before a chunk gave a ``finish_reason`` (a cut connection, a dying proxy) is a transport
failure (retried, and counted by the breaker), never a finished reply, and a chunk that is not
a completion chunk, or carries an ``error`` (vLLM's way to report an engine failure
mid-stream), ends the reply with :class:`~websailor.errors.ModelError` naming the server.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import Any

import httpx

from websailor.errors import ConfigError, ModelError

#: Seconds a streamed reply may go without a byte (headers, first chunk, between chunks).
READ_TIMEOUT_S = 60.0
#: The shortest read timeout taken (a shorter one would time every reply out).
MIN_READ_TIMEOUT_S = 0.1
#: The environment variable that sets the read timeout of every model server a run talks to.
READ_TIMEOUT_ENV = "WEBSAILOR_READ_TIMEOUT"
#: Seconds to open a connection: a host that does not answer at all (a dead machine, a
#: firewall dropping packets) is a failure in seconds, not after a whole request timeout.
CONNECT_TIMEOUT_S = 10.0


def read_timeout(value: float | str | None = None, name: str = READ_TIMEOUT_ENV) -> float:
    """The read timeout in seconds: ``value``, else :data:`READ_TIMEOUT_ENV`, else
    :data:`READ_TIMEOUT_S`.

    Raises:
        ConfigError: a value that is not a finite number of seconds of at least
            :data:`MIN_READ_TIMEOUT_S`, naming ``name``
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
    if not math.isfinite(seconds) or seconds < MIN_READ_TIMEOUT_S:
        raise ConfigError(
            f"{name} {value!r}: the read timeout must be a finite number of seconds, at least {MIN_READ_TIMEOUT_S:g}"
        )
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


def out_of_budget(where: str, seconds: float, budget: bool, deadline: float) -> ModelError | None:
    """The error for a reply cut at ``deadline`` (``time.monotonic()``) because the caller's own
    time ran out (``budget``: the ``seconds`` it was given are the question's time left, not the
    server's timeout): the caller's limit, which the server's circuit breaker does not count.
    ``None`` when the cut was the server's (a timeout before the deadline, or no budget)."""
    if budget and time.monotonic() >= deadline - 0.05:
        return ModelError(f"{where}: the question's time ran out mid-reply ({seconds:.1f} s)")
    return None


def event_stream(content_type: str | None) -> bool:
    """Whether a reply's ``Content-Type`` is server-sent events (a streamed reply)."""
    return (content_type or "").split(";")[0].strip().lower() == "text/event-stream"


def until(deadline: float, pieces: Iterable[bytes], late: Callable[[], BaseException]) -> Iterator[bytes]:
    """``pieces`` (a reply's body as it is read), checking at each that ``deadline``
    (``time.monotonic()``) has not passed: a server that keeps a reply going with keep-alive
    comments, blank lines or a byte at a time is cut at the deadline too.

    Raises:
        the exception ``late()`` makes, once the deadline has passed.
    """
    for piece in pieces:
        if time.monotonic() > deadline:
            raise late()
        yield piece


def sse_data(pieces: Iterable[bytes]) -> Iterator[str]:
    """The ``data`` of each server-sent event of a body read in ``pieces`` (an event's several
    ``data:`` lines joined by newlines; comments, ``event:``, ``id:`` and ``retry:`` fields left
    out; an event the body ends inside is discarded), in linear time whatever the pieces' sizes."""
    buf, data = bytearray(), []
    for piece in pieces:
        scan = len(buf)
        buf += piece
        start = 0
        while (end := buf.find(b"\n", scan)) >= 0:
            line = bytes(buf[start:end]).rstrip(b"\r").decode("utf-8", errors="replace")
            start = scan = end + 1
            if not line:  # the end of an event
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                data.append(line[6:] if line.startswith("data: ") else line[5:])
        del buf[:start]
    # an event the body ends inside (no blank line after it) is discarded, as the SSE rules say:
    # the stream was cut there, which the reader finds (no finish_reason)


class _Pieces:
    """A list sent in pieces (token ids, log-probabilities), put together in linear time; a piece
    that is not a list (a broken server) is kept as the value, for the reader's checks to refuse."""

    def __init__(self) -> None:
        self.items: list = []
        self.seen = False
        self.bad: Any = None
        self.sizes: list[int] = []  # each chunk's count (0 where a chunk sent none)
        self.gap: int | None = None  # the first chunk with reply text but no piece

    def add(self, piece: Any, text: bool = False) -> None:
        if piece is None and text and self.gap is None:
            self.gap = len(self.sizes)
        if piece is not None:
            self.seen = True
            if isinstance(piece, list):
                self.items.extend(piece)
            elif self.bad is None:
                self.bad = piece
        self.sizes.append(len(piece) if isinstance(piece, list) else 0)

    @property
    def value(self) -> Any:
        if self.bad is not None:
            return self.bad
        return self.items if self.seen else None


def _aligned(ids: _Pieces, logprobs: _Pieces, where: str) -> None:
    """Each chunk carries as many log-probabilities as token ids (when the reply has both), and
    when some chunks carry token ids, every chunk with reply text does: the ids of a reply whose
    chunks sent them only now and then are not its text, and a trainer would learn wrong tokens."""
    if ids.seen and ids.bad is None and ids.gap is not None:  # a bad piece: the reader names it
        raise ModelError(
            f"{where}: chunk {ids.gap + 1} of the streamed reply carries text but no token ids, though other "
            "chunks carry them: the reply's token ids would not be its text"
        )
    if ids.seen and logprobs.seen and ids.bad is None and logprobs.bad is None and ids.sizes != logprobs.sizes:
        at = next(i for i, (a, b) in enumerate(zip(ids.sizes, logprobs.sizes, strict=True)) if a != b)
        raise ModelError(
            f"{where}: chunk {at + 1} of the streamed reply carries {ids.sizes[at]} token ids but "
            f"{logprobs.sizes[at]} log-probabilities"
        )


def _finish(value: Any, where: str) -> str | None:
    """A chunk's ``finish_reason``: ``None`` while the reply goes on, else a non-empty string."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ModelError(f"{where}: a chunk's finish_reason is not a reason: {value!r}")
    return value


def _field(obj: Any, name: str) -> Any:
    """``obj.name`` of an OpenAI client object, its extra fields included (vLLM's ``token_ids``)."""
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def chat_reply(chunks: Iterable[Any], where: str, cut: Callable[[str], BaseException]) -> Any | None:
    """A streamed chat completion (the OpenAI client's ``ChatCompletionChunk`` objects) put back
    together as a non-streamed one: ``choices[0]`` with ``message.content`` (and
    ``message.reasoning``, a reasoning parser's thought), ``finish_reason``, ``token_ids`` (vLLM's
    ``return_token_ids``) and ``logprobs.content``; ``usage`` from the chunk that carries it.
    ``choices`` is empty when no chunk carried the first choice; ``None`` when no chunk came.

    Raises:
        ModelError: a chunk carries more or fewer log-probabilities than token ids, reply text
            but no token ids while others carry them, content that is neither text nor
            ``None``, a ``finish_reason`` that is no string, or more of the reply after one.
        the exception ``cut(why)`` makes: chunks came but none said why the reply ended (no
            ``finish_reason``: the stream was cut).
    """
    content: list[str] = []
    reasoning: list[str] = []
    ids, entries = _Pieces(), _Pieces()
    finish, usage, seen, chosen = None, None, False, False
    for chunk in chunks:
        seen = True
        usage = getattr(chunk, "usage", None) or usage
        choices = getattr(chunk, "choices", None)
        for choice in choices if isinstance(choices, list) else ():
            if getattr(choice, "index", None) != 0:
                continue
            chosen = True
            delta = getattr(choice, "delta", None)
            text = getattr(delta, "content", None)
            thought = next((p for p in (_field(delta, n) for n in ("reasoning", "reasoning_content")) if p), None)
            piece_ids = _field(choice, "token_ids")
            piece_logprobs = getattr(getattr(choice, "logprobs", None), "content", None)
            if finish is not None and (text or thought or piece_ids or piece_logprobs):
                raise ModelError(f"{where}: a chunk of the streamed reply came after its finish_reason")
            if isinstance(text, str):
                content.append(text)
            elif text is not None:  # a chunk with no text says None; anything else is no reply text
                raise ModelError(f"{where}: a chunk's content is a {type(text).__name__}, not text")
            if isinstance(thought, str):
                reasoning.append(thought)
            ids.add(piece_ids, bool(text or thought))
            entries.add(piece_logprobs)
            finish = _finish(getattr(choice, "finish_reason", None), where) or finish
    if not seen:
        return None
    if not chosen:
        return SimpleNamespace(choices=[], usage=usage)
    if finish is None:
        raise cut("the stream ended before the reply did (no chunk gave a finish_reason)")
    _aligned(ids, entries, where)
    message = SimpleNamespace(content="".join(content), reasoning="".join(reasoning) or None, model_extra={})
    logprobs = None if entries.value is None else SimpleNamespace(content=entries.value)
    choice = SimpleNamespace(message=message, finish_reason=finish, token_ids=ids.value, logprobs=logprobs)
    return SimpleNamespace(choices=[choice], usage=usage)


def completion_reply(events: Iterable[str], where: str, cut: Callable[[str], BaseException]) -> dict[str, Any]:
    """A streamed ``/v1/completions`` reply (its events' data, :func:`sse_data`) put back
    together as a non-streamed one: ``{"choices": [{"text", "token_ids", "logprobs":
    {"token_logprobs"}, "finish_reason", "stop_reason"}], "usage"}`` (the first choice; what no
    chunk sends stays absent, for the reader's checks).

    Raises:
        ModelError: a chunk is not JSON, is not a completion chunk, carries an ``error``,
            more or fewer log-probabilities than token ids, text but no token ids while
            others carry them, a ``finish_reason`` that is no string, or more of the reply
            after one.
        the exception ``cut(why)`` makes: the stream ended before a chunk gave a
            ``finish_reason`` (cut).
    """
    text: list[str] = []
    out: dict[str, Any] = {}
    ids, logprobs = _Pieces(), _Pieces()
    usage = None
    for payload in events:
        if payload.strip() == "[DONE]":
            break
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError) as e:
            raise ModelError(f"{where}: a chunk of the streamed reply is not JSON ({e}): {payload[:200]!r}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(choices, list) and not data.get("error"):
            raise ModelError(f"{where}: a chunk of the streamed reply is not a completion chunk: {payload[:200]!r}")
        if data.get("error"):
            error = data["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ModelError(f"{where}: the server reported an error mid-reply: {str(message)[:300]}")
        usage = data.get("usage") or usage
        for choice in choices:
            if not isinstance(choice, dict):
                raise ModelError(f"{where}: a chunk's choice is not an object: {payload[:200]!r}")
            if choice.get("index", 0) != 0:
                continue
            if "finish_reason" in out and (choice.get("text") or choice.get("token_ids")):
                raise ModelError(f"{where}: a chunk of the streamed reply came after its finish_reason")
            if isinstance(choice.get("text"), str):
                text.append(choice["text"])
            ids.add(choice.get("token_ids"), bool(choice.get("text")))
            piece = choice.get("logprobs")
            logprobs.add(piece.get("token_logprobs") if isinstance(piece, dict) else piece)
            if choice.get("stop_reason") is not None:
                out["stop_reason"] = choice["stop_reason"]
            if _finish(choice.get("finish_reason"), where) is not None:
                out["finish_reason"] = choice["finish_reason"]
    if "finish_reason" not in out:
        raise cut("the stream ended before the reply did (no chunk gave a finish_reason)")
    _aligned(ids, logprobs, where)
    out["text"] = "".join(text)
    if ids.value is not None:
        out["token_ids"] = ids.value
    if logprobs.value is not None:
        out["logprobs"] = {"token_logprobs": logprobs.value}
    return {"choices": [out], "usage": usage}
