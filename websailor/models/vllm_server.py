"""A vLLM server as a token-exact rollout engine: the ``vllm:NAME@URL`` backend.

The agent's conversation is turned into prompt token ids here, by the model's own chat
template split into per-turn pieces (:class:`~websailor.models.turns.TurnTemplate`), and sent
to vLLM's OpenAI-compatible ``POST /v1/completions`` as a list of ids, with
``"return_token_ids": true`` and ``"logprobs": 0``. So the server continues from exactly the
ids that earlier turns sampled (its prefix cache reuses them), and every reply comes back as
the sampled ids and their log-probabilities (streamed, and put back together here:
a server that stops mid-reply is found after the read timeout, :mod:`websailor.models.streaming`):
the same token protocol as the local engine
(:class:`~websailor.models.engine.KVEngine`), the one RL trains on (docs/rl.md, "Exact
tokens"). Chat completions (``openai:``) cannot give that: the server re-renders earlier turns
from their text.

vLLM stops at a stop string but returns the stop string's tokens among the ids: they are cut
here as the local engine cuts them (:func:`~websailor.models.base.ids_before_stop`). The
template's end-of-turn tokens are sent as ``stop_token_ids`` and kept at the end of a reply.

The log-probabilities are what the server computes: after the temperature when it runs with
``--logprobs-mode processed_logprobs`` (``websailor serve model`` starts it so), before it
otherwise. No per-request ``seed`` is sent: vLLM's CPU build crashed a batch of 32 requests
with seeds (``CPU Generator does not use offset``).

The tokenizer comes from the model directory the server loaded (``root`` of its ``GET
/v1/models`` card) when that directory is readable here, else from ``NAME`` read as a model
spec (``smollm2``, ``hf:DIR`` or a directory).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential_jitter

from websailor.breaker import ServiceBreaker, through
from websailor.errors import ConfigError, ModelError
from websailor.log import get_logger
from websailor.models.base import (
    ChatModel,
    Generation,
    Message,
    SamplingParams,
    check_tokens,
    decode_reply,
    ids_before_stop,
)
from websailor.models.endpoint import api_key, probe_models, skip_check
from websailor.models.streaming import (
    completion_reply,
    event_stream,
    out_of_budget,
    read_timeout,
    request_timeout,
    sse_data,
    until,
)
from websailor.models.turns import TurnTemplate

log = get_logger(__name__)

#: the spec prefix of this backend
PREFIX = "vllm:"


def parse_spec(spec: str) -> tuple[str, str]:
    """``(served model name, base URL)`` of a ``vllm:NAME@http(s)://HOST:PORT/v1`` spec.

    Raises:
        ConfigError: another form.
    """
    name, sep, base_url = spec.strip()[len(PREFIX) :].rpartition("@")
    if not spec.strip().startswith(PREFIX) or not sep or not name or not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"model spec {spec!r}: expected vllm:NAME@http(s)://HOST:PORT/v1 (websailor serve model prints it)"
        )
    from websailor.models import check_base_url

    check_base_url(spec, base_url)
    return name, base_url.rstrip("/")


def server_root(base_url: str) -> str:
    """The server's root URL (``http://HOST:PORT``) of an OpenAI base URL ending in ``/v1``."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, httpx.TransportError):
        return True
    return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code >= 500


def _tokenizer_dir(name: str, root: str | None) -> Path:
    """The directory to read the served model's tokenizer from.

    Raises:
        ConfigError: neither the server's model directory nor ``name`` is a readable model
            directory here.
    """
    from websailor.models import local_model_dir

    if root and (Path(root) / "config.json").is_file():
        return Path(root)
    try:
        path = local_model_dir(name) or local_model_dir(f"hf:{name}")
    except ConfigError:
        path = None
    if path is None:
        raise ConfigError(
            f"vllm:{name}: the server's model directory ({root or 'not stated'}) is not readable here and {name!r} "
            "is no model directory either: serve the model under the name of a local copy of its tokenizer "
            "(--served-model-name DIR), or run where the server's files are"
        )
    return path


