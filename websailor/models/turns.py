"""A chat template split into per-turn pieces: the exact token sequence of a multi-turn
conversation as the model saw it while generating.

Re-rendering a whole conversation with its chat template does not give the tokens the model
saw: templates rewrite earlier turns (Qwen3 drops their reasoning once a new user query
follows, and adds an empty think block to the last assistant turn), and re-tokenizing a
reply's text may split it otherwise than the sampled ids. So a conversation is assembled here
from pieces, each tokenized on its own, exactly as generation met them:

- the *head*: every message before the first assistant turn, rendered with the generation
  prompt (the assistant header);
- each assistant turn: its sampled ``token_ids`` when the turn carries them, else its text
  tokenized on its own (a *re-tokenized* turn: trajectories from an API, an expert or an
  older record);
- the *glue* after an assistant turn: what the template writes after it, through the next
  assistant header (the end-of-turn token, the user or tool-response turns, the header);
- the *close* after the last assistant turn: its end-of-turn token.

Generation (:class:`websailor.models.engine.KVEngine`), SFT data and the RL trainer's batch
all use this one assembly, so what is trained is what is generated (docs/rl.md, "Exact
tokens"). A template whose pieces cannot be found (:class:`TurnTemplate` raises) is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from websailor.errors import ConfigError
from websailor.models.base import Message

_MARK = "WEBSAILOR-TURN-7f3a9c"
_MARK_USER = "WEBSAILOR-USER-52be1d"
_PROBE_HEAD = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


class TemplateSplitError(ConfigError):
    """A chat template that does not render a conversation as head, turns and glue."""


@dataclass
class ConversationTokens:
    """A conversation as token ids.

    Attributes:
        ids: the token ids (head, turns, glue, close).
        mask: 1 on the tokens the model produced (a sampled turn's ids; a re-tokenized turn's
            ids and the tokens of the template's end-of-turn marker after it), 0 elsewhere;
            same length as ``ids``.
        head: the number of head tokens (the prompt of the first assistant turn).
        turns: assistant turns; ``retokenized``: how many of them had no sampled ids.
    """

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    head: int = 0
    turns: int = 0
    retokenized: int = 0


def model_vocab(tokenizer: Any) -> int:
    """The token ids a model may sample and train on: the tokenizer's, or the embedding's rows
    when the ``config.json`` beside the tokenizer (``tokenizer.name_or_path``) states more (a
    vocabulary padded past the tokenizer: Qwen's 151,936 rows for about 151,669 ids). A server
    that samples from every row (vLLM does) may return such an id; it decodes to no text and
    the model has its row."""
    import json

    size = len(tokenizer)
    config = os.path.join(str(getattr(tokenizer, "name_or_path", "") or ""), "config.json")
    try:
        with open(config, encoding="utf-8") as f:
            rows = json.load(f).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return size
    return max(size, rows) if isinstance(rows, int) and not isinstance(rows, bool) else size


class TurnTemplate:
    """The per-turn pieces of a tokenizer's chat template.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        name: the model's name, for error messages.

    Raises:
        TemplateSplitError: the template has no generation prompt, rewrites the head once an
            assistant turn follows, or does not write the turns verbatim (so the tokens the
            model saw cannot be assembled from pieces).
    """

    def __init__(self, tokenizer: Any, name: str = "model") -> None:
        self.tokenizer = tokenizer
        self.name = name
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateSplitError(f"{name}: the tokenizer has no chat template")
        try:
            bare = self.render(_PROBE_HEAD, generation_prompt=False)
            head = self.render(_PROBE_HEAD, generation_prompt=True)
            probe = self.render(
                [*_PROBE_HEAD, {"role": "assistant", "content": _MARK}, {"role": "user", "content": _MARK_USER}],
                generation_prompt=True,
            )
        except Exception as e:  # jinja raises many types (template errors, raise_exception)
            raise TemplateSplitError(f"{name}: the chat template failed on a probe conversation: {e}") from e
        self.header = head[len(bare) :] if head.startswith(bare) else ""
        at = probe.find(_MARK)
        why = None
        if not self.header:
            why = "it adds no assistant header for generation"
        elif at < 0 or probe.count(_MARK) != 1:
            why = "it does not write an assistant turn's text verbatim"
        elif not probe[:at].startswith(head):
            why = "it renders the head differently once an assistant turn follows"
        elif _MARK_USER not in probe[at:] or not probe.endswith(self.header):
            why = "its text after an assistant turn is not the next turns and the assistant header"
        if why:
            raise TemplateSplitError(f"{name}: the chat template cannot be split into per-turn pieces ({why})")
        self.eos_ids = _eos_ids(tokenizer)
        self.vocab_size = model_vocab(tokenizer)
        # what ends an assistant turn in text: common to the close and the glue, e.g. "<|im_end|>"
        self.end_marker = os.path.commonprefix(
            [self.close_text(), self.glue_text([{"role": "user", "content": _MARK_USER}])]
        ).rstrip()

    # -- text pieces ----------------------------------------------------------------------
    def render(self, messages: list[Message], generation_prompt: bool) -> str:
        """The template's text for ``messages`` (role and content only)."""
        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        return self.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=generation_prompt)

    def glue_text(self, between: list[Message]) -> str:
        """The text after an assistant turn through the next assistant header, with the
        ``between`` turns (user or tool responses) in the middle."""
        text = self.render([*_PROBE_HEAD, {"role": "assistant", "content": _MARK}, *between], generation_prompt=True)
        return text[text.index(_MARK) + len(_MARK) :]

    def glue_ids(self, between: list[Message]) -> list[int]:
        """:meth:`glue_text` as ids, the ``between`` turns' text encoded with special tokens
        split: a web page or tool output that contains ``<|im_end|>`` stays text and never
        becomes a control token. (When the template rewrites the turns' text, for example Llama
        3's trim, the rendered glue is encoded as it is.)"""
        marks = [f"WEBSAILOR-CONTENT-{k}-e41b" for k in range(len(between))]
        masked = self.glue_text([{**m, "content": mark} for m, mark in zip(between, marks)])
        whole = self.glue_text(between)
        rebuilt = masked
        for m, mark in zip(between, marks):
            rebuilt = rebuilt.replace(mark, m["content"], 1)
        if rebuilt != whole or any(masked.count(mark) != 1 for mark in marks):
            return self.encode(whole)
        ids: list[int] = []
        rest = masked
        for m, mark in zip(between, marks):
            head, _, rest = rest.partition(mark)
            ids += self.encode(head)
            ids += list(self.tokenizer(m["content"], add_special_tokens=False, split_special_tokens=True)["input_ids"])
        return ids + self.encode(rest)

    def close_text(self) -> str:
        """The text after a conversation's last assistant turn (its end-of-turn token)."""
        text = self.render([*_PROBE_HEAD, {"role": "assistant", "content": _MARK}], generation_prompt=False)
        return text[text.index(_MARK) + len(_MARK) :]

    def encode(self, text: str) -> list[int]:
        """``text`` as ids, without the tokenizer's own special tokens (the template writes them)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- assembly ---------------------------------------------------------------------------
    def conversation(self, messages: list[Message], sampled: bool = True) -> ConversationTokens:
        """The ids of ``messages`` as generation saw them, with the model-token mask.

        With ``sampled=False`` every assistant turn is re-tokenized from its text (SFT data,
        whose turns another model may have sampled with another vocabulary).

        A conversation that ends with a user turn ends with the assistant header (a prompt);
        one that ends with an assistant turn ends with that turn's end-of-turn token (the
        close is cut after it: nothing the template writes later belongs to the turn).

        Raises:
            ValueError: an assistant turn's ``token_ids`` are not a list of ints.
        """
        first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        out = ConversationTokens()
        out.ids = self.encode(self.render(messages[:first], generation_prompt=True))
        out.mask = [0] * len(out.ids)
        out.head = len(out.ids)
        i = first
        while i < len(messages):
            turn = messages[i]
            j = next((k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages))
            exact = turn.get("token_ids") if sampled else None
            if exact is not None:
                if not isinstance(exact, list) or not all(
                    isinstance(t, int) and 0 <= t < self.vocab_size for t in exact
                ):
                    raise ValueError(
                        f"assistant turn {out.turns + 1}: token_ids must be ids of this model "
                        f"(ints from 0 to {self.vocab_size - 1})"
                    )
                ids = list(exact)
            else:
                ids = self.encode(turn["content"])
                out.retokenized += 1
            out.turns += 1
            out.ids += ids
            out.mask += [1] * len(ids)
            if j < len(messages) or i + 1 < len(messages):  # turns follow: glue through the next header
                tail = self.glue_ids(messages[i + 1 : j])
            else:
                tail = self.encode(self.close_text())
                end = next((k for k, t in enumerate(tail) if t in self.eos_ids), None)
                tail = tail[: end + 1] if end is not None else tail
            if ids and ids[-1] in self.eos_ids and tail and tail[0] == ids[-1]:
                tail = tail[1:]  # the model wrote the end-of-turn token itself
            elif exact is None:  # a re-tokenized turn learns to end: its end-of-turn marker is trained
                k = self._marker_tokens(tail)
                out.ids += tail[:k]
                out.mask += [1] * k
                tail = tail[k:]
            out.ids += tail
            out.mask += [0] * len(tail)
            i = j
        return out

    def _marker_tokens(self, tail: list[int]) -> int:
        """How many leading tokens of ``tail`` lie wholly inside the end-of-turn marker."""
        k = 0
        while k < len(tail) and self.end_marker.startswith(self.tokenizer.decode(tail[: k + 1])):
            k += 1
        return k

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The ids generation continues from: ``messages`` (ending with a user turn) and the
        assistant header."""
        return self.conversation(messages).ids


def _eos_ids(tokenizer: Any) -> set[int]:
    """The tokens that end a turn: the tokenizer's EOS and the template's end-of-turn tokens
    that the vocabulary knows as single tokens."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.add(tid)
    return ids
