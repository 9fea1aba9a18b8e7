"""RL advantages on hand-computed groups."""

import random

import pytest

from websailor.train.advantages import dupo_fill, group_normalized_advantages, leave_one_out_advantages, v2_loss_mask


def test_leave_one_out_by_hand():
    # group 1: R = 1, 0, 0, 1 -> others' means 1/3, 2/3, 2/3, 1/3; group 2: all equal -> zeros
    adv = leave_one_out_advantages([1, 0, 0, 1, 1, 1, 1, 1], 4)
    assert adv == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0])
    # one of three solved: 1 - 0 = 1, and 0 - (1 + 0) / 2 = -0.5 for the others
    assert leave_one_out_advantages([0, 1, 0], 3) == pytest.approx([-0.5, 1, -0.5])
    # a missing reward skips its whole group, not the others
    assert leave_one_out_advantages([1, None, 0, 1], 2) == [None, None, -1, 1]


def test_group_normalized_by_hand():
    # R = 1, 0, 0, 0: mean 0.25, sample std sqrt(0.75 / 3) = 0.5 -> 1.5, -0.5, -0.5, -0.5
    assert group_normalized_advantages([1, 0, 0, 0], 4, eps=0) == pytest.approx([1.5, -0.5, -0.5, -0.5])
    assert group_normalized_advantages([0.1, 0.1], 2) == [0, 0]


def test_bad_groups():
    with pytest.raises(ValueError, match="at least 2"):
        leave_one_out_advantages([1], 1)
    with pytest.raises(ValueError, match="5 rewards do not split into groups of 2"):
        group_normalized_advantages([1, 0, 1, 0, 1], 2)


def test_v2_leaves_out_negative_rollouts_that_never_answered():
    adv = [2 / 3, -2 / 3, -2 / 3, 2 / 3, None, None]
    terms = ["answer", "max_calls", "answer", "timeout", "answer", "answer"]
    # the cut rollout with a negative advantage is out; the wrong answer stays; a positive cut one stays
    assert v2_loss_mask(adv, terms) == [True, False, True, True, False, False]


def test_dupo_refills_zero_spread_groups_from_groups_with_spread():
    rewards = [1, 0, 0, 0, 1, 1, 0.1, 1, None, 1]  # groups of 2: spread, none, none, spread, missing
    fill = dupo_fill(rewards, 2, random.Random(0))
    assert len(fill) == 5 and fill[0] == 0 and fill[3] == 3
    assert all(g in (0, 3) for g in fill)  # every slot now holds a group with spread
    assert dupo_fill([1, 1, 0, 0], 2, random.Random(0)) is None  # no signal in the batch at all


def test_rewards_by_algorithm():
    from websailor.agent.trajectory import Trajectory
    from websailor.train.rewards import reward

    good = Trajectory(
        "q",
        0,
        "?",
        termination="answer",
        prediction="Nile",
        messages=[{"role": "assistant", "content": "<answer>Nile</answer>"}],
    )
    sloppy = Trajectory(
        "q",
        1,
        "?",
        termination="answer",
        prediction="Nile",
        messages=[
            {"role": "assistant", "content": "hmm"},
            {"role": "user", "content": "error"},
            {"role": "assistant", "content": "<answer>Nile</answer>"},
        ],
    )
    cut = Trajectory("q", 2, "?", termination="max_calls", messages=[{"role": "assistant", "content": "hmm"}])
    assert [reward(t, c, "v2") for t, c in ((good, True), (sloppy, True), (cut, False), (good, None))] == [
        1,
        1,
        0,
        None,
    ]
    assert [
        reward(t, c, "dupo") for t, c in ((good, True), (sloppy, True), (good, False), (cut, False))
    ] == pytest.approx([1.0, 0.9, 0.1, 0.0])
    with pytest.raises(ValueError, match="unknown RL algorithm 'ppo'"):
        reward(good, True, "ppo")
