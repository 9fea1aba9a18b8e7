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
4. when every provider failed, an :class:`~websailor.tools.web.failures.Outcome` that says why,
   provider by provider (:class:`~websailor.tools.web.failures.Failure`), and whether the
   environment is to blame (:attr:`~websailor.tools.web.failures.Outcome.env_failure`);
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
import random
import threading
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from aiolimiter import AsyncLimiter
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

from websailor.log import get_logger
from websailor.tools.metrics import ToolMetrics
from websailor.tools.web.cache import ResultCache, cache_key
from websailor.tools.web.failures import (
    CIRCUIT_OPEN,
    PROVIDER_FAULTS,
    UNUSABLE,
    Failure,
    Outcome,
    ProviderFailure,
    cancelled_failure,
)

logger = get_logger(__name__)


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
    :class:`~websailor.tools.web.failures.ProviderFailure` (any other exception is classified by
    the executor). Optional class attributes: ``cacheable`` (default true: the result is
    JSON-serializable and may be cached) and ``per_target`` (default false; true for a direct
    fetch, whose failures belong to each target site, so it has no circuit breaker).
    """

    name: str

    def __call__(self, client: httpx.AsyncClient, request: dict[str, Any], policy: ToolPolicy) -> Awaitable[Any]: ...


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
