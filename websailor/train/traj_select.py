"""A training set of a chosen size and lookup share, drawn from a pool of trajectories
(``websailor traj select``; issue 38, point 3).

A lookup is a trajectory whose first search of the question's own text lists the answer's page
(:func:`~websailor.train.traj_stats.question_search_lists`): the short path, pick the page from
the list, check it, answer. The others follow the question's most specific clue. The grounded
recipe of docs/experiments.md trains on 100 trajectories, half of each kind; a pool of
constructive trajectories holds whatever share its items happen to give.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError, InputFormatError
from websailor.jsonio import read_appended_jsonl
from websailor.train.traj_stats import trajectory_figures


def select_trajectories(
    pool: str | Path, out: str | Path, n: int, lookup_share: float, seed: int = 0
) -> dict[str, Any]:
    """Write ``n`` trajectories of ``pool`` to ``out``: ``round(n * lookup_share)`` lookups and
    the rest clue-following ones, each kind drawn with ``seed`` and the whole shuffled. Where a
    kind runs short, the other fills in (the counts returned say so). The draw depends only on
    the pool's lines and the arguments, so a rerun writes the same file: an ``out`` that holds
    it already is left as it is (``"written": False``).

    Args:
        pool: a trajectories JSONL (``traj build``; an unfinished last line is left out).
        out: the training set to write (JSONL, the pool's records unchanged).
        n: trajectories to keep (all of them when the pool holds fewer; 0: all of them).
        lookup_share: the share of lookups wanted, in [0, 1].
        seed: the draw's seed.

    Returns:
        ``{"pool", "pool_lookups", "kept", "lookups", "clue", "written"}``.

    Raises:
        ConfigError: ``n`` below 0 or ``lookup_share`` outside [0, 1]; ``out`` holds another
            selection (from another pool or other arguments): delete it or write elsewhere.
        InputFormatError: ``pool`` is missing, empty, or a line is not a JSON object.
    """
    if n < 0:
        raise ConfigError(f"--n {n}: give the trajectories to keep (0: all of them)")
    if not 0.0 <= lookup_share <= 1.0:
        raise ConfigError(f"--lookup-share {lookup_share}: give a share between 0 and 1")
    pool, out = Path(pool), Path(out)
    if not pool.is_file():
        raise InputFormatError(f"{pool}: {'not a file' if pool.exists() else 'no such file'} (a trajectories JSONL)")
    short, clue = [], []
    for _, rec in read_appended_jsonl(pool, "a trajectory record"):
        (short if trajectory_figures(rec)["lookup"] else clue).append(json.dumps(rec, ensure_ascii=False))
    if not short and not clue:
        raise InputFormatError(f"{pool}: holds no trajectory to select from")
    rng = random.Random(seed)
    n = min(n, len(short) + len(clue)) if n else len(short) + len(clue)
    n_short = min(len(short), round(n * lookup_share))
    n_clue = min(len(clue), n - n_short)
    n_short = min(len(short), n - n_clue)  # the clue kind ran short: lookups fill in
    picked = rng.sample(short, n_short) + rng.sample(clue, n_clue)
    rng.shuffle(picked)
    text = "".join(line + "\n" for line in picked)
    counts = {"pool": len(short) + len(clue), "pool_lookups": len(short), "kept": n, "lookups": n_short}
    counts |= {"clue": n_clue, "written": True}
    if out.exists():
        if out.read_text(encoding="utf-8") == text:
            return counts | {"written": False}
        raise ConfigError(
            f"{out} holds another selection (another pool, --n, --lookup-share or --seed): delete it or choose "
            "another --out"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)  # whole or absent: an interrupted write leaves no half selection
    return counts
