"""Run a document parser in a child process with a time and memory limit.

pypdf, python-docx, openpyxl and trafilatura can spend minutes (or gigabytes) on a small
hostile file: a PDF whose pages share one huge content stream, a spreadsheet whose only
cells are at A1 and XFD1048576. A thread cannot be stopped, so the parse runs in a process
that is killed when it overruns. Children come from a ``forkserver`` (forking a process that
runs threads is unsafe), which imports the parsers once, so a parse costs a fork, not an
interpreter start.
"""

from __future__ import annotations

import functools
import multiprocessing
import resource
from collections.abc import Callable
from typing import Any

from websailor.errors import WebsailorError

#: Modules the fork server imports once, so that children start with the parsers loaded.
PRELOAD = ["websailor.tools.documents.parse_file", "websailor.tools.documents.parsers", "websailor.tools.web.providers"]


class IsolatedCallError(WebsailorError):
    """The child ran out of time or memory, crashed, or its function raised (the message
    says which; a :class:`WebsailorError` raised by the function keeps its message)."""


@functools.lru_cache(maxsize=1)
def _context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _child(conn: Any, fn: Callable, args: tuple, memory_bytes: int, cpu_s: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    try:
        result: tuple = ("ok", fn(*args))
    except WebsailorError as e:
        result = ("error", str(e))
    except MemoryError:
        result = ("error", f"ran out of memory (the limit is {memory_bytes >> 20} MB)")
    except Exception as e:  # a parser bug on a hostile file
        result = ("error", f"{type(e).__name__}: {str(e)[:300]}")
    conn.send(result)
    conn.close()


def call_isolated(fn: Callable, *args: Any, timeout_s: float = 30.0, memory_mb: int = 2048) -> Any:
    """``fn(*args)`` in a child process; ``fn`` and the arguments must be picklable.

    Raises:
        IsolatedCallError: more than ``timeout_s`` seconds (wall clock or CPU), more than
            ``memory_mb`` of address space, a crash, or an exception from ``fn`` (its message).
    """
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(sender, fn, args, memory_mb << 20, max(1, int(timeout_s) + 1)), daemon=True)
    proc.start()
    sender.close()
    try:
        if not receiver.poll(timeout_s):
            raise IsolatedCallError(f"took longer than {timeout_s:g} s and was stopped")
        status, value = receiver.recv()
    except EOFError:
        proc.join(timeout=1)
        raise IsolatedCallError(f"crashed or ran out of memory (exit status {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        receiver.close()
    if status == "error":
        raise IsolatedCallError(value)
    return value
