"""Browser-test helpers for the viewer: serve :func:`websailor.view.create_view_app` on a
free loopback port in a thread, and drive Debian's Chromium through Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: Flags for Chromium on a machine with no network and no screen (background networking off:
#: its connections would be refused, many at a time).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Debian's chromium, or a skip of the test."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)")
    return exe


@contextmanager
def serve_view(root: Path) -> Iterator[str]:
    """The viewer over ``root`` in a background thread; yields its base URL (no trailing slash)."""
    from fakes import serving

    from websailor.view import create_view_app

    with serving(create_view_app(root)) as url:
        yield url


class ConsoleWatch:
    """The console errors and uncaught exceptions of a page (a test asserts there are none)."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
