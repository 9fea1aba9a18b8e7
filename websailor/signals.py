"""SIGTERM and SIGHUP as Ctrl-C, so that a killed command or script runs the same clean-up
(``finally`` blocks and context managers: a vLLM server it started is stopped, temporary
build directories are removed) instead of dying in place and leaving children behind."""

from __future__ import annotations

import signal


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def interrupt_on_termination() -> None:
    """Raise :class:`KeyboardInterrupt` on SIGTERM and SIGHUP (a closed terminal) in the main
    thread from now on. Call it from the main thread only (``signal.signal`` raises
    ``ValueError`` elsewhere)."""
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
