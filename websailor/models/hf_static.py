"""The static local backend: one left-padded ``generate`` per micro-batch of concurrent
rollouts (:class:`websailor.models.batching.BatchedChat`), the whole conversation re-encoded
at every turn.

It is the baseline that ``benchmarks/rollout_throughput.py`` measures the engine against
(:class:`websailor.models.hf.TransformersModel`), and the backend of models the engine cannot
serve (sliding-window or linear-attention caches, :func:`websailor.models.engine.supports`).
Its replies carry no token ids (each turn is re-rendered from text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from websailor.errors import ConfigError, ModelError
from websailor.models.base import Generation, Message, SamplingParams, cut_at_stop, decode_reply
from websailor.models.batching import BatchedChat
from websailor.models.hf import load_local


class StaticTransformersModel(BatchedChat):
    """A causal LM directory loaded with transformers (CPU by default), served by static ``generate``.

    Args:
        path: a directory with ``config.json``, weights and a tokenizer with a chat template.
        device: torch device.
        max_batch: most conversations per ``generate`` call.
        batch_wait_s: how long the batcher waits for more requests after the first.

    Concurrent :meth:`chat` calls (rollouts on threads) are gathered into one batched
    ``generate``; a batch samples under one seed made from its members' seeds, so a rollout is
    reproducible only with the same batch companions (``--concurrency 1`` for exact replays).

    Note: ``presence_penalty`` has no exact equivalent in transformers' sampling and is not
    applied here (HTTP backends apply it).
    """

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_batch: int = 8,
        batch_wait_s: float = 0.02,
        name: str | None = None,
    ) -> None:
        model, tokenizer = load_local(path, device)
        self._setup(model, tokenizer, name or f"hf:{path}", device, max_batch, batch_wait_s)

    @classmethod
    def from_loaded(
        cls, model: Any, tokenizer: Any, name: str, max_batch: int = 8, batch_wait_s: float = 0.02
    ) -> StaticTransformersModel:
        """Serve an already loaded model (for example the policy being trained by RL) on the
        device it sits on. The tokenizer is copied (generation pads on the left) and the model
        is used as it is: the caller sets eval mode and gradients.

        Raises:
            ConfigError: the tokenizer has no chat template.
        """
        import copy

        if not tokenizer.chat_template:
            raise ConfigError(f"{name}: the tokenizer has no chat template")
        self = cls.__new__(cls)
        self._setup(model, copy.deepcopy(tokenizer), name, str(model.device), max_batch, batch_wait_s)
        return self

    def _setup(self, model: Any, tokenizer: Any, name: str, device: str, max_batch: int, batch_wait_s: float) -> None:
        import torch

        self.name = name
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model
        self.device = device
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 8192))
        self._torch = torch
        self.start_batching(max_batch, batch_wait_s)

    # -- direct batch generation ---------------------------------------------------------
    def render(self, messages: list[Message]) -> str:
        """The chat-templated prompt text, ending with the assistant header."""
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def count_tokens(self, messages: list[Message]) -> int:
        return len(self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"])

    def generate(
        self, conversations: list[list[Message]], params: SamplingParams, limits: list[int] | None = None
    ) -> list[Generation]:
        """Reply to each conversation in one left-padded ``generate`` call; ``limits``
        (optional) caps each reply's tokens below ``params.max_tokens``."""
        torch = self._torch
        texts = [self.render(c) for c in conversations]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        width = enc["input_ids"].shape[1]
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        room = self.max_context - width
        if room <= 0:
            return [Generation("", int(n), 0, "length") for n in prompt_lens]
        kwargs = dict(max_new_tokens=min(params.max_tokens, room), pad_token_id=self.tokenizer.pad_token_id)
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(do_sample=False)
        if params.stop:
            kwargs.update(stop_strings=params.stop, tokenizer=self.tokenizer)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        try:
            with torch.inference_mode():
                out = self.model.generate(**enc, **kwargs)
        except (RuntimeError, ValueError) as e:
            raise ModelError(f"{self.name}: generation failed: {e}") from e
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        results = []
        limits = limits or [params.max_tokens] * len(conversations)
        for row, n_prompt, limit in zip(out[:, width:].tolist(), prompt_lens, limits):
            row = row[:limit]
            n = next((i for i, t in enumerate(row) if t in eos), len(row))
            text = decode_reply(self.tokenizer, row[:n], cut=n == len(row))
            text, stopped = cut_at_stop(text, params.stop)
            finish = "stop" if (n < len(row) or stopped) else "length"
            results.append(Generation(text, int(n_prompt), n + (1 if n < len(row) else 0), finish))
        return results
