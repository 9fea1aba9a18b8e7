"""Any OpenAI-compatible chat server (vLLM, SGLang, llama.cpp server, hosted APIs).

Transient failures (connection refused or reset, timeouts, HTTP 429 and 5xx) are retried
with exponential back-off and jitter (tenacity); after the retries, or on a permanent error
(4xx), :class:`ModelError` is raised and the trajectory ends with ``model_error``.
"""

from __future__ import annotations

import os

import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential_jitter

from websailor.errors import ModelError
from websailor.models.base import ChatModel, Generation, Message, SamplingParams, cut_at_stop

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

    def _one(self, messages: list[Message], params: SamplingParams) -> Generation:
        kwargs = dict(
            model=self.model,
            messages=messages,
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
        try:
            resp = retrying(client.chat.completions.create, **kwargs)
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
        return Generation(text, prompt, completion, choice.finish_reason or "stop")

    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        return [self._one(c, params) for c in conversations]

    def close(self) -> None:
        self.client.close()
