"""Local generation that encodes each token once: prefix reuse and continuous batching over a
transformers causal LM.

Why our own loop and not transformers' continuous batching (``generate_batch``, paged
attention with block sharing): on CPU its attention runs as one dense masked product over all
requests packed together, so 8 rollouts cost 8 times the attention of one; measured on two
cores (SmolLM2-135M, 8 prompts of 630 tokens, 48 new tokens) it reached 12 to 14 tokens/s
against 29 for static ``generate`` (docs/agent.md, "Local generation"). This engine keeps the
library's model, attention kernels and cache layers and adds only the scheduling:

- **Prefix reuse.** When a request finishes, the key/value cache of its tokens is kept (up to
  a memory budget, least recently used first out). A new request whose prompt starts with
  kept tokens (the next turn of the same conversation: its earlier turns, the sampled reply,
  the tool response) computes only the tokens after the match.
- **Continuous batching.** Every decode step runs the live requests together as one batch of
  one token each; a request that ends leaves its row at once and a waiting one takes it after
  its prefill, so nobody waits for the longest reply.
- **Exact tokens.** Each request returns its sampled ids and their log-probabilities
  (logits divided by the temperature, before top-p). Each request samples from its own
  generator seeded by ``SamplingParams.seed``.
- **Bounded memory.** Requests are admitted while the key/value memory they may need fits in
  ``kv_cache_bytes``; the others wait for room.

The batch keeps one buffer per layer, ``[rows, kv_heads, columns, head_dim]``, with each row's
tokens right-aligned (left padding masked out); rows are written in place and the buffers are
repacked only when a row does not fit.
"""

from __future__ import annotations

import os
import queue
import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from websailor.errors import ModelError
from websailor.log import get_logger
from websailor.memory import trim_heap
from websailor.models.base import ids_before_stop

logger = get_logger(__name__)

#: A reply whose last ``REPEAT_WINDOW`` tokens repeat one span of at most half of them ends
#: with ``finish_reason="repetition"``.
REPEAT_WINDOW = 96


@dataclass
class Request:
    """One generation: ``prompt`` ids, at most ``max_new`` new tokens, sampling settings and
    ``stop`` strings; results land in ``future`` as a :class:`Completion`."""

    prompt: list[int]
    max_new: int
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str]
    future: Future = field(default_factory=Future)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reused: int = 0
    generator: Any = None
    finish: str | None = None


@dataclass
class Completion:
    """What a request produced: sampled ``ids`` and ``logprobs`` (cut at a stop string),
    ``finish`` (``stop``, ``length``, ``repetition``), and ``reused`` prompt tokens whose
    key/value cache came from an earlier request (not computed again). ``text`` is set when a
    stop string cut the reply: the ids may then end with part of it, the text does not."""

    ids: list[int]
    logprobs: list[float]
    finish: str
    prompt_tokens: int
    reused: int
    text: str | None = None  # a reply cut at a stop string: its text, exactly up to the stop


