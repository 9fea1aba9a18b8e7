"""A training set of a chosen size and lookup share, drawn from a pool of trajectories
(``websailor traj select``; issue 38, point 3).

A lookup is a trajectory whose first search of the question's own text lists the answer's page
(:func:`~websailor.train.traj_stats.question_search_lists`): the short path, pick the page from
the list, check it, answer. The others follow the question's most specific clue (a trajectory
that never searches the question's text is one of them). The grounded recipe of
docs/experiments.md trains on 100 trajectories, half of each kind; a pool of constructive
trajectories holds whatever share its items happen to give.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError, InputFormatError
from websailor.jsonio import JsonlStream, parse_line
from websailor.log import get_logger
from websailor.train.traj_stats import check_trajectory, trajectory_figures

logger = get_logger(__name__)


def _pool_lines(pool: Path) -> tuple[list[bytes], list[bytes]]:
    """The lookups' and the others' lines of ``pool``, each as written there (with its newline)."""
    short, clue = [], []
    stream = JsonlStream(pool, "a trajectory record")
    for _, lineno, raw in stream.lines():
        if not raw.strip():
            continue
        rec = parse_line(pool, lineno, raw, "a trajectory record")
        check_trajectory(rec, f"{pool} line {lineno}", needs_gold=True)
        if rec.get("termination", "answer") != "answer":
            raise InputFormatError(
                f"{pool} line {lineno}: the trajectory ends without an answer (termination "
                f"{rec['termination']!r}), which is not training data; traj select draws from traj build's output "
                "(or rollouts kept for being right)"
            )
        line = raw.rstrip(b"\r\n") + b"\n"
        (short if trajectory_figures(rec)["lookup"] else clue).append(line)
    if stream.unfinished is not None:
        logger.warning("%s: skipping an unfinished last line (%d bytes)", pool, stream.unfinished.size)
    return short, clue


def _check_out(pool: Path, out: Path) -> None:
    """Refuse an ``out`` that is the pool itself, a folder, or whose folder is a file."""
    if out.exists() and out.resolve() == pool.resolve():
        raise ConfigError(f"--out {out} is the pool (--from): write the selection to another file")
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder: give the file to write")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"--out {out}: {parent} is a file, not a folder")


def select_trajectories(
    pool: str | Path, out: str | Path, n: int, lookup_share: float, seed: int = 0
) -> dict[str, Any]:
    """Write ``n`` trajectories of ``pool`` to ``out``: ``floor(n * lookup_share + 0.5)``
    lookups and the rest clue-following ones, each kind drawn with ``seed`` and the whole
    shuffled. Where a kind runs short, the other fills in (a warning and the counts returned say
    so). Lines are copied as the pool holds them. The draw depends only on the pool's lines and
    the arguments, so a rerun writes the same bytes: an ``out`` that holds them already is left
    as it is (``"written": False``); an empty one is written over.

    Args:
        pool: a trajectories JSONL (``traj build``; an unfinished last line is left out).
        out: the training set to write (JSONL).
        n: trajectories to keep (0, or more than the pool holds: all of them).
        lookup_share: the share of lookups wanted, in [0, 1].
        seed: the draw's seed.

    Returns:
        ``{"pool", "pool_lookups", "kept", "lookups", "clue", "written"}``.

    Raises:
        ConfigError: ``n`` below 0 or ``lookup_share`` outside [0, 1]; ``out`` is the pool, a
            folder, or holds another selection (another pool or other arguments): delete it
            or write elsewhere.
        InputFormatError: ``pool`` is missing, empty, or a line is not a trajectory record
            (a JSON object with messages, a question and a gold answer), or one that ends
            without an answer (``termination`` other than ``answer``: an eval's or a run's
            failed rollout).
    """
    if n < 0:
        raise ConfigError(f"--n {n}: give 0 (all of them) or more")
    if not 0.0 <= lookup_share <= 1.0:
        raise ConfigError(f"--lookup-share {lookup_share}: give a share between 0 and 1")
    pool, out = Path(pool), Path(out)
    if not pool.is_file():
        raise InputFormatError(f"{pool}: {'not a file' if pool.exists() else 'no such file'} (a trajectories JSONL)")
    _check_out(pool, out)
    short, clue = _pool_lines(pool)
    if not short and not clue:
        raise InputFormatError(f"{pool}: holds no trajectory to select from")
    size = len(short) + len(clue)
    n = min(n, size) if n else size
    wanted = math.floor(n * lookup_share + 0.5)
    n_short = min(len(short), wanted)
    n_clue = min(len(clue), n - n_short)
    n_short = min(len(short), n - n_clue)  # the clue kind ran short: lookups fill in
    if n_short != wanted and n < size:
        logger.warning(
            "%s: %d lookups kept where --lookup-share %s asks for %d (the pool holds %d lookups and %d others)",
            pool, n_short, lookup_share, wanted, len(short), len(clue),
        )  # fmt: skip
    rng = random.Random(seed)
    picked = rng.sample(short, n_short) + rng.sample(clue, n_clue)
    rng.shuffle(picked)
    data = b"".join(picked)
    counts = {"pool": size, "pool_lookups": len(short), "kept": n, "lookups": n_short, "clue": n_clue}
    if out.exists() and out.stat().st_size:
        if out.read_bytes() == data:
            return counts | {"written": False}
        raise ConfigError(
            f"{out} holds another selection (another pool, --n, --lookup-share or --seed) or other data: delete "
            "it or choose another --out"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a file written plainly (mkstemp makes it private)
        os.replace(tmp, out)  # whole or absent: an interrupted write leaves no half selection
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return counts | {"written": True}
