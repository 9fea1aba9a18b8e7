"""Any OpenAI-compatible chat server (vLLM, SGLang, llama.cpp server, hosted APIs).

Transient failures (connection refused or reset, timeouts, HTTP 429 and 5xx) are retried
with exponential back-off and jitter (tenacity); after the retries, or on a permanent error
(4xx), :class:`ModelError` is raised and the trajectory ends with ``model_error``.

Each request asks for the sampled tokens' log-probabilities (``logprobs``, standard) and
their ids (``return_token_ids``, a vLLM extension). On HTTP 400 the request is sent once more
without them: when that one is accepted, the server refused them and is not asked for them
again by this model (one warning); when it fails too, its error is raised as above.
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential_jitter

from websailor.errors import ModelError
from websailor.log import get_logger
from websailor.models.base import ChatModel, Generation, Message, SamplingParams, cut_at_stop

log = get_logger(__name__)

#: Environment variables read for the API key, in order.
API_KEY_ENV = ("WEBSAILOR_API_KEY", "OPENAI_API_KEY")


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


class OpenAIModel(ChatModel):
    """Chat completions over HTTP.

    Args:
        model: the served model name.
        base_url: e.g. ``http://localhost:8000/v1``.
        timeout_s: per-request timeout.
        max_attempts: tries per call for transient failures.
        backoff_s: first back-off (doubles, with jitter, up to 30 s).
        max_context: the served context length in tokens.

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
        max_context: int = 131072,
    ) -> None:
        key = next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), "EMPTY")
        self.client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=timeout_s)
        self.timeout_s = timeout_s
        self.model = model
        self.base_url = base_url
        self.name = f"openai:{model}@{base_url}"
        self.max_context = max_context
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self._ask_tokens = True  # False once the server refused logprobs / return_token_ids
        self._lock = threading.Lock()

    def _one(self, messages: list[Message], params: SamplingParams) -> Generation:
        kwargs = dict(
            model=self.model,
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],
            temperature=params.temperature,
            top_p=params.top_p,
            presence_penalty=params.presence_penalty,
            max_tokens=params.max_tokens,
            stop=params.stop[:4] or None,
        )
        if params.seed is not None:
            kwargs["seed"] = params.seed
        client, stop = self.client, stop_after_attempt(self.max_attempts)
        if params.timeout_s is not None:  # the question's remaining wall-clock budget
            budget = max(0.1, params.timeout_s)
            client = client.with_options(timeout=min(self.timeout_s, budget))
            stop = stop | stop_after_delay(budget)
        retrying = Retrying(
            stop=stop,
            reraise=True,
            wait=wait_exponential_jitter(multiplier=self.backoff_s, max=30),
            retry=retry_if_exception(_transient),
        )
        asked = self._ask_tokens
        if asked:
            kwargs.update(logprobs=True, extra_body={"return_token_ids": True})
        try:
            try:
                resp = retrying(client.chat.completions.create, **kwargs)
            except openai.BadRequestError as e:
                if not asked:
                    raise
                del kwargs["logprobs"], kwargs["extra_body"]
                resp = retrying(client.chat.completions.create, **kwargs)
                self._stop_asking(e)  # the same request without them was accepted
        except openai.OpenAIError as e:
            tries = f" after {self.max_attempts} attempts" if _transient(e) else ""
            raise ModelError(f"{self.name}: {type(e).__name__}{tries}: {e}") from e
        except (ValueError, TypeError, AttributeError) as e:  # a body that is not an OpenAI-style JSON reply
            raise ModelError(
                f"{self.name}: the server's reply is not a chat completion ({type(e).__name__}: {e})"
            ) from e
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise ModelError(f"{self.name}: the server's reply is not a chat completion (no choices)")
        choice = choices[0]
        text, _ = cut_at_stop(choice.message.content or "", params.stop)
        usage = resp.usage
        prompt = usage.prompt_tokens if usage and usage.prompt_tokens else sum(len(m["content"]) for m in messages) // 4
        completion = usage.completion_tokens if usage and usage.completion_tokens else len(text) // 4
        token_ids, logprobs = self._tokens(choice)
        return Generation(text, prompt, completion, choice.finish_reason or "stop", token_ids, logprobs)

    def _stop_asking(self, refusal: openai.BadRequestError) -> None:
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

    def _tokens(self, choice: Any) -> tuple[list[int] | None, list[float] | None]:
        """The sampled token ids (vLLM's ``choice.token_ids``) and their log-probabilities
        (``choice.logprobs.content[i].logprob``) a reply carries, each ``None`` when absent.
        Raises :class:`ModelError` when they are malformed."""
        ids = getattr(choice, "token_ids", None)
        if ids is not None and not (
            isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
        ):
            raise ModelError(f"{self.name}: the reply's token_ids are not a list of non-negative integers")
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        logprobs = None
        if content is not None:
            if not isinstance(content, list):
                raise ModelError(f"{self.name}: the reply's logprobs.content is not a list")
            logprobs = [e.get("logprob") if isinstance(e, dict) else getattr(e, "logprob", None) for e in content]
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in logprobs):
                raise ModelError(f"{self.name}: the reply's logprobs are not all finite numbers")
            logprobs = [float(x) for x in logprobs]
        if ids is not None and logprobs is not None and len(ids) != len(logprobs):
            raise ModelError(f"{self.name}: the reply has {len(ids)} token ids but {len(logprobs)} logprobs")
        return ids, logprobs

    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        return [self._one(c, params) for c in conversations]

    def close(self) -> None:
        self.client.close()
