"""The tool execution layer of the real-web environment (WebSailor-V2, arXiv 2509.13305,
section on the agentic RL infrastructure: one layer that schedules, caches, retries, fails over
and degrades gracefully, so that flaky APIs do not corrupt rollouts).

Every provider operation (one search query, one page fetch) goes through
:meth:`ToolExecutor.call`:

1. the SQLite result cache, keyed by the tool and its normalized arguments;
2. per-tool limits: at most ``concurrency`` operations in flight and ``qps`` starts a second
   (aiolimiter);
3. each provider in order, skipping one whose circuit breaker is open; each attempt has a
   timeout; retryable failures (timeouts, HTTP 429 honouring ``Retry-After``, 5xx, dropped
   connections, truncated or unparsable bodies) are retried with exponential back-off and
   jitter (tenacity); a provider that still fails hands over to the next one (failover);
4. when every provider failed, an :class:`Outcome` that says why, provider by provider
   (:class:`Failure`), and whether the environment is to blame (:attr:`Outcome.env_failure`);
   the tools turn it into an observation for the model (graceful degradation), never an
   exception.

A provider that says it cannot serve at all (out of credit, a refused key, a feature the
instance does not enable: kind ``unusable``) is skipped for the rest of the run, with one
warning.

The executor runs its own asyncio loop in a background thread, so the agent's rollout threads
(and a tool server's worker threads) call it synchronously and share its limits, breakers and
HTTP connection pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import email.utils
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from aiolimiter import AsyncLimiter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from websailor.log import get_logger
from websailor.tools.documents.charset import charset_of, decode_text
from websailor.tools.metrics import ToolMetrics
from websailor.tools.web.cache import ResultCache, cache_key

logger = get_logger(__name__)

#: Failure kinds worth another attempt at the same provider.
RETRYABLE = frozenset({"timeout", "rate_limited", "server_error", "connection", "truncated", "bad_response"})
#: The provider cannot serve for the rest of the run (out of credit, a refused key, the JSON
#: format turned off): not retried, and the executor skips the provider from then on.
UNUSABLE = "unusable"
#: The provider answered, but every engine behind it failed (SearXNG's ``unresponsive_engines``).
UPSTREAM_UNAVAILABLE = "upstream_unavailable"
#: The provider was skipped because its circuit breaker is open.
CIRCUIT_OPEN = "circuit_open"
#: The executor was closed while the operation was in flight.
CANCELLED = "cancelled"
#: The reader service fetched the target, and the target answered an error (Jina Reader's
#: ``Warning: Target URL returned error 404``): the target's failure, not the reader's.
TARGET_ERROR = "target_error"
#: Failure kinds that say the provider itself (or the environment around it) is unwell: they
#: count towards its circuit breaker and, from a provider that is not per-target, make a failed
#: operation an environment failure (:attr:`Outcome.env_failure`).
PROVIDER_FAULTS = RETRYABLE | {"auth", "provider_error", UNUSABLE, UPSTREAM_UNAVAILABLE, CIRCUIT_OPEN, CANCELLED}
#: Failure kinds that say the target the model chose cannot be read (a dead link, a refused or
#: private address, a redirect loop, an empty, unparsable or too large document): never an
#: environment failure.
TARGET_FAILURES = frozenset(
    {"client_error", "redirect_loop", "empty", "too_large", "blocked", "unparsable", TARGET_ERROR}
)


class ProviderFailure(Exception):
    """One failed attempt at a provider.

    Attributes:
        kind: ``timeout``, ``rate_limited``, ``server_error``, ``connection``, ``truncated``,
            ``bad_response`` (retryable), or ``auth``, ``unusable`` (the provider cannot serve
            for the rest of the run), ``upstream_unavailable`` (the provider's own engines all
            failed), ``client_error``, ``target_error`` (the reader's target answered an
            error), ``redirect_loop``, ``empty``, ``too_large``, ``blocked`` (a private
            address), ``unparsable``, ``provider_error`` (the provider's code raised) (not).
        detail: what happened, for the observation and the log.
        retry_after: seconds the provider asked to wait (HTTP ``Retry-After``), if any.
        status: the HTTP status of an error answer, if the failure is one.
        message: the start of an error answer's body (at most 2,000 characters), for
            providers that read the reason from it (Serper's ``"Not enough credits"``).
    """

    def __init__(
        self, kind: str, detail: str, retry_after: float | None = None, status: int | None = None, message: str = ""
    ) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.retry_after = retry_after
        self.status = status
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


@dataclass(frozen=True)
class ToolPolicy:
    """Limits and resilience settings of one tool's provider operations.

    Attributes:
        concurrency: operations in flight at once (across every thread of the process).
        qps: operations started per second (0: unlimited).
        timeout_s: limit of one attempt, body included (seconds).
        retries: further attempts at the same provider after a retryable failure.
        backoff_s, backoff_max_s: exponential back-off ``backoff_s * 2**n`` plus up to
            ``backoff_s`` of jitter, capped at ``backoff_max_s`` (seconds).
        retry_after_max_s: longest ``Retry-After`` honoured (longer requests are capped).
        cache_ttl_s: how long a result stays in the cache (0: not cached).
        breaker_failures: failed operations in a row that open a provider's circuit.
        breaker_reset_s: how long an open circuit skips the provider before one trial call.
        max_bytes: largest response body read; longer ones are cut (and marked truncated).
    """

    concurrency: int = 16
    qps: float = 20.0
    timeout_s: float = 30.0
    retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    retry_after_max_s: float = 30.0
    cache_ttl_s: float = 7 * 86400.0
    breaker_failures: int = 5
    breaker_reset_s: float = 30.0
    max_bytes: int = 10_000_000


class Provider(Protocol):
    """One back end of a tool (Serper, SearXNG, the Jina Reader, a direct fetch).

    ``await provider(client, request, policy)`` returns a result or raises
    :class:`ProviderFailure` (any other exception is classified by the executor). Optional
    class attributes: ``cacheable`` (default true: the result is JSON-serializable and may be
    cached) and ``per_target`` (default false; true for a direct fetch, whose failures belong to
    each target site, so it has no circuit breaker).
    """

    name: str

    def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Awaitable[Any]: ...


@dataclass
class HttpReply:
    """A response read with a size cap: ``body`` holds at most ``max_bytes`` bytes."""

    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool
    url: str

    def text(self) -> str:
        """The body as text (:func:`~websailor.tools.documents.charset.decode_text`: a byte-order mark,
        valid UTF-8, the declared charset, a detected CJK encoding, else Windows-1252)."""
        return decode_text(self.body, charset_of(self.headers.get("content-type")))

    def json(self) -> Any:
        """The body as JSON.

        Raises:
            ProviderFailure: ``truncated`` when the body was cut, ``bad_response`` when it is
                not JSON.
        """
        import json

        if self.truncated:
            raise ProviderFailure("truncated", f"JSON body longer than the {len(self.body)}-byte limit")
        try:
            return json.loads(self.text())  # JSON is UTF-8, but a BOM or Latin-1 bytes are read too
        except (ValueError, RecursionError) as e:
            raise ProviderFailure("bad_response", f"invalid JSON ({str(e)[:80]})") from None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; ``None`` if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


#: Most bytes of an error answer read for its reason (Serper and Jina say it in the body).
ERROR_BODY_BYTES = 4096


async def _error_message(resp: httpx.Response) -> str:
    """The start of an error answer's body as text (at most :data:`ERROR_BODY_BYTES`); empty
    when it cannot be read."""
    body = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass
    return decode_text(bytes(body[:ERROR_BODY_BYTES]), charset_of(resp.headers.get("content-type")))[:2000]


async def http_request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    max_bytes: int,
    check_peer: Callable[[tuple | None], None] | None = None,
    target: bool = False,
    **kwargs: Any,
) -> HttpReply:
    """Send one request and read at most ``max_bytes`` of the body. ``check_peer``, if given,
    sees the server's ``(address, port)`` before the body is read, and may raise
    :class:`ProviderFailure` to refuse it. ``target``: the URL is a page the agent asked for
    (a direct fetch), so 401, 402 and 403 are the site refusing access (``client_error``), not
    a provider's key.

    Error answers carry their status and the start of their body
    (:attr:`ProviderFailure.status`, :attr:`ProviderFailure.message`), so that a provider can
    read the reason and classify it again.

    Raises:
        ProviderFailure: ``rate_limited`` (429, with ``Retry-After``), ``server_error`` (5xx),
            ``auth`` (401, 403), ``client_error`` (other 4xx), ``redirect_loop`` (too many
            redirects), ``timeout``, ``truncated`` (the connection closed mid-body),
            ``connection`` (any other transport error).
    """
    try:
        async with client.stream(method, url, **kwargs) as resp:
            if check_peer is not None:
                stream = resp.extensions.get("network_stream")
                check_peer(stream.get_extra_info("server_addr") if stream is not None else None)
            code = resp.status_code
            if code >= 400:
                message = await _error_message(resp)
                if code == 429:
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                    raise ProviderFailure("rate_limited", "HTTP 429", retry_after, code, message)
                if code >= 500:
                    raise ProviderFailure("server_error", f"HTTP {code}", status=code, message=message)
                if code in (401, 402, 403) and target:
                    raise ProviderFailure(
                        "client_error", f"HTTP {code} (the site refuses access)", status=code, message=message
                    )
                if code in (401, 403):
                    raise ProviderFailure("auth", f"HTTP {code} (check the API key)", status=code, message=message)
                gone = " (not found)" if code in (404, 410) else ""
                raise ProviderFailure("client_error", f"HTTP {code}{gone}", status=code, message=message)
            body = bytearray()
            truncated = False
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    del body[max_bytes:]
                    truncated = True
                    break
            return HttpReply(code, resp.headers, bytes(body), truncated, str(resp.url))
    except httpx.TooManyRedirects:
        raise ProviderFailure("redirect_loop", "too many redirects") from None
    except httpx.TimeoutException as e:
        raise ProviderFailure("timeout", type(e).__name__) from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        raise ProviderFailure("truncated", f"connection closed mid-response ({type(e).__name__})") from None
    except httpx.HTTPError as e:
        raise ProviderFailure("connection", f"{type(e).__name__}: {str(e)[:120]}") from None


class CircuitBreaker:
    """Closed, open or half-open state of one provider of one tool.

    After ``failures`` failed operations in a row the circuit opens: the provider is skipped for
    ``reset_s`` seconds, then one trial operation is let through (half-open); its success closes
    the circuit, its failure opens it again.
    """

    def __init__(self, failures: int, reset_s: float) -> None:
        self.threshold = max(1, failures)
        self.reset_s = reset_s
        self.failures = 0
        self.opened_at: float | None = None
        self.trial = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.trial or time.monotonic() - self.opened_at >= self.reset_s else "open"

    def allow(self) -> bool:
        """Whether an operation may go to the provider now (claims the half-open trial)."""
        if self.opened_at is None:
            return True
        if self.trial or time.monotonic() - self.opened_at < self.reset_s:
            return False
        self.trial = True
        return True

    def success(self) -> None:
        self.failures, self.opened_at, self.trial = 0, None, False

    def release(self) -> None:
        """The operation ended without saying anything about the provider: free the half-open
        trial (if it was one) without closing or opening the circuit."""
        self.trial = False

    def failure(self) -> None:
        self.failures += 1
        if self.trial or self.failures >= self.threshold:
            self.opened_at, self.trial = time.monotonic(), False


@dataclass(frozen=True)
class Failure:
    """Why one provider did not give an operation its result.

    Attributes:
        provider: the provider's name (``executor`` when the executor itself was closed).
        kind: a :class:`ProviderFailure` kind, ``circuit_open`` or ``unusable`` for a skipped
            provider, ``cancelled`` for a closed executor.
        description: the clause shown to the model (``"server_error, HTTP 500"``).
        per_target: the provider is a direct fetch, whose failures belong to the target site.
    """

    provider: str
    kind: str
    description: str
    per_target: bool = False


def cancelled_failure() -> Failure:
    """The failure of an operation cut short by :meth:`ToolExecutor.close`."""
    return Failure("executor", CANCELLED, "cancelled: the tool environment was closed")


@dataclass
class Outcome:
    """The result of one operation: ``value`` from ``provider`` (or the cache), or the
    ``failures`` of every provider tried (:class:`Failure`, in order)."""

    value: Any = None
    provider: str | None = None
    cached: bool = False
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.provider is not None

    def failure_text(self) -> str:
        """Why the operation failed, one clause per provider (for the observation)."""
        return "; ".join(f"{f.provider}: {f.description}" for f in self.failures) or "no provider is configured"

    @property
    def env_failure(self) -> str | None:
        """The kind of environment failure that degraded this operation, or ``None``.

        A degraded operation (every provider failed) is an environment failure when no
        provider reported a failure of the target (:data:`TARGET_FAILURES`: a dead link, an
        error page, a private address, ...) and at least one provider that is not per-target
        (a search API, the reader service) reported a provider fault (:data:`PROVIDER_FAULTS`);
        the kind is the first such fault's. A closed executor is always one (``cancelled``).
        So Jina down and the site answering 404 is a dead link (the model's choice), Jina down
        and the site timing out is the environment, and a direct fetch alone never is.
        """
        if self.ok:
            return None
        if any(f.kind == CANCELLED for f in self.failures):
            return CANCELLED
        if any(f.kind in TARGET_FAILURES for f in self.failures):
            return None
        faults = [f.kind for f in self.failures if not f.per_target and f.kind in PROVIDER_FAULTS]
        return faults[0] if faults else None


class ToolExecutor:
    """Runs provider operations with limits, cache, retries, circuit breakers and failover.

    Args:
        policies: settings by tool name; tools not named get ``default``.
        default: the policy of other tools.
        cache: a shared :class:`ResultCache`, or ``None`` for no caching.
        metrics: where figures go (a new registry by default).
        headers: sent with every request (for example a ``User-Agent``).

    Thread-safe: :meth:`call` and :meth:`call_many` may be called from any thread except the
    executor's own. :meth:`close` stops the loop thread and closes the connection pool. A
    provider that failed ``unusable`` stays skipped for the executor's life, across
    :meth:`close` (:meth:`unusable` lists them).
    """

    def __init__(
        self,
        policies: dict[str, ToolPolicy] | None = None,
        default: ToolPolicy | None = None,
        cache: ResultCache | None = None,
        metrics: ToolMetrics | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.policies = dict(policies or {})
        self.default = default or ToolPolicy()
        self.cache = cache
        self.metrics = metrics or ToolMetrics()
        self.headers = {"User-Agent": "websailor (research agent)", **(headers or {})}
        #: HTTP connections kept: enough for every tool's operations in flight, and no more
        #: (httpcore's pool does work per pooled connection on every request).
        self.pool_size = min(256, max([self.default.concurrency, *(p.concurrency for p in self.policies.values())]))
        self._breakers: dict[tuple[str, str], CircuitBreaker] = {}
        self._unusable: dict[tuple[str, str], str] = {}  # (tool, provider) -> why; kept across close()
        self._limits: dict[str, tuple[asyncio.Semaphore, AsyncLimiter | None]] = {}
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def policy(self, tool: str) -> ToolPolicy:
        return self.policies.get(tool, self.default)

    def breaker(self, tool: str, provider: str) -> CircuitBreaker:
        """The circuit breaker of ``provider`` under ``tool`` (created closed)."""
        key = (tool, provider)
        if key not in self._breakers:
            p = self.policy(tool)
            self._breakers[key] = CircuitBreaker(p.breaker_failures, p.breaker_reset_s)
        return self._breakers[key]

    # -- the loop thread ------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="tool-executor", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def _run(self, coro: Awaitable[Any]) -> Any:
        loop = self._ensure_loop()
        if threading.current_thread() is self._thread:
            raise RuntimeError("ToolExecutor.call cannot be used from its own loop thread; await acall instead")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def close(self) -> None:
        """Cancel the operations in flight (their callers get a failed :class:`Outcome`), close
        the connection pool and stop the loop thread. Idempotent; a later call starts afresh."""
        with self._start_lock:  # a caller may start a new loop right after: keep this one's thread
            loop, self._loop = self._loop, None
            thread, self._thread = self._thread, None
        if loop is None:
            return

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._client is not None:
                await self._client.aclose()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result()
        self._client = None
        self._limits.clear()  # bound to the old loop
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join()
        loop.close()

    def __enter__(self) -> ToolExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operations -----------------------------------------------------------------------
    def call(
        self, tool: str, request: dict[str, Any], providers: Sequence[Provider], key: dict[str, Any] | None = None
    ) -> Outcome:
        """Run one operation: ``request`` goes to the providers; ``key`` (its normalized form,
        default ``request``) identifies it in the cache."""
        try:
            return self._run(self.acall(tool, request, providers, key))
        except concurrent.futures.CancelledError:
            return Outcome(failures=[cancelled_failure()])

    def call_many(
        self,
        tool: str,
        requests: Sequence[dict[str, Any]],
        providers: Sequence[Provider],
        keys: Sequence[dict[str, Any]] | None = None,
    ) -> list[Outcome]:
        """Run several operations of one tool concurrently (within its limits); outcomes in order."""
        keys = list(keys) if keys is not None else [None] * len(requests)

        async def gather() -> list[Outcome]:
            return list(await asyncio.gather(*(self.acall(tool, r, providers, k) for r, k in zip(requests, keys))))

        try:
            return self._run(gather())
        except concurrent.futures.CancelledError:
            return [Outcome(failures=[cancelled_failure()]) for _ in requests]

    async def acall(
        self, tool: str, request: dict[str, Any], providers: Sequence[Provider], key: dict[str, Any] | None = None
    ) -> Outcome:
        """:meth:`call` for code already on the executor's loop."""
        policy = self.policy(tool)
        t0 = time.perf_counter()
        key = cache_key(tool, request if key is None else key)
        cacheable = self.cache is not None and policy.cache_ttl_s > 0
        if cacheable:
            hit = await asyncio.to_thread(self._cache_get, key, policy.cache_ttl_s)
            if hit is not None:
                self.metrics.record_request(tool, time.perf_counter() - t0, cache_hit=True)
                return Outcome(hit["value"], hit["provider"], cached=True)
        outcome = Outcome()
        for i, provider in enumerate(providers):
            if i > 0 and outcome.failures:
                self.metrics.record_failover(tool)
            per_target = bool(getattr(provider, "per_target", False))
            unusable = self._unusable.get((tool, provider.name))
            if unusable is not None:
                outcome.failures.append(
                    Failure(provider.name, UNUSABLE, f"{UNUSABLE}, skipped for the rest of the run ({unusable})")
                )
                self.metrics.record_attempt_error(tool, UNUSABLE)
                continue
            breaker = None if per_target else self.breaker(tool, provider.name)
            if breaker is not None and not breaker.allow():
                outcome.failures.append(
                    Failure(
                        provider.name,
                        CIRCUIT_OPEN,
                        f"skipped, its circuit is open after {breaker.failures} failed operations in a row",
                    )
                )
                self.metrics.record_attempt_error(tool, CIRCUIT_OPEN)
                continue
            try:
                value = await self._with_retries(tool, provider, request, policy)
            except ProviderFailure as e:
                if breaker is not None:
                    if e.kind == UNUSABLE:
                        breaker.release()
                        self._disable(tool, provider.name, e.detail)
                    elif e.kind in PROVIDER_FAULTS:
                        breaker.failure()
                    else:
                        breaker.release()
                outcome.failures.append(Failure(provider.name, e.kind, f"{e.kind}, {e.detail}", per_target))
                continue
            except BaseException:
                if breaker is not None:
                    breaker.release()
                raise
            if breaker is not None:
                breaker.success()
            outcome.value, outcome.provider = value, provider.name
            if cacheable and getattr(provider, "cacheable", True):
                await asyncio.to_thread(self._cache_put, key, tool, {"value": value, "provider": provider.name})
            break
        if not outcome.ok:
            logger.debug("%s %s failed: %s", tool, request, outcome.failure_text())
        self.metrics.record_request(tool, time.perf_counter() - t0, degraded=not outcome.ok)
        return outcome

    def _disable(self, tool: str, provider: str, why: str) -> None:
        """Skip ``provider`` under ``tool`` for the rest of the run (the life of this executor),
        with one warning."""
        if (tool, provider) in self._unusable:
            return
        self._unusable[(tool, provider)] = why
        logger.warning(
            "%s: provider %s cannot serve (%s); it is skipped for the rest of the run, its operations go to the "
            "next provider",
            tool,
            provider,
            why,
        )

    def unusable(self) -> dict[tuple[str, str], str]:
        """The providers skipped for the rest of the run: ``(tool, provider) -> why``."""
        return dict(self._unusable)

    def _cache_get(self, key: str, ttl_s: float) -> Any | None:
        try:
            return self.cache.get(key, ttl_s)  # type: ignore[union-attr]
        except Exception as e:  # a broken or busy cache must not cost the call
            logger.warning("tool cache %s: read failed (%s); calling the provider", self.cache.path, e)  # type: ignore[union-attr]
            return None

    def _cache_put(self, key: str, tool: str, value: Any) -> None:
        try:
            self.cache.put(key, tool, value)  # type: ignore[union-attr]
        except Exception as e:
            logger.warning("tool cache %s: write failed (%s); the result is used uncached", self.cache.path, e)  # type: ignore[union-attr]

    async def _with_retries(self, tool: str, provider: Provider, request: dict[str, Any], policy: ToolPolicy) -> Any:

        def wait(state: Any) -> float:
            exc = state.outcome.exception()
            if isinstance(exc, ProviderFailure) and exc.retry_after is not None:
                return min(exc.retry_after, policy.retry_after_max_s)
            n = state.attempt_number - 1
            return min(policy.backoff_max_s, policy.backoff_s * 2**n + random.uniform(0, policy.backoff_s))

        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.retries + 1),
            wait=wait,
            reraise=True,
            retry=retry_if_exception(lambda e: isinstance(e, ProviderFailure) and e.retryable),
            before_sleep=lambda state: self.metrics.record_retry(tool),
        )
        async for attempt in retrying:
            with attempt:
                value = await self._attempt(tool, provider, request, policy)
        return value

    async def _attempt(self, tool: str, provider: Provider, request: dict[str, Any], policy: ToolPolicy) -> Any:
        sem, limiter = self._limits_of(tool, policy)
        async with sem:
            if limiter is not None:
                await limiter.acquire()
            try:
                async with asyncio.timeout(policy.timeout_s):
                    return await provider(self._http(), request, policy)
            except TimeoutError:
                failure = ProviderFailure("timeout", f"no complete answer within {policy.timeout_s:g} s")
            except ProviderFailure as e:
                failure = e
            except (httpx.InvalidURL, httpx.UnsupportedProtocol, UnicodeError, ValueError) as e:
                failure = ProviderFailure("client_error", f"unusable URL or request ({type(e).__name__})")
            except httpx.HTTPError as e:
                failure = ProviderFailure("connection", f"{type(e).__name__}: {str(e)[:120]}")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a provider bug or an input it cannot handle: an observation, not a crash
                logger.debug("%s provider %s raised", tool, provider.name, exc_info=True)
                failure = ProviderFailure("provider_error", f"{type(e).__name__}")
        self.metrics.record_attempt_error(tool, failure.kind)
        raise failure

    def _limits_of(self, tool: str, policy: ToolPolicy) -> tuple[asyncio.Semaphore, AsyncLimiter | None]:
        if tool not in self._limits:
            limiter = None
            if policy.qps >= 1:
                limiter = AsyncLimiter(policy.qps, 1.0)
            elif policy.qps > 0:  # below one a second: one start every 1/qps seconds
                limiter = AsyncLimiter(1, 1.0 / policy.qps)
            self._limits[tool] = (asyncio.Semaphore(policy.concurrency), limiter)
        return self._limits[tool]

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=True,
                max_redirects=5,
                headers=self.headers,
                timeout=httpx.Timeout(30.0, connect=10.0),
                limits=httpx.Limits(max_connections=self.pool_size, max_keepalive_connections=self.pool_size),
            )
        return self._client
