"""Logging set-up: one place that configures the ``websailor`` logger."""

from __future__ import annotations

import logging
import sys

from rich.console import Console
from rich.logging import RichHandler

LOGGER_NAME = "websailor"


def get_logger(name: str) -> logging.Logger:
    """Return a child of the ``websailor`` logger (``name`` is usually ``__name__``)."""
    if name.startswith(LOGGER_NAME):
        return logging.getLogger(name)
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


class _Handler(RichHandler):
    """rich's layout on a terminal; elsewhere (a log file, a pipe, a test) one plain line per
    record, ``LEVEL: message``, so that no record is wrapped across lines."""

    def emit(self, record: logging.LogRecord) -> None:
        if self.console.is_terminal:
            super().emit(record)
            return
        try:
            sys.stderr.write(f"{record.levelname}: {self.format(record)}\n")
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


def setup_logging(verbose: bool = False) -> None:
    """Send websailor's log records to stderr (through rich on a terminal); idempotent."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(isinstance(h, _Handler) for h in logger.handlers):
        handler = _Handler(console=Console(stderr=True), show_path=False, rich_tracebacks=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.propagate = False
