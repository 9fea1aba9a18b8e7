"""Group advantages of the paper's two RL algorithms, as small pure functions.

Rewards arrive flat, group after group: ``rewards[g * G + i]`` is rollout ``i`` of group
``g`` (one question, ``G`` rollouts). ``None`` marks a missing reward (the judge failed); a
group with a missing reward gets no advantage and no loss (it is skipped, and counted).

- ``v2`` (WebSailor-V2, arXiv 2509.13305, Sec. 5): A_i = R_i - mean_{j != i} R_j, the
  leave-one-out baseline, no std normalization; rollouts that never reached an answer (cut by
  calls, context or time) and carry a negative advantage are left out of the loss.
- ``dupo`` (WebSailor V1, arXiv 2507.02592, Sec. 4): A_i = (R_i - mean(R)) / std(R) within the
  group; groups whose rewards have zero spread are dropped and their batch slots refilled by
  duplicating groups of the same batch that do have spread.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

#: Terminations that mean "never reached an answer" (V2's negative exclusion).
NO_ANSWER = ("max_calls", "context", "timeout")


def _groups(values: Sequence, group_size: int) -> list[list]:
    if group_size < 2:
        raise ValueError(f"group size must be at least 2 for a group baseline, got {group_size}")
    if len(values) % group_size:
        raise ValueError(f"{len(values)} rewards do not split into groups of {group_size}")
    return [list(values[i : i + group_size]) for i in range(0, len(values), group_size)]


def leave_one_out_advantages(rewards: Sequence[float | None], group_size: int) -> list[float | None]:
    """V2 advantages: each reward minus the mean reward of the other rollouts of its group.

    Args:
        rewards: flat, ``len = n_groups * group_size``; ``None`` = missing.
        group_size: rollouts per question, at least 2.

    Returns:
        One advantage per rollout; ``None`` for every rollout of a group with a missing reward.

    Raises:
        ValueError: group size below 2, or a length that is not a multiple of it.
    """
    out: list[float | None] = []
    for group in _groups(rewards, group_size):
        if any(r is None for r in group):
            out += [None] * group_size
            continue
        total = sum(group)
        out += [r - (total - r) / (group_size - 1) for r in group]
    return out


def group_normalized_advantages(
    rewards: Sequence[float | None], group_size: int, eps: float = 1e-4
) -> list[float | None]:
    """DUPO advantages: ``(R - mean) / (std + eps)`` within each group, with the sample
    standard deviation (n - 1), as TRL's GRPO computes it. A zero-spread group gets zeros.

    Returns and raises as :func:`leave_one_out_advantages`.
    """
    out: list[float | None] = []
    for group in _groups(rewards, group_size):
        if any(r is None for r in group):
            out += [None] * group_size
            continue
        mean = sum(group) / group_size
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (group_size - 1))
        out += [(r - mean) / (std + eps) for r in group]
    return out


def v2_loss_mask(
    advantages: Sequence[float | None], terminations: Sequence[str], exclude_unanswered: bool = True
) -> list[bool]:
    """Which rollouts enter the V2 loss: not those whose reward is missing, and (with
    ``exclude_unanswered``, the paper's rule) not those that never reached an answer
    (:data:`NO_ANSWER`) while carrying a negative advantage (a rollout cut by the budget is not
    evidence that its reasoning was wrong). Without it, such rollouts enter the loss, and what
    ran them out of budget is pushed down as any wrong answer is.

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(advantages) != len(terminations):
        raise ValueError(f"{len(advantages)} advantages but {len(terminations)} terminations")
    return [
        a is not None and not (exclude_unanswered and a < 0 and t in NO_ANSWER)
        for a, t in zip(advantages, terminations)
    ]


def has_spread(group: Sequence[float | None]) -> bool:
    """A group whose rewards are all known and not all equal (it has a learning signal)."""
    return all(r is not None for r in group) and max(group) > min(group)


@dataclass
class BatchPlan:
    """What one batch of rollouts trains on.

    Attributes:
        slots: for each batch slot, the index of the rollout that fills it (the identity,
            except for DUPO's duplicated groups).
        advantages: per slot (0.0 where no advantage exists).
        in_loss: per slot, whether its tokens enter the loss.
        zero_spread_groups: groups whose rewards were all known and equal.
        skipped_groups: groups with a missing reward (the judge failed on one of them).
        duplicated_groups: DUPO slots refilled with a copy of another group.
    """

    slots: list[int]
    advantages: list[float]
    in_loss: list[bool]
    zero_spread_groups: int = 0
    skipped_groups: int = 0
    duplicated_groups: int = 0


def plan_batch(
    rewards: Sequence[float | None],
    terminations: Sequence[str],
    group_size: int,
    algo: str,
    rng: random.Random,
    exclude_unanswered: bool = True,
) -> BatchPlan:
    """Turn one batch of group rewards into slots, advantages and loss membership.

    - ``v2``: every rollout keeps its slot; leave-one-out advantages; :func:`v2_loss_mask`
      leaves out skipped groups and (``exclude_unanswered``) negative rollouts that never
      reached an answer.
    - ``dupo``: :func:`dupo_fill` refills zero-spread and skipped groups with copies of groups
      that have spread, then group-normalized advantages; a batch with no spread at all
      trains on nothing.

    Raises:
        ValueError: an unknown ``algo``, mismatched lengths, or a bad group size.
    """
    if len(rewards) != len(terminations):
        raise ValueError(f"{len(rewards)} rewards but {len(terminations)} terminations")
    groups = _groups(rewards, group_size)
    skipped = sum(any(r is None for r in g) for g in groups)
    zero = sum(all(r is not None for r in g) and not has_spread(g) for g in groups)
    n = len(rewards)
    if algo == "v2":
        adv = leave_one_out_advantages(rewards, group_size)
        keep = v2_loss_mask(adv, terminations, exclude_unanswered)
        return BatchPlan(list(range(n)), [a or 0.0 for a in adv], keep, zero, skipped)
    if algo != "dupo":
        raise ValueError(f"unknown RL algorithm {algo!r}; use v2 or dupo")
    fill = dupo_fill(rewards, group_size, rng)
    if fill is None:
        return BatchPlan(list(range(n)), [0.0] * n, [False] * n, zero, skipped)
    slots = [g * group_size + i for g in fill for i in range(group_size)]
    adv = group_normalized_advantages([rewards[s] for s in slots], group_size)
    moved = sum(f != g for g, f in enumerate(fill))
    return BatchPlan(slots, [a or 0.0 for a in adv], [True] * n, zero, skipped, moved)


def dupo_fill(rewards: Sequence[float | None], group_size: int, rng: random.Random) -> list[int] | None:
    """DUPO's batch repair: for each group slot, the group that fills it.

    Groups with spread keep their own slot; every zero-spread group (or one with a missing
    reward) is replaced by a copy of a randomly chosen group with spread from the same batch,
    so the batch keeps its size and every slot carries a learning signal.

    Returns:
        ``len = n_groups`` indices into the batch's groups, or ``None`` when no group of the
        batch has spread (the batch has no signal at all: skip it).
    """
    groups = _groups(rewards, group_size)
    useful = [g for g, group in enumerate(groups) if has_spread(group)]
    if not useful:
        return None
    return [g if has_spread(group) else rng.choice(useful) for g, group in enumerate(groups)]
