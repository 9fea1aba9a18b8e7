"""Local transformers backend served by :class:`websailor.models.engine.KVEngine`: prefix
reuse across the turns of a conversation, continuous batching of concurrent rollouts, and the
sampled token ids and log-probabilities of every reply.

A conversation is turned into prompt ids by :class:`websailor.models.turns.TurnTemplate`: an
assistant turn that carries its sampled ``token_ids`` is continued from exactly those ids, so
the next turn's prompt starts with the tokens of the previous one and its cache is reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from websailor.errors import ConfigError, ModelError
from websailor.log import get_logger
from websailor.models.base import ChatModel, Generation, Message, SamplingParams, cut_at_stop, decode_reply
from websailor.models.turns import TemplateSplitError, TurnTemplate

logger = get_logger(__name__)


def load_local(path: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """The model (eval mode) and tokenizer of a transformers directory.

    Raises:
        ConfigError: no ``config.json``, or a tokenizer without a chat template.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").exists():
        raise ConfigError(f"{path} is not a transformers model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.chat_template:
        raise ConfigError(f"{path}: the tokenizer has no chat template")
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    return model, tokenizer


def turn_budget(max_context: int) -> int:
    """The default completion budget of one turn for a model with ``max_context`` tokens: a
    32nd of its context, between 256 and 8,192 tokens (the embedded model, 8,192 tokens of
    context: 256; its well-formed replies measured 26 to 122 tokens)."""
    return max(256, min(8192, max_context // 32))


class TransformersModel(ChatModel):
    """A causal LM directory loaded with transformers (CPU by default).

    Args:
        path: a directory with ``config.json``, weights and a tokenizer with a chat template.
        device: torch device.
        max_batch: most requests decoded together (concurrent rollouts).
        kv_cache_bytes: key/value memory of the engine (:class:`~websailor.models.engine.KVEngine`).
        name: recorded in trajectories.

    Each request samples from its own generator seeded by the call's seed, so a rollout does
    not depend on which others share its batch (up to float rounding of batched kernels).
    ``presence_penalty`` has no exact equivalent here and is not applied (HTTP backends apply it).

    Raises:
        ConfigError: not a model directory, no chat template, or a model whose cache the engine
            cannot hold (use :class:`~websailor.models.hf_static.StaticTransformersModel`).
    """

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_batch: int = 8,
        kv_cache_bytes: int | None = None,
        name: str | None = None,
    ) -> None:
        model, tokenizer = load_local(path, device)
        self._setup(model, tokenizer, name or f"hf:{path}", max_batch, kv_cache_bytes)

    @classmethod
    def from_loaded(
        cls, model: Any, tokenizer: Any, name: str, max_batch: int = 8, kv_cache_bytes: int | None = None
    ) -> TransformersModel:
        """Serve an already loaded model (for example the RL policy) on its device, as it is
        (the caller sets eval mode). A new instance starts with no kept cache: build one after
        every weight update so that no key/value computed with old weights is reused.

        Raises:
            ConfigError: the tokenizer has no chat template, or the engine cannot serve the model.
        """
        if not tokenizer.chat_template:
            raise ConfigError(f"{name}: the tokenizer has no chat template")
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name, max_batch, kv_cache_bytes)
        return self

    def _setup(self, model: Any, tokenizer: Any, name: str, max_batch: int, kv_cache_bytes: int | None) -> None:
        from websailor.models.engine import KVEngine, supports

        if not supports(model):
            raise ConfigError(f"{name}: the engine holds full-attention caches only; this model has other layers")
        self.name = name
        self.tokenizer = tokenizer
        self.model = model
        self.max_context = int(getattr(model.config, "max_position_embeddings", 8192))
        self.turn_tokens = turn_budget(self.max_context)
        self.question_timeout_s = 30 * 60.0
        try:
            self.turns: TurnTemplate | None = TurnTemplate(tokenizer, name)
        except TemplateSplitError as e:
            logger.warning("%s; each turn is re-rendered from text (no exact tokens, less prefix reuse)", e)
            self.turns = None
        # the template's end-of-turn tokens end a reply too (a ChatML fine-tune of a base model)
        eos = self.turns.eos_ids if self.turns is not None else None
        self.engine = KVEngine(model, tokenizer, max_batch, kv_cache_bytes, name=name, eos_ids=eos)

    # -- prompts -------------------------------------------------------------------------
    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The ids generation continues from: exact per-turn pieces when the template splits,
        else the rendered text tokenized."""
        if self.turns is not None:
            return self.turns.prompt_ids(messages)
        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        text = self.tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count_tokens(self, messages: list[Message]) -> int:
        return len(self.prompt_ids(messages))

    # -- generation ----------------------------------------------------------------------
    def generate(self, conversations: list[list[Message]], params: SamplingParams) -> list[Generation]:
        """Reply to each conversation; concurrent calls from several threads share the engine's
        batch. A prompt that fills the context gets an empty ``length`` reply."""
        from websailor.models.engine import Request

        pending: list[tuple[int, Any]] = []
        for messages in conversations:
            try:
                prompt = self.prompt_ids(messages)
            except ValueError as e:
                raise ModelError(f"{self.name}: {e}") from e
            room = self.max_context - len(prompt)
            if room <= 0:
                pending.append((len(prompt), None))
                continue
            req = Request(
                prompt=prompt,
                max_new=min(params.max_tokens, room),
                temperature=params.temperature,
                top_p=params.top_p,
                seed=params.seed,
                stop=list(params.stop or []),
            )
            pending.append((len(prompt), self.engine.submit(req)))
        out = []
        for n_prompt, fut in pending:
            if fut is None:
                out.append(Generation("", n_prompt, 0, "length", [], []))
                continue
            done = fut.result()
            ids = done.ids
            body = ids[:-1] if ids and ids[-1] in self.engine.eos_ids else ids
            if done.text is not None:  # cut at a stop string: the ids may end inside it, the text does not
                text = done.text
            else:
                text = decode_reply(self.tokenizer, body, cut=done.finish in ("length", "repetition"))
                text, _ = cut_at_stop(text, params.stop)
            out.append(Generation(text, n_prompt, len(ids), done.finish, list(ids), list(done.logprobs)))
        return out

    def close(self) -> None:
        self.engine.close()
