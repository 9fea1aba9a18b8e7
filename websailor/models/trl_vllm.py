"""The RL policy served by TRL's vLLM integration (GPU runs with ``use_vllm``).

``GRPOTrainer`` owns the vLLM engine (``trainer.vllm_generation``) and pushes the current
weights into it before each call of the rollout function; this backend only turns the agent's
conversations into prompt token ids and the returned ids into text, each turn of each
concurrent rollout gathered into one ``generate`` call by :class:`BatchedChat`.

Sampling (temperature, top-p, the token budget of a reply) is the trainer's own
(``GRPOConfig.temperature``, ``top_p``, ``max_completion_length``), so the per-call settings
of the agent apply only as a cut of each reply at its stop strings and token limit. Runs in
``colocate`` mode with tensor parallel size 1, where each process generates for its own
rollouts; ``server`` mode gathers prompts across processes in lock-step, which multi-turn
rollouts of different lengths cannot keep, and is refused.

Not exercised in CI (no GPU); see docs/rl.md, "RL on GPUs".
"""

from __future__ import annotations

from typing import Any

from websailor.errors import ConfigError, ModelError
from websailor.models.base import Generation, Message, SamplingParams, cut_at_stop, decode_reply
from websailor.models.batching import BatchedChat
from websailor.models.turns import TurnTemplate


class TRLVLLMModel(BatchedChat):
    """Chat backend over ``trainer.vllm_generation``.

    Raises:
        ConfigError: the trainer does not use vLLM in colocate mode with tensor parallel size 1.
    """

    def __init__(self, trainer: Any, name: str, max_batch: int = 64, batch_wait_s: float = 0.05) -> None:
        gen = getattr(trainer, "vllm_generation", None)
        if gen is None or getattr(gen, "mode", None) != "colocate" or getattr(gen, "tensor_parallel_size", 1) != 1:
            raise ConfigError(
                "RL with vLLM needs vllm_mode colocate and tensor parallel size 1 (multi-turn rollouts "
                "cannot keep server mode's lock-step across processes)"
            )
        self.gen = gen
        self.tokenizer = trainer.processing_class
        self.turns = TurnTemplate(self.tokenizer, name)
        self.name = name
        self.max_context = int(getattr(trainer.model.config, "max_position_embeddings", 131072))
        self.start_batching(max_batch, batch_wait_s)

    def generate(
        self, conversations: list[list[Message]], params: SamplingParams, limits: list[int] | None = None
    ) -> list[Generation]:
        try:
            prompts = [self.turns.prompt_ids(c) for c in conversations]
        except ValueError as e:
            raise ModelError(f"{self.name}: {e}") from e
        try:
            _, completions, logprobs, *_ = self.gen.generate(prompts, None, 1)
        except Exception as e:  # vLLM raises several types
            raise ModelError(f"{self.name}: vLLM generation failed: {type(e).__name__}: {e}") from e
        limits = limits or [params.max_tokens] * len(conversations)
        eos = self.turns.eos_ids
        out = []
        for row, (ids, prompt, limit) in enumerate(zip(completions, prompts, limits)):
            ids = list(ids)[:limit]
            # vLLM's top-1 entry per token is the sampled token's log-probability
            lps = [
                float(lp[0]) if isinstance(lp, (list, tuple)) else float(lp)
                for lp in (logprobs[row] if logprobs else [])
            ]
            n = next((i for i, t in enumerate(ids) if t in eos), len(ids))
            keep = ids[: n + 1] if n < len(ids) else ids
            text = decode_reply(self.tokenizer, ids[:n], cut=n == len(ids))
            text, stopped = cut_at_stop(text, params.stop)
            finish = "stop" if (n < len(ids) or stopped) else "length"
            out.append(Generation(text, len(prompt), len(keep), finish, keep, lps[: len(keep)] if lps else None))
        return out
