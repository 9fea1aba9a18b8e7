"""Why a web tool's provider operation failed: the failure kinds, one failed attempt
(:class:`ProviderFailure`), one provider's reason (:class:`Failure`) and the result of an
operation over every provider tried (:class:`Outcome`), with the rule that tells an environment
failure from a failure of the target the model chose (:attr:`Outcome.env_failure`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    """The failure of an operation cut short by :meth:`~websailor.tools.web.executor.ToolExecutor.close`."""
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
