"""Any OpenAI-compatible chat server (vLLM, SGLang, llama.cpp server, hosted APIs).

Transient failures (connection refused or reset, timeouts, HTTP 429 and 5xx) are retried
with exponential back-off and jitter (tenacity); after the retries, or on a permanent error
(4xx), :class:`ModelError` is raised and the trajectory ends with ``model_error``.

What servers refuse, and how each refusal is met (each is learned once per model, with one
warning, and later requests go without it):

* **context overflow** (vLLM: HTTP 400 "This model's maximum context length is 4096 tokens.
  However, you requested ..."; the newer wordings and OpenAI's too): when the message states
  the limit and the prompt's tokens and at least :data:`MIN_RETRY_TOKENS` remain, the request
  is sent once more with ``max_tokens`` cut to fit; otherwise :class:`ContextLengthError`
  (a :class:`ModelError` carrying ``limit`` and ``prompt_tokens``) is raised. This one is
  per request, not learned.
* ``max_tokens`` refused (OpenAI's reasoning models: "Unsupported parameter: 'max_tokens' is
  not supported with this model. Use 'max_completion_tokens' instead."): sent as
  ``max_completion_tokens`` from then on.
* a sampling parameter refused (``temperature``, ``top_p``, ``presence_penalty``,
  ``frequency_penalty``, ``stop``, ``seed``; e.g. "Unsupported value: 'temperature' does not
  support 0.85 with this model. Only the default (1) value is supported."): left out from
  then on, so the server's default applies (stop strings are still cut here).
* the sampled tokens' log-probabilities (``logprobs``, standard) and their ids
  (``return_token_ids``, a vLLM extension), asked with every request: on another HTTP 400
  the request is sent once more without them; when that one is accepted, the server refused
  them and is not asked for them again.

A reasoning server (vLLM with ``--reasoning-parser``) returns the thought apart from the
content, in ``message.reasoning`` (vLLM since late 2025) or ``message.reasoning_content``
(older vLLM, and DeepSeek's API), leaving ``content`` empty or null: the reply's text puts it
back as ``<think>\\n{reasoning}\\n</think>\\n\\n{content}`` (unclosed when the reply was cut at
its token limit inside the thought), as the model wrote it.

The served context length is read from ``GET {base_url}/models`` (vLLM's model cards carry
``max_model_len``): by :meth:`OpenAIModel.check` at start-up, which also refuses an endpoint
that cannot serve (:func:`~websailor.models.endpoint.probe_models`), or lazily on the first read of ``max_context``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import httpx2  # the OpenAI client's HTTP library (openai 3.x)
import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential_jitter

from websailor.breaker import ServiceBreaker, through
from websailor.errors import ConfigError, ContextLengthError, ModelError
from websailor.log import get_logger
from websailor.models.base import ChatModel, Generation, Message, SamplingParams, check_tokens, cut_at_stop
from websailor.models.endpoint import SKIP_CHECK_ENV, ServedModel, api_key, probe_models, skip_check, snippet
from websailor.models.streaming import chat_reply, event_stream, out_of_budget, read_timeout, request_timeout, until

log = get_logger(__name__)

#: The context length assumed when neither the user nor the server states one.
DEFAULT_CONTEXT = 131072
#: The smallest completion budget a context-overflow retry is made with.
MIN_RETRY_TOKENS = 16
#: Parameters a server may refuse, that the request can go without (sampling parameters, and
#: the usage statistics of a streamed reply).
DROPPABLE = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "stop", "seed", "stream_options")
_TOKEN_PARAMS = ("logprobs", "top_logprobs", "return_token_ids")
_MAX_ADJUSTMENTS = 10  # refusals met in one call (each kind at most once): a bound, not a budget


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


# -- context overflow ---------------------------------------------------------------------------
_LIMIT = (
    re.compile(r"maximum context length is (\d+)", re.I),  # vLLM (every version), OpenAI, OpenRouter
    re.compile(r"maximum model length of (\d+)", re.I),  # vLLM: "The decoder prompt (length N) is longer than ..."
    re.compile(
        r"context length \((\d+) tokens?\)", re.I
    ),  # SGLang: "... longer than the model's context length (N tokens)"
    re.compile(r"exceeds (?:the )?limit of (\d+)", re.I),  # vLLM's scheduler: "Input prompt (N tokens) ... limit of L"
)
_PROMPT = (
    re.compile(r"\((\d+) in the messages", re.I),  # older vLLM: "(3726 in the messages, 1000 in the completion)"
    re.compile(
        r"request has (\d+) input tokens", re.I
    ),  # vLLM: "your request has 2778 input tokens (8000 > 4096 - 2778)"
    re.compile(r"prompt contains at least (\d+) input tokens", re.I),  # current vLLM
    re.compile(r"messages resulted in (\d+) tokens", re.I),  # OpenAI
    re.compile(r"prompt \(length (\d+)\)", re.I),  # vLLM: "The decoder prompt (length N)"
    re.compile(r"input prompt \((\d+) tokens\)", re.I),
    re.compile(r"the input \((\d+) tokens\)", re.I),  # SGLang
    re.compile(r"input length (?:of |\()?(\d+)", re.I),
)
_OVERFLOW = re.compile(
    r"maximum context length|maximum model length|context length exceeded|context_length_exceeded"
    r"|is too long and exceeds|longer than the model's context length|'max_completion_tokens' is too large"
    r"|input length .{0,40}exceeds",
    re.I,
)


def parse_context_error(message: str) -> tuple[int | None, int | None] | None:
    """``(limit, prompt_tokens)`` of a server's context-overflow message, each ``None`` when the
    message does not state it; ``None`` when the message is not about the context length."""
    if not _OVERFLOW.search(message or ""):
        return None

    def first(patterns: tuple[re.Pattern[str], ...]) -> int | None:
        for p in patterns:
            m = p.search(message)
            if m:
                return int(m.group(1))
        return None

    return first(_LIMIT), first(_PROMPT)


def _error_body(e: openai.APIStatusError) -> dict[str, Any]:
    """The error object of a refusal: OpenAI's ``{"error": {...}}`` or vLLM's top-level one."""
    body = e.body if isinstance(e.body, dict) else {}
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


def _error_message(e: openai.APIStatusError) -> str:
    message = _error_body(e).get("message")
    return message if isinstance(message, str) and message else str(e)


def _refused_param(e: openai.APIStatusError) -> str | None:
    """The request parameter a refusal names: its ``param`` field, or the one quoted in
    "Unsupported parameter: 'x'" / "Unsupported value: 'x'"."""
    param = _error_body(e).get("param")
    if isinstance(param, str) and param:
        return param
    m = re.search(r"Unsupported (?:parameter|value): '(\w+)'", _error_message(e))
    return m.group(1) if m else None


def _count(value: Any) -> int | None:
    """A token count a server stated, when it is one (a whole number of at least 1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _attributes(value: Any) -> Any:
    """A JSON reply with its objects as attributes (as the OpenAI client's objects are read)."""
    if isinstance(value, dict):
        fields = SimpleNamespace(**{str(k): _attributes(v) for k, v in value.items() if k != "model_extra"})
        fields.model_extra = {}
        return fields
    if isinstance(value, list):
        return [_attributes(v) for v in value]
    return value


# -- the backend --------------------------------------------------------------------------------
@dataclass
class _Call:
    """What one call learned on the way: its completion budget, whether it was cut to fit the
    context, and whether it goes without the token parameters (after an unexplained 400)."""

    max_tokens: int
    shrunk: bool = False
    without_tokens: bool = False
    refusal: openai.APIStatusError | None = None


class OpenAIModel(ChatModel):
    """Chat completions over HTTP.

    Args:
        model: the served model name.
        base_url: e.g. ``http://localhost:8000/v1``.
        timeout_s: per-request timeout in seconds (the whole reply).
        read_timeout_s: the longest silence in seconds while a streamed reply is under way
            (:func:`~websailor.models.streaming.read_timeout`; default
            :data:`~websailor.models.streaming.READ_TIMEOUT_S` or ``$WEBSAILOR_READ_TIMEOUT``).
        stream: ask for replies streamed (:mod:`websailor.models.streaming`), so a server that
            stops mid-reply is found after ``read_timeout_s``; a server that refuses ``stream``
            or answers without streaming is asked without it from then on (one warning).
        max_attempts: tries per call for transient failures; every attempt reports to the
            endpoint's circuit breaker (:attr:`breaker`), which raises
            :class:`~websailor.errors.ServiceDown` once the server failed its threshold of
            attempts in a row.
        backoff_s: first back-off (doubles, with jitter, up to 30 s).
        max_context: the context length in tokens; ``None``: the server's ``max_model_len``
            (``GET /models``), or :data:`DEFAULT_CONTEXT` when it states none. A value given
            here wins over the server's (with a warning when it is larger).

    A reply's :class:`Generation` carries ``token_ids`` and ``logprobs`` when the server
    returns them (vLLM with ``return_token_ids``; ``logprobs`` alone from most others), each
    ``None`` otherwise. They are the server's, as it sent them: when the text is cut at a stop
    string here they are left as they are (servers already stop before a stop string). What
    the log-probabilities are computed from is the server's choice too (vLLM: before the
    temperature unless it runs with ``--logprobs-mode processed_logprobs``).
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        timeout_s: float = 600.0,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_context: int | None = None,
        read_timeout_s: float | None = None,
        stream: bool = True,
    ) -> None:
        self._key = api_key()
        self.client = openai.OpenAI(
            base_url=base_url, api_key=self._key, max_retries=0, timeout=request_timeout(timeout_s, openai.Timeout)
        )
        self.timeout_s = timeout_s
        self.read_timeout_s = read_timeout(read_timeout_s, "read_timeout_s")
        self._stream = stream  # False once the server refused streaming or answered without it
        self.model = model
        self.base_url = base_url
        self.name = f"openai:{model}@{base_url}"
        self._explicit_context = max_context
        self._context: int | None = None  # resolved on check() or the first read of max_context
        self.served: ServedModel | None = None  # the server's card, once read
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._ask_tokens = True  # False once the server refused logprobs / return_token_ids
        self._token_param = "max_tokens"  # "max_completion_tokens" once the server refused max_tokens
        self._dropped: set[str] = set()  # sampling parameters the server refused
        self._lock = threading.Lock()
        self._probe_lock = threading.Lock()
        #: the endpoint's circuit breaker (:mod:`websailor.breaker`); ``None``: none (a caller
        #: that handles a dead server itself). :func:`~websailor.models.load_model` names it a
        #: judge's where the model judges.
        self.breaker: ServiceBreaker | None = ServiceBreaker("model server", base_url)

    # -- the context length and the start-up check
    @property
    def max_context(self) -> int:  # type: ignore[override]
        """The context length in tokens (see the class docstring); the first read asks the
        server (one attempt, :data:`~websailor.models.endpoint.CHECK_TIMEOUT_S`) unless :meth:`check` already did, and
        keeps the default, with a warning, when it cannot tell."""
        if self._context is None:
            with self._probe_lock:
                if self._context is None:
                    try:
                        self._apply(probe_models(self.base_url, self.model, self._key, attempts=1))
                    except ConfigError as e:
                        self._context = self._explicit_context or DEFAULT_CONTEXT
                        log.warning("%s: %s; assuming a context of %d tokens", self.name, e, self._context)
        return self._context

    @max_context.setter
    def max_context(self, value: int) -> None:
        self._explicit_context = self._context = value

    def check(self, timeout_s: float | None = None, attempts: int | None = None) -> ServedModel | None:
        """Check that the endpoint serves this model (:func:`~websailor.models.endpoint.probe_models`, by default
        :data:`CHECK_ATTEMPTS` attempts of :data:`~websailor.models.endpoint.CHECK_TIMEOUT_S` seconds) and take its context
        length; ``None`` when :data:`SKIP_CHECK_ENV` skips the check.

        Raises:
            ConfigError: the endpoint cannot serve (see :func:`~websailor.models.endpoint.probe_models`).
        """
        if skip_check():
            log.info("%s: start-up check skipped (%s)", self.name, SKIP_CHECK_ENV)
            return None
        with self._probe_lock:
            self._apply(probe_models(self.base_url, self.model, self._key, timeout_s, attempts))
        return self.served

    def _apply(self, served: ServedModel) -> None:
        self.served = served
        server, explicit = served.max_model_len, self._explicit_context
        if explicit is not None:
            if server is not None and explicit > server:
                log.warning(
                    "%s: max_context %d exceeds the server's max_model_len %d; long conversations will be "
                    "refused with a context error",
                    self.name,
                    explicit,
                    server,
                )
            self._context = explicit
        else:
            self._context = server or DEFAULT_CONTEXT
        if server is not None:
            log.info("%s: the server serves a context of %d tokens", self.name, server)

    # -- one request
    def _kwargs(self, messages: list[Message], params: SamplingParams, call: _Call) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            model=self.model, messages=[{"role": m["role"], "content": m["content"]} for m in messages]
        )
        wanted = dict(
            temperature=params.temperature,
            top_p=params.top_p,
            presence_penalty=params.presence_penalty,
            stop=params.stop[:4] or None,
            seed=params.seed,
        )
        kwargs.update({k: v for k, v in wanted.items() if v is not None and k not in self._dropped})
        kwargs[self._token_param] = call.max_tokens
        if self._ask_tokens and not call.without_tokens:
            kwargs.update(logprobs=True, extra_body={"return_token_ids": True})
        if self._stream:
            kwargs["stream"] = True
            if "stream_options" not in self._dropped:
                kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def _send(self, kwargs: dict[str, Any], seconds: float, budget: bool = False) -> Any:
        """One request of at most ``seconds``: streamed when ``kwargs`` says so, read with the
        read timeout, and put back together as a whole reply (:func:`chat_reply`). A whole reply
        to a streamed request is read as it is (and, when it is a chat completion, later
        requests go without ``stream``); a body that is no JSON comes back as its text.

        Raises:
            ModelError: ``budget`` (``seconds`` is the caller's time left, not the server's
                timeout) and the time ran out mid-reply: the caller's limit, no failure of the
                server's (its circuit breaker does not count it).
        """
        if not kwargs.get("stream"):
            client = self.client.with_options(timeout=request_timeout(seconds, openai.Timeout))
            return client.chat.completions.create(**kwargs)
        client = self.client.with_options(timeout=request_timeout(seconds, openai.Timeout, read=self.read_timeout_s))
        deadline = time.monotonic() + seconds
        try:
            with client.chat.completions.create(**kwargs) as stream:
                response = stream.response
                if not event_stream(response.headers.get("content-type")):
                    try:
                        raw = response.read()
                    except httpx2.TimeoutException as e:  # the client's own errors, as its other paths raise
                        raise openai.APITimeoutError(request=response.request) from e
                    except httpx2.TransportError as e:
                        raise openai.APIConnectionError(
                            message=f"the reply broke off: {e}", request=response.request
                        ) from e
                    return self._whole(raw, response.headers.get("content-type"))

                def late() -> openai.APITimeoutError:
                    return openai.APITimeoutError(request=response.request)

                def cut(why: str) -> openai.APIConnectionError:
                    return openai.APIConnectionError(message=why, request=response.request)

                body = response.iter_bytes  # the stream reads the body through it: the deadline holds at each read
                response.iter_bytes = lambda *a, **k: until(deadline, body(*a, **k), late)  # type: ignore[method-assign]
                reply = chat_reply(stream, self.name, cut)
                if reply is None:
                    raise cut("the stream ended without a chunk")
                return reply
        except openai.APITimeoutError as e:
            if (spent := out_of_budget(self.name, seconds, budget, deadline)) is not None:
                raise spent from e
            raise

    def _whole(self, body: bytes, content_type: str | None) -> Any:
        """A whole reply to a streamed request: a chat completion (as attributes; this server
        does not stream, so later requests go without ``stream``), or the body's text."""
        text = body.decode("utf-8", errors="replace")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return text
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            return SimpleNamespace(choices=None, usage=None)
        self._stop_streaming(f"it answered a streamed request with a whole reply ({content_type!r})")
        return _attributes(data)

    def _stop_streaming(self, why: str) -> None:
        """Ask this server for whole replies from now on (warning once)."""
        with self._lock:
            if not self._stream:
                return
            self._stream = False
        log.warning(
            "%s does not stream (%s): replies are asked whole, and a server that stops mid-reply is found "
            "after the request timeout (%g s), not the read timeout",
            self.name,
            why[:200],
            self.timeout_s,
        )

    def _one(self, messages: list[Message], params: SamplingParams) -> Generation:
        seconds, stop = self.timeout_s, stop_after_attempt(self.max_attempts)
        if params.timeout_s is not None:  # the question's remaining wall-clock budget
            budget = max(0.1, params.timeout_s)
            seconds = min(self.timeout_s, budget)
            stop = stop | stop_after_delay(budget)
        retrying = Retrying(
            stop=stop,
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.backoff_s, max=30),
            retry=retry_if_exception(_transient),
        )
        call = _Call(params.max_tokens)

        def attempt(**kwargs: Any) -> Any:  # APITimeoutError is a connection error
            failed = (openai.APIConnectionError, openai.APIStatusError)
            return through(self.breaker, lambda: self._send(kwargs, seconds, seconds < self.timeout_s), failed)

        try:
            for _ in range(_MAX_ADJUSTMENTS):
                kwargs = self._kwargs(messages, params, call)
                try:
                    resp = retrying(attempt, **kwargs)
                    break
                except openai.APIStatusError as e:
                    if e.status_code not in (400, 413, 422) or not self._adapt(e, kwargs, call):
                        raise
            else:
                raise ModelError(f"{self.name}: the server refused {_MAX_ADJUSTMENTS} versions of the request")
        except openai.OpenAIError as e:
            made = retrying.statistics.get("attempt_number", 1)
            tries = f" after {made} attempt{'s' if made != 1 else ''}" if _transient(e) else ""
            raise ModelError(f"{self.name}: {type(e).__name__}{tries}: {e}") from e
        except (ValueError, TypeError, AttributeError) as e:  # a body that is not an OpenAI-style JSON reply
            raise ModelError(
                f"{self.name}: the server's reply is not a chat completion ({type(e).__name__}: {e})"
            ) from e
        if call.without_tokens and call.refusal is not None:
            self._stop_asking(call.refusal)  # the same request without them was accepted
        if isinstance(resp, str):  # the client hands back a body that is not JSON as text
            kind = "an HTML page" if resp.lstrip()[:1] == "<" else "text that is not JSON"
            raise ModelError(
                f"{self.name}: {self.base_url.rstrip('/')}/chat/completions answered with {kind}, not a chat "
                f"completion (a proxy's error page?): {snippet(resp)!r}"
            )
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise ModelError(f"{self.name}: the server's reply is not a chat completion (no choices)")
        choice = choices[0]
        text = self._text(choice, params.stop)
        usage = getattr(resp, "usage", None)
        prompt = _count(getattr(usage, "prompt_tokens", None)) or sum(len(m["content"]) for m in messages) // 4
        completion = _count(getattr(usage, "completion_tokens", None)) or len(text) // 4
        token_ids, logprobs = self._tokens(choice)
        finish = choice.finish_reason or "stop"
        if not isinstance(finish, str):
            raise ModelError(f"{self.name}: the reply's finish_reason is not a string: {finish!r}")
        return Generation(text, prompt, completion, finish, token_ids, logprobs)

    def _adapt(self, e: openai.APIStatusError, kwargs: dict[str, Any], call: _Call) -> bool:
        """Change the request for a refusal it can be met by; ``False`` when it cannot.

        Raises:
            ContextLengthError: the conversation does not fit the context, and a completion of at
                least :data:`MIN_RETRY_TOKENS` tokens would not either (or was already tried).
        """
        message, param, code = _error_message(e), _refused_param(e), _error_body(e).get("code")
        overflow = parse_context_error(message)
        if overflow is None and code == "context_length_exceeded":  # OpenAI's code, whatever the wording
            overflow = (None, None)
        if overflow is not None:
            limit, prompt = overflow
            room = limit - prompt if limit is not None and prompt is not None else None
            if not call.shrunk and room is not None and MIN_RETRY_TOKENS <= room < call.max_tokens:
                log.info(
                    "%s: %d completion tokens do not fit the context; asking for %d", self.name, call.max_tokens, room
                )
                call.max_tokens, call.shrunk = room, True
                return True
            size = f" of {limit} tokens" if limit is not None else ""
            held = f" ({prompt} in the prompt)" if prompt is not None else ""
            raise ContextLengthError(
                f"{self.name}: the conversation does not fit the model's context{size}{held}: {message}",
                limit=limit,
                prompt_tokens=prompt,
            ) from e
        if (
            param == "max_tokens"
            and "max_tokens" in kwargs
            and (code == "unsupported_parameter" or "max_completion_tokens" in message)
        ):
            return self._learn("max_tokens", message)
        if param in DROPPABLE and param in kwargs:
            return self._learn(param, message)
        if param == "stream" and kwargs.get("stream"):
            self._stop_streaming(f"it refused stream: {message}")
            return True
        if "logprobs" not in kwargs:
            return False
        if param in _TOKEN_PARAMS:
            self._stop_asking(e)
            return True
        if call.without_tokens:
            return False
        call.without_tokens, call.refusal = True, e  # perhaps the token parameters: try without them
        return True

    def _learn(self, param: str, message: str) -> bool:
        """Remember that the server refuses ``param`` (``max_tokens``: send
        ``max_completion_tokens`` instead; a sampling parameter: leave it out), warning once."""
        with self._lock:
            if param == "max_tokens":
                first, self._token_param = self._token_param == "max_tokens", "max_completion_tokens"
                what = "the completion budget goes as max_completion_tokens"
            else:
                first = param not in self._dropped
                self._dropped.add(param)
                what = f"requests go without {param} (the server's default applies)"
        if first:
            log.warning("%s refused %s (%s); %s", self.name, param, message[:200], what)
        return True

    def _stop_asking(self, refusal: openai.APIStatusError) -> None:
        """Ask this server for logprobs and token ids no more (warning once)."""
        with self._lock:
            if not self._ask_tokens:
                return
            self._ask_tokens = False
        log.warning(
            "%s refused logprobs / return_token_ids (%s); replies will carry no token ids or log-probabilities",
            self.name,
            str(refusal)[:200],
        )

    def _text(self, choice: Any, stop: list[str]) -> str:
        """The reply as the model wrote it: the content cut at the first stop string, after the
        thought a reasoning parser split off (``reasoning`` or ``reasoning_content``)."""
        message = choice.message
        if message.content is not None and not isinstance(message.content, str):
            raise ModelError(f"{self.name}: the reply's content is a {type(message.content).__name__}, not text")
        content = message.content or ""
        content, _ = cut_at_stop(content, stop)
        reasoning = None
        for field in ("reasoning", "reasoning_content"):
            value = getattr(message, field, None)
            if value is None:
                value = (getattr(message, "model_extra", None) or {}).get(field)
            if isinstance(value, str) and value.strip():
                reasoning = value.strip()
                break
        if reasoning is None or "</think>" in content:  # no thought apart, or the content holds it already
            return content
        if not content.strip() and choice.finish_reason == "length":  # cut inside the thought
            return f"<think>\n{reasoning}"
        return f"<think>\n{reasoning}\n</think>\n\n{content.lstrip()}"

    def _tokens(self, choice: Any) -> tuple[list[int] | None, list[float] | None]:
        """The sampled token ids (vLLM's ``choice.token_ids``) and their log-probabilities
        (``choice.logprobs.content[i].logprob``) a reply carries, each ``None`` when absent.
        Raises :class:`ModelError` when they are malformed (:func:`check_tokens`)."""
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        logprobs = content
        if isinstance(content, list):
            logprobs = [e.get("logprob") if isinstance(e, dict) else getattr(e, "logprob", None) for e in content]
        return check_tokens(getattr(choice, "token_ids", None), logprobs, self.name)

    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        return [self._one(c, params) for c in conversations]

    def close(self) -> None:
        self.client.close()
