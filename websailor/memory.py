"""Handing freed heap memory back to the operating system.

Generation and training allocate caches and logits of a different size at every step (rollouts
of different lengths, on several threads), and glibc keeps what it freed: without trimming, a
long CPU run grows by hundreds of MB a step.
"""

from __future__ import annotations


def trim_heap() -> None:
    """Return the free pages of the process heap to the OS (glibc ``malloc_trim``; a no-op on
    other C libraries)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        pass


def release_memory() -> None:
    """Collect garbage, then :func:`trim_heap`."""
    import gc

    gc.collect()
    trim_heap()
