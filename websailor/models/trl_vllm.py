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
from websailor.models.base import Generation, Message, SamplingParams, cut_at_stop
from websailor.models.batching import BatchedChat


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
        self.name = name
        self.max_context = int(getattr(trainer.model.config, "max_position_embeddings", 131072))
        self.start_batching(max_batch, batch_wait_s)

    def generate(
        self, conversations: list[list[Message]], params: SamplingParams, limits: list[int] | None = None
    ) -> list[Generation]:
        prompts = [
            self.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True) for c in conversations
        ]
        prompts = [list(p["input_ids"]) if isinstance(p, dict) or hasattr(p, "keys") else list(p) for p in prompts]
        try:
            _, completions, *_ = self.gen.generate(prompts, None, 1)
        except Exception as e:  # vLLM raises several types
            raise ModelError(f"{self.name}: vLLM generation failed: {type(e).__name__}: {e}") from e
        limits = limits or [params.max_tokens] * len(conversations)
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        out = []
        for ids, prompt, limit in zip(completions, prompts, limits):
            ids = list(ids)[:limit]
            n = next((i for i, t in enumerate(ids) if t in eos), len(ids))
            text, stopped = cut_at_stop(self.tokenizer.decode(ids[:n], skip_special_tokens=True), params.stop)
            finish = "stop" if (n < len(ids) or stopped) else "length"
            out.append(Generation(text, len(prompt), n + (1 if n < len(ids) else 0), finish))
        return out
