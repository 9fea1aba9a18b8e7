"""An OpenAI-compatible endpoint before any request: its API key and the start-up check that
it serves the model (``GET {base_url}/models``), shared by the ``openai:`` and ``vllm:``
backends and the RL weight sync.

A dead endpoint is refused in seconds, naming what is wrong (nothing listens, something
listens but does not answer, an HTML page, another model) instead of failing each rollout;
:data:`SKIP_CHECK_ENV` skips the check for a server without ``/models``.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

import httpx

from websailor.errors import ConfigError

#: Environment variables read for the API key, in order.
API_KEY_ENV = ("WEBSAILOR_API_KEY", "OPENAI_API_KEY")
#: Set to 1 to skip the start-up check of model endpoints (a server without ``/models``).
SKIP_CHECK_ENV = "WEBSAILOR_SKIP_MODEL_CHECK"
#: Seconds per attempt, and attempts (for a failed connection; a timeout is final), of the
#: start-up check of an endpoint.
CHECK_TIMEOUT_S = 5.0
CHECK_ATTEMPTS = 2


def api_key() -> str:
    """The API key of :data:`API_KEY_ENV`, or ``"EMPTY"`` (what vLLM without ``--api-key`` takes)."""
    return next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), "EMPTY")


@dataclass(frozen=True)
class ServedModel:
    """A model of a server's ``GET /models`` list: its ``id`` and, when the server states
    them (vLLM does), its context length in tokens (``max_model_len``) and the directory it
    loaded the model from (``root``)."""

    id: str
    max_model_len: int | None = None
    root: str | None = None


def _causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def snippet(text: str, n: int = 120) -> str:
    """The start of a body as one line, tags dropped."""
    return " ".join(re.sub(r"<[^>]*>", " ", text).split())[:n]


def _unreachable(url: str, exc: BaseException, timeout_s: float, attempts: int) -> str:
    tries = f"{attempts} attempt{'s' if attempts > 1 else ''}"
    if isinstance(exc, httpx.ConnectTimeout):
        return (
            f"no connection to {url} within {timeout_s:g} s ({tries}): the host does not answer "
            "(down, firewalled or a wrong address)"
        )
    if isinstance(exc, httpx.TimeoutException):
        return (
            f"something listens at {url} but does not answer (timed out after {timeout_s:g} s, {tries}): "
            "is it the model server, and is it stuck?"
        )
    causes = _causes(exc)
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or "refused" in str(exc).lower():
        return f"nothing listens at {url} (connection refused, {tries}): is the model server running on that port?"
    if any(type(c).__name__ == "gaierror" for c in causes) or "name or service not known" in str(exc).lower():
        return f"cannot resolve the host of {url} ({exc}): check the model URL"
    return f"cannot reach {url} ({type(exc).__name__}: {exc}, {tries})"


def probe_models(
    base_url: str,
    model: str,
    key: str | None = None,
    timeout_s: float | None = None,
    attempts: int | None = None,
    prefix: str = "openai",
    skippable: bool = True,
) -> ServedModel:
    """Ask ``GET {base_url}/models`` whether the server serves ``model`` (``prefix``: the spec
    form the message suggests, ``openai`` or ``vllm``; ``skippable``: whether the messages may
    suggest :data:`SKIP_CHECK_ENV`, false where nothing skips the check, as the weight sync's).

    The request waits at most ``timeout_s`` seconds (default :data:`CHECK_TIMEOUT_S`); a failed
    connection (refused, reset: a server restarting) is tried again, up to ``attempts`` in all
    (default :data:`CHECK_ATTEMPTS`), half a second apart; a timeout is not (it would only
    double the wait); an answer is final.

    Returns:
        The served model's card.

    Raises:
        ConfigError: one line naming the URL: nothing listens there, it accepts connections but
            does not answer, it refused the API key (HTTP 401/403), it answers but not as an
            OpenAI-compatible server (HTML, not JSON, no ``data`` list, another status), or it
            does not serve ``model`` (the message lists what it serves).
    """
    timeout_s = CHECK_TIMEOUT_S if timeout_s is None else timeout_s
    attempts = CHECK_ATTEMPTS if attempts is None else max(1, attempts)
    url = base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    resp = None
    for attempt in range(1, attempts + 1):
        try:
            resp = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=True)
            break
        except httpx.TransportError as e:  # connection refused or reset, DNS, timeouts
            if attempt >= attempts or isinstance(e, httpx.TimeoutException):  # waiting again would double the wait
                raise ConfigError(_unreachable(url, e, timeout_s, attempt)) from None
            time.sleep(0.5)
    assert resp is not None
    skip = f"set {SKIP_CHECK_ENV}=1 to skip this check" if skippable else "the weight sync needs this check"
    if resp.status_code in (401, 403):
        given = "no API key is set" if key in (None, "", "EMPTY") else "the API key was refused"
        raise ConfigError(
            f"{url} answers HTTP {resp.status_code}: {given}; set {' or '.join(API_KEY_ENV)} to a key this server accepts"
        )
    if resp.status_code >= 500:
        raise ConfigError(
            f"{url} answers HTTP {resp.status_code} ({snippet(resp.text)!r}): the server is failing or still "
            "starting; try again shortly"
        )
    if resp.status_code != 200:
        raise ConfigError(
            f"{url} answers HTTP {resp.status_code}, not an OpenAI-compatible model list ({snippet(resp.text)!r}): "
            f"is the base URL right (it usually ends in /v1)? ({skip})"
        )
    try:
        listing = resp.json()
    except ValueError:
        kind = "an HTML page" if resp.text.lstrip()[:1] == "<" else "a body that is not JSON"
        raise ConfigError(
            f"{url} answers, but not as an OpenAI-compatible server: {kind} ({snippet(resp.text)!r}) ({skip})"
        ) from None
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        raise ConfigError(
            f"{url} answers JSON, but not as an OpenAI-compatible server: no `data` list of models ({skip})"
        )
    served = [c for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)]
    card = next((c for c in served if c["id"] == model), None)
    if card is None:
        names = [c["id"] for c in served]
        listed = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        raise ConfigError(
            f"the server at {base_url} does not serve model {model!r} (it serves: {listed or 'nothing'}); "
            f"use one of those names in {prefix}:{'NAME' if prefix == 'vllm' else 'MODEL'}@{base_url} ({skip})"
        )
    length = card.get("max_model_len")
    valid = isinstance(length, int) and not isinstance(length, bool) and length > 0
    root = card.get("root")
    return ServedModel(model, length if valid else None, root if isinstance(root, str) else None)


def skip_check() -> bool:
    """Whether :data:`SKIP_CHECK_ENV` asks to skip the start-up check."""
    return os.environ.get(SKIP_CHECK_ENV, "").strip().lower() in ("1", "true", "yes")
