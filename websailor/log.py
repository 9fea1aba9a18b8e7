"""Logging set-up: one place that configures the ``websailor`` logger."""

from __future__ import annotations

import logging

from rich.console import Console
from rich.logging import RichHandler

LOGGER_NAME = "websailor"


def get_logger(name: str) -> logging.Logger:
    """Return a child of the ``websailor`` logger (``name`` is usually ``__name__``)."""
    if name.startswith(LOGGER_NAME):
        return logging.getLogger(name)
    return logging.getLogger(f"{LOGGER_NAME}.{name}")


def setup_logging(verbose: bool = False) -> None:
    """Send websailor's log records to stderr through rich; idempotent."""
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(isinstance(h, RichHandler) for h in logger.handlers):
        handler = RichHandler(console=Console(stderr=True), show_path=False, rich_tracebacks=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.propagate = False