def repeats(ids: list[int], window: int = REPEAT_WINDOW) -> bool:
    """Whether the last ``window`` tokens are one span repeated (period at most ``window // 2``)."""
    if len(ids) < window:
        return False
    tail = ids[-window:]
    return any(tail[p:] == tail[:-p] for p in range(1, window // 2 + 1))


def _buffer_layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        """A cache layer over preallocated buffers: a decode step writes one column instead of
        copying the whole cache (``DynamicLayer`` concatenates)."""

        def __init__(self, keys: Any, values: Any, length: int) -> None:
            super().__init__()
            self.buf_k, self.buf_v, self.length = keys, values, length
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self._views()

        def _views(self) -> None:
            self.keys = self.buf_k[:, :, : self.length]
            self.values = self.buf_v[:, :, : self.length]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            n = key_states.shape[-2]
            self.buf_k[:, :, self.length : self.length + n] = key_states
            self.buf_v[:, :, self.length : self.length + n] = value_states
            self.length += n
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

    return BufferLayer


class KVEngine:
    """Continuous batching with prefix reuse for one loaded causal LM (module docstring).

    Args:
        model: a transformers causal LM in eval mode whose cache layers are plain (full
            attention); :func:`supports` says whether it is.
        tokenizer: its tokenizer (stop strings are matched on decoded text).
        max_batch: most requests decoded together.
        kv_cache_bytes: memory for key/value caches, live and kept (default 1.5 GiB, or
            ``$WEBSAILOR_KV_CACHE_GB``).
        prefill_chunk: prompt tokens computed per forward pass (bounds the attention memory).
        name: for error messages.
        eos_ids: tokens that end a reply besides the model's and tokenizer's EOS (a chat
            template's end-of-turn tokens).

    Call :meth:`submit` from any thread; one worker thread runs the model. :meth:`clear`
    forgets the kept caches (after the weights change), :meth:`close` stops the worker.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_batch: int = 8,
        kv_cache_bytes: int | None = None,
        prefill_chunk: int = 1024,
        name: str = "model",
        eos_ids: set[int] | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch = max(1, int(max_batch))
        gb = float(os.environ.get("WEBSAILOR_KV_CACHE_GB", "1.5"))
        self.kv_cache_bytes = int(kv_cache_bytes if kv_cache_bytes is not None else gb * 2**30)
        self.prefill_chunk = prefill_chunk
        cfg = model.config.get_text_config()
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype_bytes = torch.finfo(model.dtype).bits // 8
        self.token_bytes = 2 * cfg.num_hidden_layers * heads * head_dim * dtype_bytes
        self.budget_tokens = max(1, self.kv_cache_bytes // self.token_bytes)
        self.eos_ids = _eos_set(tokenizer, model) | set(eos_ids or ())
        self.vocab = len(tokenizer)  # the model's logits may be padded past the tokenizer's ids
        self.stats = {
            "prompt_tokens": 0,
            "reused_tokens": 0,
            "computed_tokens": 0,
            "generated_tokens": 0,
            "peak_rows": 0,
            "waits": 0,
        }
        self._Layer = _buffer_layer_class()
        self._queue: queue.Queue = queue.Queue()
        self._waiting: list[Request] = []
        self._store: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._store_tokens = 0
        self._rows: list[Request | None] = []
        self._lens: list[int] = []
        self._layers: list[Any] = []
        self._mask = None
        self._columns = 0  # filled columns of the batch buffers
        self._lock = threading.Lock()
        self._running = False  # a worker serves the queue (set and cleared under the lock)
        self._cancel = False  # close() asked the worker to drop what it holds and stop
        self._worker: threading.Thread | None = None

    # -- public API -------------------------------------------------------------------------
    def submit(self, request: Request) -> Future:
        """Queue ``request``; its future resolves to a :class:`Completion` or raises
        :class:`ModelError`. Starts the worker when none runs (also after :meth:`close`)."""
        with self._lock:
            self._queue.put(request)
            if not self._running:
                self._running = True
                self._worker = threading.Thread(target=self._serve, name="websailor-engine", daemon=True)
                self._worker.start()
        return request.future

    def clear(self) -> None:
        """Forget the kept key/value caches (call after the weights change)."""
        self._queue.put("clear")

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop the worker and wait for it (up to ``timeout_s``; a worker still running during
        interpreter shutdown can abort the process). Requests still queued or in flight (an
        interrupted run) fail with :class:`ModelError` at the next step instead of being served:
        nobody will read them. A later :meth:`submit` starts a new worker."""
        with self._lock:
            worker = self._worker
            if not self._running or worker is None:
                return
            self._cancel = True
            self._queue.put(None)
        if worker is not threading.current_thread():
            worker.join(timeout_s)

    # -- the worker -------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            self._serve_loop()
        except BaseException as e:  # the worker must never leave requests waiting forever
            with self._lock:
                self._running = False
            self._fail_all(ModelError(f"{self.name}: the generation worker stopped: {type(e).__name__}: {e}"))
            raise

    def _serve_loop(self) -> None:
        torch = self._torch
        stopping = False
        with torch.inference_mode():
            while True:
                block = not any(self._rows) and not self._waiting
                if stopping and block:
                    with self._lock:
                        if self._queue.empty():
                            self._running = False
                            return
                try:
                    item = self._queue.get() if block else self._queue.get_nowait()
                except queue.Empty:
                    item = False
                while item is not False:
                    if item is None:
                        stopping = True
                    elif item == "clear":
                        self._store.clear()
                        self._store_tokens = 0
                    else:
                        self._waiting.append(item)
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        item = False
                if self._cancel:
                    dropped = []
                    with self._lock:
                        self._cancel = False
                        while not self._queue.empty():
                            dropped.append(self._queue.get_nowait())
                        self._running = False
                    self._fail_all(ModelError(f"{self.name}: the model was closed"))
                    closed = ModelError(f"{self.name}: the model was closed")
                    for item in dropped:  # outside the lock: a done-callback may submit again
                        if isinstance(item, Request) and not item.future.done():
                            item.future.set_exception(closed)
                    return
                try:
                    self._admit()
                    if any(self._rows):
                        self._decode()
                except Exception as e:  # fail the requests in flight, keep serving
                    self._fail_all(e)

    def _fail_all(self, e: Exception) -> None:
        err = e if isinstance(e, ModelError) else ModelError(f"{self.name}: generation failed: {type(e).__name__}: {e}")
        for r in [*self._rows, *self._waiting]:
            if r is not None and not r.future.done():
                r.future.set_exception(err)
        self._rows, self._lens, self._layers, self._mask, self._columns = [], [], [], None, 0
        self._waiting = []

    # -- admission and prefill --------------------------------------------------------------
    def _live_tokens(self, extra: int = 0) -> int:
        """Key/value tokens the batch buffers may reach with ``extra`` more tokens in a new row:
        every row is as wide as the widest (rows are right-aligned in one buffer)."""
        sizes = [len(r.prompt) + r.max_new for r in self._rows if r is not None]
        sizes += [extra] if extra else []
        return len(sizes) * max(sizes, default=0)

    def _admit(self) -> None:
        while self._waiting and sum(r is not None for r in self._rows) < self.max_batch:
            req = self._waiting[0]
            need = self._live_tokens(len(req.prompt) + req.max_new)
            if any(self._rows) and need > self.budget_tokens:
                self.stats["waits"] += 1
                return  # wait for room (kept caches stay: evicting them would not make room)
            self._evict(need)
            self._waiting.pop(0)
            try:
                self._prefill(req)
            except Exception as e:
                req.future.set_exception(
                    e if isinstance(e, ModelError) else ModelError(f"{self.name}: generation failed: {e}")
                )

    def _evict(self, live: int, keep: int = 0) -> None:
        """Drop the least recently used kept caches until they fit beside ``live`` tokens, or
        only ``keep`` of them are left."""
        while len(self._store) > keep and self._store_tokens + live > self.budget_tokens:
            key, _ = self._store.popitem(last=False)
            self._store_tokens -= len(key)

    def _lookup(self, prompt: list[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        best, best_kv, best_key = 0, None, None
        prompt_key = tuple(prompt)
        for key, kv in self._store.items():
            n = len(os.path.commonprefix([key, prompt_key]))
            if n > best:
                best, best_kv, best_key = n, kv, key
        if best_key is not None:
            self._store.move_to_end(best_key)
        return min(best, len(prompt) - 1), best_kv

    def _prefill(self, req: Request) -> None:
        from transformers import DynamicCache

        torch = self._torch
        req.generator = torch.Generator(device=self.model.device)
        req.generator.manual_seed(req.seed if req.seed is not None else int(torch.randint(0, 2**31, (1,))))
        n, kv = self._lookup(req.prompt)
        cache = DynamicCache()
        if n > 0:
            for i, (k, v) in enumerate(kv):
                cache.update(k[:, :, :n].clone(), v[:, :, :n].clone(), i)
        req.reused = n
        if len(req.prompt) == 0:
            raise ModelError(f"{self.name}: an empty prompt")
        logits = None
        for a in range(n, len(req.prompt), self.prefill_chunk):
            chunk = req.prompt[a : a + self.prefill_chunk]
            ids = torch.tensor([chunk], device=self.model.device)
            pos = torch.arange(a, a + len(chunk), device=self.model.device)[None]
            logits = self.model(
                input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True, logits_to_keep=1
            ).logits[:, -1]
        self.stats["prompt_tokens"] += len(req.prompt)
        self.stats["reused_tokens"] += n
        self.stats["computed_tokens"] += len(req.prompt) - n
        kv_row = [(layer.keys, layer.values) for layer in cache.layers]
        if self._sample(req, logits[0]):
            self._finish(req, kv_row, len(req.prompt))
            return
        self._insert(req, kv_row, len(req.prompt))

    # -- the batch buffers ------------------------------------------------------------------
    def _insert(self, req: Request, kv_row: list[tuple[Any, Any]], length: int) -> None:
        free = next((r for r, x in enumerate(self._rows) if x is None), None)
        if free is None or length > self._columns or self._columns >= self._capacity():
            self._repack(extra=(req, kv_row, length))
            return
        c = self._columns
        for layer, (k, v) in zip(self._layers, kv_row):
            layer.buf_k[free, :, c - length : c] = k[0]
            layer.buf_v[free, :, c - length : c] = v[0]
        self._mask[free, :c] = 0
        self._mask[free, c - length : c] = 1
        self._rows[free], self._lens[free] = req, length

    def _capacity(self) -> int:
        return self._layers[0].buf_k.shape[2] if self._layers else 0

    def _repack(self, extra: tuple | None = None) -> None:
        """New buffers holding the live rows (and ``extra``, a prefilled ``(request, kv, length)``),
        right-aligned, with room to grow. Built one layer at a time, each old layer freed as soon
        as it is copied, so the copy costs one layer's memory, not the whole cache's."""
        torch = self._torch
        # (request, old row or None, length); the extra row's cache comes from its prefill
        live = [(r, i, self._lens[i]) for i, r in enumerate(self._rows) if r is not None]
        if extra is not None:
            live.append((extra[0], None, extra[2]))
        if not live:
            self._rows, self._lens, self._layers, self._mask, self._columns = [], [], [], None, 0
            return
        width = max(length for *_, length in live)
        room = max(r.max_new - len(r.ids) for r, *_ in live) + 1
        cap = width + min(room, 256)
        want = len(live) + (len(self._waiting) if extra is not None else 0)
        rows = min(self.max_batch, max(len(live), want))
        sample = extra[1][0][0] if extra is not None else self._layers[0].buf_k
        dtype, device = sample.dtype, sample.device
        del sample  # no reference may keep an old layer alive
        n_layers = len(extra[1]) if extra is not None else len(self._layers)
        old, c = self._layers, self._columns
        layers = []
        for li in range(n_layers):
            ref = extra[1][li][0] if extra is not None else old[li].buf_k
            shape = (rows, ref.shape[1], cap, ref.shape[-1])
            bk = torch.zeros(shape, dtype=dtype, device=device)
            bv = torch.zeros(shape, dtype=dtype, device=device)
            for r, (_, src, length) in enumerate(live):
                if src is None:
                    k, v = extra[1][li]
                    bk[r, :, width - length : width] = k[0, :, -length:]
                    bv[r, :, width - length : width] = v[0, :, -length:]
                else:
                    bk[r, :, width - length : width] = old[li].buf_k[src, :, c - length : c]
                    bv[r, :, width - length : width] = old[li].buf_v[src, :, c - length : c]
            layers.append(self._Layer(bk, bv, width))
            if li < len(old):
                old[li] = None  # this layer's old buffers are free now
        mask = torch.zeros((rows, cap + 1), dtype=torch.long, device=device)
        for r, (*_, length) in enumerate(live):
            mask[r, width - length : width] = 1
        self._layers, self._mask, self._columns = layers, mask, width
        self._rows = [r for r, *_ in live] + [None] * (rows - len(live))
        self._lens = [length for *_, length in live] + [0] * (rows - len(live))
        del old, ref
        trim_heap()  # the old buffers' pages go back to the OS (glibc keeps large freed blocks)

    def _row_kv(self, r: int) -> list[tuple[Any, Any]]:
        c, n = self._columns, self._lens[r]
        return [(layer.buf_k[r : r + 1, :, c - n : c], layer.buf_v[r : r + 1, :, c - n : c]) for layer in self._layers]

    # -- decoding ---------------------------------------------------------------------------
    def _decode(self) -> None:
        from transformers.cache_utils import Cache

        torch = self._torch
        if self._columns >= self._capacity():
            self._repack()
        live = [r for r, x in enumerate(self._rows) if x is not None]
        self.stats["peak_rows"] = max(self.stats["peak_rows"], len(live))
        if len(live) * 2 <= len(self._rows) and not self._waiting and len(self._rows) > 1:
            self._repack()  # shrink: half the rows are idle
            live = [r for r, x in enumerate(self._rows) if x is not None]
        c = self._columns
        device = self._mask.device
        tokens = torch.zeros((len(self._rows), 1), dtype=torch.long, device=device)
        pos = torch.zeros((len(self._rows), 1), dtype=torch.long, device=device)
        for r in live:
            tokens[r, 0] = self._rows[r].ids[-1]
            pos[r, 0] = self._lens[r]
        self._mask[:, c] = 1  # idle rows attend to this column only
        for layer in self._layers:
            layer.length = c
            layer._views()
        cache = Cache(layers=self._layers)
        logits = self.model(
            input_ids=tokens,
            attention_mask=self._mask[:, : c + 1],
            position_ids=pos,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self._columns = c + 1
        for r in range(len(self._rows)):
            if self._rows[r] is None:
                self._mask[r, : c + 1] = 0
        for r in live:
            req = self._rows[r]
            self._lens[r] += 1
            if self._sample(req, logits[r]):
                self._finish(req, self._row_kv(r), self._lens[r])
                self._rows[r] = None
                self._mask[r, : c + 1] = 0

    def _sample(self, req: Request, logits: Any) -> bool:
        """Sample the next token of ``req`` from ``logits`` (``[vocab]``); whether it ended."""
        torch = self._torch
        logits = logits[: self.vocab].float()
        if req.temperature > 0:
            logp = torch.log_softmax(logits / req.temperature, dim=-1)
            probs = logp.exp()
            if req.top_p < 1.0:
                sorted_p, order = probs.sort(descending=True)
                keep = sorted_p.cumsum(-1) - sorted_p < req.top_p
                probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_p[keep])
            tok = int(torch.multinomial(probs, 1, generator=req.generator))
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = int(logits.argmax())
        req.ids.append(tok)
        req.logprobs.append(float(logp[tok]))
        self.stats["generated_tokens"] += 1
        if tok in self.eos_ids:
            req.finish = "stop"
        elif req.stop and self._hits_stop(req):
            req.finish = "stop_string"
        elif len(req.ids) >= req.max_new:
            req.finish = "length"
        elif len(req.ids) % 16 == 0 and repeats(req.ids):
            req.finish = "repetition"
        return req.finish is not None

    def _hits_stop(self, req: Request) -> bool:
        tail = self.tokenizer.decode(req.ids[-24:], skip_special_tokens=False)
        return any(s and s in tail for s in req.stop)

    def _finish(self, req: Request, kv_row: list[tuple[Any, Any]], length: int) -> None:
        """Keep the request's cache for prefix reuse and resolve its future."""
        if length <= self.budget_tokens // 2:
            key = tuple((req.prompt + req.ids)[:length])
            for old in [k for k in self._store if len(k) <= length and key[: len(k)] == k]:
                self._store_tokens -= len(old)  # the earlier turns of this conversation: contained in the new key
                del self._store[old]
            self._store[key] = [(k[:, :, -length:].clone(), v[:, :, -length:].clone()) for k, v in kv_row]
            self._store_tokens += length
            self._evict(self._live_tokens(), keep=1)
        ids, logprobs, finish, text = req.ids, req.logprobs, req.finish, None
        if finish == "stop_string":
            k, text = ids_before_stop(self.tokenizer, req.ids, req.stop)
            ids, logprobs, finish = req.ids[:k], req.logprobs[:k], "stop"
        if not req.future.done():
            req.future.set_result(Completion(ids, logprobs, finish, len(req.prompt), req.reused, text))


def supports(model: Any) -> bool:
    """Whether :class:`KVEngine` can serve ``model``: a causal LM whose attention layers all
    use a full (not sliding-window or linear) cache."""
    cfg = model.config.get_text_config()
    kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    return kinds == {"full_attention"} and not getattr(cfg, "use_sliding_window", False)


def _eos_set(tokenizer: Any, model: Any) -> set[int]:
    ids = set()
    for src in (getattr(model, "generation_config", None), tokenizer):
        eos = getattr(src, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(e) for e in eos)
    return ids
