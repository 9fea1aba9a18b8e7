"""Micro-batching of concurrent chat calls for local backends.

Rollout threads call :meth:`BatchedChat.chat`; one worker thread gathers the requests that
arrive within ``batch_wait_s`` (up to ``max_batch``, same sampling settings) and runs them as
one :meth:`generate` call of the backend.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import astuple, replace

from websailor.errors import ModelError
from websailor.models.base import ChatModel, Generation, Message, SamplingParams


def _batch_key(params: SamplingParams) -> tuple:
    """Calls that may share a ``generate``: the same sampling settings. Deadlines, seeds and
    token limits may differ: the batch runs to the largest limit and cuts each reply at its
    own, under one seed derived from the members' seeds."""
    return astuple(replace(params, timeout_s=None, seed=None, max_tokens=0))


class BatchedChat(ChatModel):
    """A backend whose :meth:`generate` takes ``(conversations, params, limits)`` (``limits``:
    each reply's token cap) and whose single :meth:`chat` calls are gathered into batches.
    Subclasses call :meth:`start_batching` in their constructor."""

    def start_batching(self, max_batch: int, batch_wait_s: float) -> None:
        """``max_batch``: most conversations per ``generate``; ``batch_wait_s``: how long the
        batcher waits for more requests after the first."""
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._generating = False  # a generate call is in flight (read by close)

    def generate(
        self, conversations: list[list[Message]], params: SamplingParams, limits: list[int] | None = None
    ) -> list[Generation]:  # pragma: no cover - abstract
        raise NotImplementedError

    def chat(self, messages: list[Message], params: SamplingParams) -> Generation:
        fut: Future = Future()
        self._queue.put((messages, params, fut))
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name="websailor-batcher", daemon=True)
                self._worker.start()
        return fut.result()

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop the batching thread once the requests already queued are served. When it is
        idle (nothing generating, nothing queued: the end of a run) wait for it to end, up to
        ``timeout_s``: a worker still ending while the interpreter shuts down frees the model's
        tensors without the interpreter lock, and the process aborts ("terminate called without
        an active exception"). When it is still busy (an interrupted run, which exits at once)
        do not wait for generations that nobody will read."""
        with self._lock:
            worker, self._worker = self._worker, None
            idle = not self._generating and self._queue.empty()
            if worker is not None and worker.is_alive():
                self._queue.put(None)
        if worker is not None and idle and worker is not threading.current_thread():
            worker.join(timeout_s)

    def _serve(self) -> None:
        pending: list = []
        stopping = False
        while True:
            if not pending:
                if stopping:
                    return
                item = self._queue.get()
                if item is None:
                    return
                pending.append(item)
            deadline = time.monotonic() + self.batch_wait_s
            while len(pending) < self.max_batch * 4:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                pending.append(item)
            key = _batch_key(pending[0][1])
            batch = [p for p in pending if _batch_key(p[1]) == key][: self.max_batch]
            pending = [p for p in pending if p not in batch]
            try:
                seeds = [b[1].seed for b in batch if b[1].seed is not None]
                params = replace(
                    batch[0][1],
                    max_tokens=max(b[1].max_tokens for b in batch),
                    seed=(sum(seeds) % 2**31) if seeds else None,
                )
                self._generating = True
                try:
                    gens = self.generate([b[0] for b in batch], params, [b[1].max_tokens for b in batch])
                finally:
                    self._generating = False  # before the results: whoever holds one sees the worker idle
                for (_, _, fut), gen in zip(batch, gens):
                    fut.set_result(gen)
            except Exception as e:  # the waiting rollouts get the error, the worker lives on
                for _, _, fut in batch:
                    fut.set_exception(e if isinstance(e, ModelError) else ModelError(f"{self.name}: {e}"))