class VLLMServerModel(ChatModel):
    """Chat backend over a vLLM server's token-id completions (see the module docstring).

    Args:
        model: the served model name (``--served-model-name``).
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        timeout_s: per-request timeout in seconds (the whole reply).
        read_timeout_s: the longest silence in seconds while a reply streams in
            (:func:`~websailor.models.streaming.read_timeout`; default
            :data:`~websailor.models.streaming.READ_TIMEOUT_S` or ``$WEBSAILOR_READ_TIMEOUT``):
            completions are streamed, so a server that stops mid-reply is found after it.
        max_attempts: tries per call for transient failures (connection refused or reset,
            HTTP 5xx, timeouts); a server that stays down ends the call with :class:`ModelError`,
            or, with a circuit breaker (:attr:`breaker`), with
            :class:`~websailor.errors.ServiceDown`: the defaults (5 tries, back-offs of 1, 2, 4
            and 8 s) reach the breaker's default threshold and window in one call, so a dead
            server alone is declared down (exit 4) instead of ending a rollout in a model error.
        backoff_s: first back-off in seconds (doubles, with jitter, up to 10 s).
        tokenizer_dir: where to read the tokenizer (default: see the module docstring).
        label: how records name the model (``name``; default the spec ``vllm:MODEL@URL``). A
            server a job started for itself is labelled with the job's own spec, so records
            do not depend on its port (:mod:`websailor.models.serving`).

    Raises:
        ConfigError: (on :meth:`check`, and on the first request) the server does not serve
            ``model``, or its tokenizer cannot be found, or its chat template cannot be split
            into per-turn pieces.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        timeout_s: float = 600.0,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        tokenizer_dir: str | Path | None = None,
        label: str | None = None,
        read_timeout_s: float | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        #: the spec of the server, named in errors
        self.where = f"vllm:{model}@{self.base_url}"
        self.name = label or self.where
        self.timeout_s = timeout_s
        self.read_timeout_s = read_timeout(read_timeout_s, "read_timeout_s")
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._tokenizer_dir = Path(tokenizer_dir) if tokenizer_dir else None
        self._headers = {"Authorization": f"Bearer {api_key()}"}
        self._http = httpx.Client(timeout=request_timeout(timeout_s), limits=httpx.Limits(max_connections=256))
        self._turns: TurnTemplate | None = None
        self._context: int | None = None
        self._lock = threading.Lock()
        #: the server's circuit breaker (:mod:`websailor.breaker`): every request attempt
        #: reports to it, and once the server is declared down a call raises
        #: :class:`~websailor.errors.ServiceDown`; ``None`` for a caller that handles a dead
        #: server itself (the RL rollout pool, with its ``on_server_loss``)
        self.breaker: ServiceBreaker | None = ServiceBreaker("model server", self.base_url)

    # -- set-up --------------------------------------------------------------------------
    def check(self) -> None:
        """Check that the server serves the model, read its context length and load the
        tokenizer (once).

        Raises:
            ConfigError: as :func:`~websailor.models.endpoint.probe_models`, or no
                tokenizer, or a template that cannot be split.
        """
        with self._lock:
            if self._turns is not None:
                return
            root = None
            if not skip_check():
                served = probe_models(self.base_url, self.model, api_key(), prefix="vllm")
                self._context, root = served.max_model_len, served.root
            from websailor.models.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(self._tokenizer_dir or _tokenizer_dir(self.model, root))
            self._turns = TurnTemplate(tokenizer, self.name)
            if self._context is None:  # a server that states none: the tokenizer's, at most 131,072
                self._context = min(int(getattr(tokenizer, "model_max_length", 0) or 0) or 131072, 131072)

    @property
    def turns(self) -> TurnTemplate:
        """The served model's chat template in per-turn pieces (loaded on first use)."""
        if self._turns is None:
            self.check()
        return self._turns  # type: ignore[return-value]

    @property
    def tokenizer(self) -> Any:
        return self.turns.tokenizer

    @property
    def max_context(self) -> int:  # type: ignore[override]
        """The server's ``max_model_len`` in tokens."""
        if self._context is None:
            self.check()
        return int(self._context or 131072)

    @max_context.setter
    def max_context(self, value: int) -> None:
        self._context = value

    @property
    def turn_tokens(self) -> int:  # type: ignore[override]
        """A turn's default completion budget: :func:`~websailor.models.hf.turn_budget` of the
        served context (256 tokens for the embedded model's 8,192)."""
        from websailor.models.hf import turn_budget

        return turn_budget(self.max_context)

    # -- generation ----------------------------------------------------------------------
    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The ids generation continues from (earlier turns as their sampled ids)."""
        return self.turns.prompt_ids(messages)

    def count_tokens(self, messages: list[Message]) -> int:
        return len(self.prompt_ids(messages))

    def _post(self, body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        stop = stop_after_attempt(self.max_attempts)
        timeout = self.timeout_s
        if timeout_s is not None:
            timeout = min(timeout, max(0.1, timeout_s))
            stop = stop | stop_after_delay(max(0.1, timeout_s))
        retrying = Retrying(
            stop=stop,
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.backoff_s, max=10),
            retry=retry_if_exception(_transient),
        )

        def once() -> dict[str, Any]:
            budget = timeout < self.timeout_s  # the question's time left, not the server's timeout
            answer = through(self.breaker, lambda: self._send(body, timeout, budget), (httpx.TransportError,))
            if isinstance(answer, httpx.Response):
                answer.raise_for_status()
                return answer.json()
            return answer

        try:
            return retrying(once)
        except httpx.HTTPStatusError as e:
            detail = e.response.text[:300]
            raise ModelError(f"{self.where}: HTTP {e.response.status_code} from /v1/completions: {detail}") from e
        except httpx.TransportError as e:
            raise ModelError(
                f"{self.where}: the server does not answer after {self.max_attempts} attempts "
                f"({type(e).__name__}: {e}); is it still running?"
            ) from e
        except httpx.DecodingError as e:  # a Content-Encoding the body does not have
            raise ModelError(f"{self.where}: the reply of /v1/completions does not decode ({e})") from e
        except ValueError as e:
            raise ModelError(f"{self.where}: the reply of /v1/completions is not JSON ({e})") from e

    def _send(self, body: dict[str, Any], seconds: float, budget: bool = False) -> httpx.Response | dict[str, Any]:
        """One streamed request of at most ``seconds`` (each read at most the read timeout): the
        reply put back together (:func:`~websailor.models.streaming.completion_reply`), or the
        read :class:`httpx.Response` of a refusal or of a reply that was not streamed.

        Raises:
            httpx.TimeoutException: the read timeout passed with no byte, or the reply went on
                past ``seconds``.
            ModelError: ``budget`` (``seconds`` is the caller's time left) and it ran out
                mid-reply: the caller's limit, which the server's circuit breaker does not count.
            httpx.TransportError: the connection failed or broke.
        """
        url = f"{self.base_url}/completions"
        deadline = time.monotonic() + seconds
        timeout = request_timeout(seconds, read=self.read_timeout_s)
        with self._http.stream("POST", url, json=body | {"stream": True}, headers=self._headers, timeout=timeout) as r:
            if r.status_code >= 400 or not event_stream(r.headers.get("content-type")):
                r.read()
                return r

            def late() -> httpx.TimeoutException:
                return httpx.ReadTimeout(
                    f"the reply went on past the request timeout of {seconds:g} s", request=r.request
                )

            def cut(why: str) -> httpx.TransportError:
                return httpx.RemoteProtocolError(why, request=r.request)

            try:
                return completion_reply(sse_data(until(deadline, r.iter_bytes(), late)), self.where, cut)
            except httpx.TimeoutException as e:
                if (spent := out_of_budget(self.where, seconds, budget, deadline)) is not None:
                    raise spent from e
                raise

    def _one(self, messages: list[Message], params: SamplingParams) -> Generation:
        turns = self.turns
        try:
            prompt = turns.prompt_ids(messages)
        except ValueError as e:
            raise ModelError(f"{self.where}: {e}") from e
        room = self.max_context - len(prompt)
        if room <= 0:
            return Generation("", len(prompt), 0, "length", [], [])
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": min(params.max_tokens, room),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "presence_penalty": params.presence_penalty,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": True,
            "stop_token_ids": sorted(turns.eos_ids),
        }
        if params.stop:
            body["stop"] = list(params.stop)
        reply = self._post(body, params.timeout_s)
        try:
            choice = reply["choices"][0]
            ids, logprobs = choice["token_ids"], choice["logprobs"]["token_logprobs"]
        except (KeyError, IndexError, TypeError) as e:
            raise ModelError(
                f"{self.where}: the reply carries no token_ids or logprobs ({type(e).__name__}: {e}); "
                "is it a vLLM server of a version that supports return_token_ids?"
            ) from e
        ids, logprobs = check_tokens(ids, logprobs, self.where)
        if ids is None or logprobs is None:
            raise ModelError(f"{self.where}: the reply carries no token_ids or logprobs")
        if len(ids) > body["max_tokens"]:
            raise ModelError(
                f"{self.where}: the reply has {len(ids)} token ids, more than max_tokens {body['max_tokens']}"
            )
        past = next((i for i in ids if i >= turns.vocab_size), None)
        if past is not None:  # it would decode to nothing here, and no later turn or update could use it
            raise ModelError(
                f"{self.where}: the reply's token id {past} is past the model's vocabulary ({turns.vocab_size} "
                "ids): does the server serve the model whose tokenizer this is?"
            )
        finish = choice.get("finish_reason") or "stop"
        text = None
        try:
            if isinstance(choice.get("stop_reason"), str):  # stopped at a stop string: its tokens are among the ids
                k, text = ids_before_stop(turns.tokenizer, ids, params.stop)
                ids, logprobs = ids[:k], logprobs[:k]
            if text is None:
                body_ids = ids[:-1] if ids and ids[-1] in turns.eos_ids else ids
                text = decode_reply(turns.tokenizer, body_ids, cut=finish == "length")
        except (OverflowError, IndexError, ValueError, TypeError) as e:  # ids the tokenizer does not have
            raise ModelError(f"{self.where}: the reply's token ids do not decode ({type(e).__name__}: {e})") from e
        return Generation(text, len(prompt), len(ids), finish, ids, logprobs)

    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        """Reply to each conversation (one request each; the server batches concurrent ones).

        Raises:
            ModelError: the server refused a request, or stayed unreachable through the retries.
        """
        return [self._one(c, params) for c in conversations]

    def close(self) -> None:
        self._http.close()
