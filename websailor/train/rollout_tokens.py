"""A finished multi-turn rollout as the token sequences GRPO trains on.

TRL's ``GRPOTrainer`` takes, per rollout, the prompt ids, the completion ids and an
``env_mask`` over the completion (1 on tokens the model produced, 0 on tokens the environment
wrote). Here the prompt is the system prompt and the question up to the first assistant
header; the completion is everything after it, through the end-of-turn token of the last
assistant turn, so tool responses sit inside the completion with mask 0 and never enter the
loss.

The completion is assembled from per-turn pieces (:class:`websailor.models.turns.TurnTemplate`):
each model turn is the ids the policy sampled, as recorded in its assistant message, and the
tool responses and template glue between turns are tokenized on their own (mask 0); no model
text is re-tokenized. A turn recorded without ids (a backend that returns none) is tokenized
from its text, counted in :attr:`RolloutTokens.retokenized`, and its log-probabilities are
unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from websailor.agent.trajectory import Trajectory
from websailor.models.turns import TurnTemplate


@dataclass
class RolloutTokens:
    """``prompt_ids`` (system prompt + question + assistant header), ``completion_ids`` and
    ``env_mask`` (same length as ``completion_ids``; 1 = model token, 0 = tool response,
    role headers and template glue). ``logprobs``: the sampling log-probability of each
    completion token (0.0 on environment tokens), or ``None`` when a model turn has none.
    ``turns``: model turns; ``retokenized``: those tokenized from text."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float] | None = None
    turns: int = 0
    retokenized: int = 0
    sampled_turn_ids: list[list[int]] = field(default_factory=list)

    @property
    def model_tokens(self) -> int:
        """Tokens the model wrote (the ones that can carry loss)."""
        return sum(self.env_mask)


def rollout_tokens(traj: Trajectory, tokenizer: Any, template: TurnTemplate | None = None) -> RolloutTokens:
    """Split ``traj`` into prompt and completion ids with the model-token mask.

    A rollout that never produced a reply (a model error on the first call) gets a one-token
    completion (the end-of-sequence token) with mask 0: it exists in the batch but carries no
    loss.

    Args:
        traj: a finished rollout whose first two messages are the system prompt and question.
        tokenizer: the policy's tokenizer with its chat template.
        template: its :class:`TurnTemplate` (built from ``tokenizer`` when not given).

    Raises:
        ValueError: the conversation does not start with system and user messages, a turn's
            recorded ``token_ids`` are not ids of this model
            (:func:`~websailor.models.turns.model_vocab`), or the rollout was summarized
            (:mod:`websailor.agent.summarize`): its turns are several sequences, which
            token-exact RL does not train (docs/reports.md).
        TemplateSplitError: the template cannot be split into per-turn pieces.
    """
    if any(s.get("text") for s in traj.summaries):
        raise ValueError(
            f"rollout {traj.id}/{traj.rollout} was summarized (its earlier turns were replaced by a summary): "
            "token-exact RL over summarized rollouts is not supported; RL rollouts run without summarization"
        )
    head = traj.messages[:2]
    if [m.get("role") for m in head] != ["system", "user"]:
        raise ValueError(f"rollout {traj.id}/{traj.rollout} does not start with a system prompt and a question")
    template = template or TurnTemplate(tokenizer, traj.model or "policy")
    try:
        conv = template.conversation(traj.messages)
    except ValueError as e:
        raise ValueError(f"rollout {traj.id}/{traj.rollout}: {e}") from None
    prompt = conv.ids[: conv.head]
    last = max((i for i, m in enumerate(conv.mask) if m), default=-1)
    if last < conv.head:  # no assistant token after the prompt
        return RolloutTokens(prompt, [tokenizer.eos_token_id], [0], [0.0], conv.turns, conv.retokenized)
    ids, mask = conv.ids[conv.head :], conv.mask[conv.head :]
    end = len(ids)
    eos = template.eos_ids
    # through the end-of-turn token after the last model token (the trainer reads a completion
    # that does not end with it as truncated)
    k = last - conv.head + 1
    while k < end and ids[k - 1] not in eos:
        k += 1
    ids, mask = ids[:k], mask[:k]
    turns = [m for m in traj.messages if m.get("role") == "assistant"]
    sampled = [m["token_ids"] for m in turns if m.get("token_ids") is not None]
    logprobs = _logprobs(turns, ids, mask) if not conv.retokenized else None
    return RolloutTokens(prompt, ids, mask, logprobs, conv.turns, conv.retokenized, sampled)


def _logprobs(turns: list[dict], ids: list[int], mask: list[int]) -> list[float] | None:
    """The sampling log-probabilities laid over the completion: each run of mask-1 tokens is
    one turn's sampled ids, in order; ``None`` when a turn recorded no log-probabilities."""
    runs = [t.get("logprobs") for t in turns]
    if any(r is None or len(r) != len(t.get("token_ids") or []) for r, t in zip(runs, turns)):
        return None
    flat = [x for r in runs if r for x in r]
    out, j = [], 0
    for m in mask:
        if m:
            if j >= len(flat):
                return None
            out.append(float(flat[j]))
            j += 1
        else:
            out.append(0.0)
    return out if j == len(flat) else None
