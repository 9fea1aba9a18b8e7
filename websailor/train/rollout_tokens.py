"""A finished multi-turn rollout as the token sequences GRPO trains on.

TRL's ``GRPOTrainer`` takes, per rollout, the prompt ids, the completion ids and an
``env_mask`` over the completion (1 on tokens the model produced, 0 on tokens the environment
wrote). Here the prompt is the system prompt and the question up to the first assistant
header; the completion is everything after it, through the end-of-turn token of the last
assistant turn, so tool responses sit inside the completion with mask 0 and never enter the
loss.

The ids come from re-tokenizing the chat-templated conversation (:meth:`Trajectory.token_view`),
the standard approximation of agent RL frameworks: a reply is kept as the text the model
wrote, so its ids may differ from the sampled ones where the tokenizer would split that text
otherwise. With strictly on-policy updates the old log-probabilities are recomputed on these
same ids, so the importance ratio stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from websailor.agent.trajectory import Trajectory


@dataclass
class RolloutTokens:
    """``prompt_ids`` (system prompt + question + assistant header), ``completion_ids`` and
    ``env_mask`` (same length as ``completion_ids``; 1 = model token, 0 = tool response,
    role headers and template glue)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]

    @property
    def model_tokens(self) -> int:
        """Tokens the model wrote (the ones that can carry loss)."""
        return sum(self.env_mask)


def rollout_tokens(traj: Trajectory, tokenizer: Any) -> RolloutTokens:
    """Split ``traj`` into prompt and completion ids with the model-token mask.

    A rollout that never produced a reply (a model error on the first call) gets a one-token
    completion (the end-of-sequence token) with mask 0: it exists in the batch but carries no
    loss.

    Args:
        traj: a finished rollout whose first two messages are the system prompt and question.
        tokenizer: the policy's fast tokenizer with its chat template.

    Raises:
        ValueError: the conversation does not start with system and user messages, or the
            template tokenizes the prompt differently inside the whole conversation.
    """
    head = traj.messages[:2]
    if [m.get("role") for m in head] != ["system", "user"]:
        raise ValueError(f"rollout {traj.id}/{traj.rollout} does not start with a system prompt and a question")
    prompt_text = tokenizer.apply_chat_template(head, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    if len(traj.messages) == 2:
        return RolloutTokens(list(prompt_ids), [tokenizer.eos_token_id], [0])
    ids, mask = traj.token_view(tokenizer)
    n = len(prompt_ids)
    if ids[:n] != list(prompt_ids):
        raise ValueError(
            f"rollout {traj.id}/{traj.rollout}: the template tokenizes the prompt differently "
            "inside the conversation; this tokenizer cannot be trained with multi-turn RL here"
        )
    last = max((i for i, m in enumerate(mask) if m), default=-1)
    if last < n:  # no assistant token after the prompt
        return RolloutTokens(list(prompt_ids), [tokenizer.eos_token_id], [0])
    return RolloutTokens(list(prompt_ids), ids[n : last + 1], mask[n : last + 1])
