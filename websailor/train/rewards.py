"""Rewards of agent rollouts for RL.

- ``v2`` (WebSailor-V2, arXiv 2509.13305, Sec. 5): 0/1 correctness of the final answer.
- ``dupo`` (WebSailor V1, arXiv 2507.02592, Sec. 4): ``0.1 * format + 0.9 * answer``, where
  format is 1 when the rollout ended with an answer and every assistant turn followed the
  protocol (parsed into a tool call or an answer).

On report tasks the judge's verdict is a score in [0, 1] (the report's RACE score,
:mod:`websailor.train.rl.report_reward`) and takes the place of the 0/1 answer: ``v2``'s
reward is the score, ``dupo``'s ``0.1 * format + 0.9 * score``.

A rollout the judge could not grade has no reward (``None``): its group is skipped.
"""

from __future__ import annotations

from websailor.agent.parse import count_valid_turns
from websailor.agent.trajectory import Trajectory


def format_score(traj: Trajectory) -> float:
    """1.0 when ``traj`` ended with an answer and all its assistant turns parse, else 0.0."""
    valid, total = count_valid_turns(traj.messages)
    return float(traj.termination == "answer" and total > 0 and valid == total)


def reward(traj: Trajectory, correct: bool | float | None, algo: str) -> float | None:
    """The reward of one rollout under ``algo`` (``v2`` or ``dupo``), given the judge's
    verdict: ``True``/``False``, or a score in [0, 1] for a report (``None``: ungraded, so no
    reward). A rollout that did not end with an answer earns no answer reward.

    Raises:
        ValueError: an unknown algorithm, or a score outside [0, 1].
    """
    if algo not in ("v2", "dupo"):
        raise ValueError(f"unknown RL algorithm {algo!r}; use v2 or dupo")
    if correct is None:
        return None
    if not isinstance(correct, bool) and not 0.0 <= correct <= 1.0:
        raise ValueError(f"a report's score must lie in [0, 1], got {correct!r}")
    answer = float(correct) if traj.termination == "answer" else 0.0
    return answer if algo == "v2" else 0.1 * format_score(traj) + 0.9 * answer
