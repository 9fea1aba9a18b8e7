"""Circuit breakers for the services a run depends on: the model server, the LLM judge and
the tool server.

A long evaluation or RL run must not spend the night retrying a service that died. Each client
(:class:`~websailor.models.openai_compat.OpenAIModel`,
:class:`~websailor.models.vllm_server.VLLMServerModel`,
:func:`~websailor.server.client.connect_tools`) holds one :class:`ServiceBreaker` per service;
every request attempt reports to it. After ``failures`` transport failures, timeouts or HTTP 5xx
answers in a row, the first of them sent at least ``min_down_s`` seconds ago (any other answer
resets the count; the window keeps a restart of a few seconds, or one burst of concurrent
requests refused together or dropped by a restart, from counting as an outage, while requests
that each waited out a timeout of more than the window already span it), the service is declared down, for good: the
failing call and every later one raise :class:`~websailor.errors.ServiceDown` at once, without
a request. The
error travels through the agent, the judges and the batch runner (which stop, keeping what
finished) to the command line, which prints one line and exits with
:data:`~websailor.errors.EXIT_SERVICE_DOWN`; rerunning the same command resumes.

The web providers of the real-web tools have breakers of their own that reopen after a while
(:class:`websailor.tools.web.executor.CircuitBreaker`): a provider outage degrades tool calls
(the rollout is ungraded), while a dead service here stops the run.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

import httpx

from websailor.errors import ConfigError, ServiceDown
from websailor.log import get_logger

logger = get_logger(__name__)
T = TypeVar("T")

#: Transport failures or timeouts in a row that declare a service down (every attempt counts,
#: retries included: with several rollouts at once a dead server is declared down within
#: about the window, a hanging one after one read timeout of its streamed replies).
DEFAULT_FAILURES = 5
#: Seconds a row of failures must span before the service is declared down.
DEFAULT_MIN_DOWN_S = 10.0
#: The environment variable that sets the threshold (as ``--service-failures`` does).
FAILURES_ENV = "WEBSAILOR_SERVICE_FAILURES"

_threshold: int | None = None


def check_threshold(failures: object, name: str = "--service-failures") -> int:
    """``failures`` as a threshold: an integer of at least 1.

    Raises:
        ConfigError: anything else, naming ``name``.
    """
    try:
        value = int(str(failures).strip())
    except ValueError:
        raise ConfigError(f"{name} {failures!r}: give a whole number of failures in a row, at least 1") from None
    if value < 1:
        raise ConfigError(
            f"{name} {value}: a service is declared down after at least 1 failure in a row; give 1 or more"
        )
    return value


def set_threshold(failures: int | None) -> None:
    """Set the threshold of the breakers made from now on (``None``: :data:`FAILURES_ENV`, else
    :data:`DEFAULT_FAILURES`).

    Raises:
        ConfigError: a threshold below 1.
    """
    global _threshold
    _threshold = None if failures is None else check_threshold(failures)


def threshold() -> int:
    """The threshold new breakers get (see :func:`set_threshold`).

    Raises:
        ConfigError: :data:`FAILURES_ENV` holds something other than a whole number of at least 1.
    """
    if _threshold is not None:
        return _threshold
    raw = os.environ.get(FAILURES_ENV, "").strip()
    return check_threshold(raw, FAILURES_ENV) if raw else DEFAULT_FAILURES


class ServiceBreaker:
    """Counts one service's transport failures in a row and declares it down at the threshold.

    Args:
        service: what the service is, as the error names it (``model server``, ``judge``,
            ``tool server``).
        url: where it is.
        failures: the threshold (default :func:`threshold`).
        min_down_s: seconds the row of failures must span (default :data:`DEFAULT_MIN_DOWN_S`).

    Thread-safe: the rollouts and judge calls of a run share one breaker per service.
    """

    def __init__(self, service: str, url: str, failures: int | None = None, min_down_s: float | None = None) -> None:
        self.service = service
        self.url = url
        self.failures = check_threshold(failures) if failures is not None else threshold()
        self.min_down_s = DEFAULT_MIN_DOWN_S if min_down_s is None else min_down_s
        self._lock = threading.Lock()
        self._in_a_row = 0
        self._first_failure: float | None = None  # wall-clock time of the first failure of the row
        self._first_sent = 0.0  # when its request was sent (a timeout's), else the same time
        self._last_error = ""
        self._down: ServiceDown | None = None
        self._answered = False
        self._timeouts = 0  # failures of the row that were timeouts (all: perhaps a timeout too short)

    @property
    def down(self) -> bool:
        """Whether the service was declared down."""
        return self._down is not None

    def check(self) -> None:
        """Raise :class:`ServiceDown` when the service is down (before a request): declared so,
        or its row of failures reached the threshold and now spans the window."""
        if self._down is None and self._in_a_row >= self.failures:
            with self._lock:
                self._declare()
        if self._down is not None:
            raise self._down

    def success(self, latency_s: float | None = None) -> None:
        """An answer came (whatever its status) after ``latency_s`` seconds: the row of failures
        is broken. The first answer's latency is logged (a judge that takes a minute a reply
        shows it before the run is spent waiting on it)."""
        with self._lock:
            first, self._answered = not self._answered, True
            if self._down is None:
                self._in_a_row, self._first_failure, self._timeouts = 0, None, 0
        if first and latency_s is not None:
            logger.info("the %s at %s answered its first request in %.1f s", self.service, self.url, latency_s)

    def failure(self, error: BaseException | str, sent: float | None = None) -> None:
        """A request attempt sent at ``sent`` (``time.time()``) failed in transport, timed out or
        got an HTTP 5xx. A timeout counts from its sending (the service was silent all along);
        any other failure from now (a connection a restart dropped says nothing of the time
        before). Raises :class:`ServiceDown` when the row now qualifies (or the service was
        already down)."""
        with self._lock:
            if self._down is None:
                self._in_a_row += 1
                text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
                timed_out = is_timeout(error)
                if self._first_failure is None:
                    self._first_failure = time.time()
                    self._first_sent = sent if sent is not None and timed_out else self._first_failure
                self._last_error = " ".join(text.split())[:200]
                self._timeouts = (self._timeouts + 1) if timed_out else 0
                self._declare()
        self.check()

    def _declare(self) -> None:
        """Declare the service down when the row qualifies (the lock held)."""
        if self._down is not None or self._in_a_row < self.failures or self._first_failure is None:
            return
        # a row of timeouts only spans the window from the first one's sending; any other row from
        # its first failure (one slow request and a restart of a second are no outage)
        start = self._first_sent if self._timeouts >= self._in_a_row else self._first_failure
        if time.time() - start < self.min_down_s:
            return
        since = datetime.fromtimestamp(start, UTC).strftime("%H:%M:%S UTC")
        slow = (
            "; every one timed out: if the service is slow rather than down, give it a longer timeout "
            "(--judge-timeout for a judge, WEBSAILOR_READ_TIMEOUT for a model server's silence mid-reply)"
            if self._timeouts >= self._in_a_row
            else ""
        )
        self._down = ServiceDown(
            f"the {self.service} at {self.url} is down since {since}: {self._in_a_row} request"
            f"{'s' if self._in_a_row != 1 else ''} in a row failed (last: {self._last_error}){slow}",
            service=self.service,
            url=self.url,
            since=start,
            failures=self._in_a_row,
        )


def is_timeout(error: BaseException | str) -> bool:
    """Whether a failed attempt timed out, by the exception's type: Python's
    :class:`TimeoutError` (``socket.timeout``), httpx's ``TimeoutException`` (connect, read,
    write, pool), the OpenAI client's ``APITimeoutError`` and its HTTP library's (httpx2)
    ``TimeoutException``; a string (an HTTP status) never.
    Not by the text, which can name a timeout that did not happen (a proxy's "keepalive timeout"
    in a dropped connection's message)."""
    if isinstance(error, str):
        return False
    kinds: list[type] = [TimeoutError, httpx.TimeoutException]
    openai = sys.modules.get("openai")  # not imported: no error of the OpenAI client can be here
    if openai is not None:
        kinds += [openai.APITimeoutError, sys.modules["httpx2"].TimeoutException]  # its HTTP library's too
    return isinstance(error, tuple(kinds))


def through(breaker: ServiceBreaker | None, send: Callable[[], T], transport: tuple[type[BaseException], ...]) -> T:
    """One request attempt ``send()`` reported to ``breaker`` (``None``: sent as it is), as every
    client does: the breaker is checked first (:class:`ServiceDown` without a request); an
    exception of ``transport`` (a connection failure, a timeout, or a raised HTTP status) or an
    answer with a ``status_code`` of 500 or more counts as a failure, any other answer breaks
    the row and times the reply. The answer (whatever its status) is returned and the
    exception re-raised, for the caller's own retries and errors.

    Raises:
        ServiceDown: the service is down, or this failure declared it so.
    """
    if breaker is None:
        return send()
    breaker.check()
    t0, sent = time.perf_counter(), time.time()
    try:
        answer = send()
    except transport as e:
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and status < 500:
            breaker.success()  # the server answered, with a refusal
        else:
            breaker.failure(e, sent)
        raise
    status = getattr(answer, "status_code", None)
    if isinstance(status, int) and status >= 500:
        breaker.failure(f"HTTP {status}", sent)
    else:
        breaker.success(time.perf_counter() - t0)
    return answer
