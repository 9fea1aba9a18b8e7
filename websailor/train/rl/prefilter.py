"""The prefilter of RL items (DUPO's pre-training filter, WebSailor V1 Sec. 4; SailorFog-QA-V2's
moderate band): keep the items the starting model solves sometimes but not always, rated by
sampling (:func:`prefilter_items`) or by rollouts that already exist (:func:`prefilter_from_file`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from websailor.errors import ConfigError, InputFormatError
from websailor.log import get_logger
from websailor.models.base import sampling_options
from websailor.questions import Question
from websailor.train.rl.settings import DEFAULT_BAND, RLSettings, band_verdict

logger = get_logger(__name__)


def prefilter_items(
    items: list[Any],
    agent: Any,
    judge: Any,
    k: int,
    out: Path,
    concurrency: int,
    progress: bool = True,
    record: Path | None = None,
    band: str = DEFAULT_BAND,
    max_env_failures: int = 0,
) -> tuple[list[Any], dict[str, int]]:
    """Keep the items the starting model solves sometimes but not always (``0 < correct < k``,
    or another ``band``: :func:`parse_band`; DUPO's pre-training filter, WebSailor V1 Sec. 4,
    and SailorFog-QA-V2's moderate band).

    Rollouts are appended to ``out`` as they finish, so a stopped prefilter resumes; the counts
    and kept ids go to ``record`` (JSON) when given, also when nothing is kept. A rollout that
    ended in a model error, or in which the environment degraded more than
    ``max_env_failures`` tool calls, is rerun by a resumed prefilter and leaves its item
    ``ungraded`` until then.

    Returns:
        The kept items and the counts ``{"kept", "too_easy", "too_hard", "ungraded"}``.

    Raises:
        ConfigError: no item is left (the message gives the counts).
    """
    from dataclasses import replace

    from websailor.agent.runner import finished, latest_rollouts, run_questions
    from websailor.jsonio import read_appended_jsonl
    from websailor.judge.base import Case

    questions = [replace(it, answer=it.gold.answer) for it in items]
    run_questions(
        agent, questions, out, rollouts=k, concurrency=concurrency, progress=progress, max_env_failures=max_env_failures
    )
    done = latest_rollouts(out, read_appended_jsonl(out, "a trajectory record"))
    cases, owners = [], []
    for it in items:
        for r in range(k):
            rec = done.get((it.id, r))
            if finished(rec, it.question, max_env_failures):
                cases.append(Case(it.question, rec.get("prediction"), it.gold))
                owners.append(it.id)
    grades = judge.grade(cases)
    correct: dict[str, list] = {it.id: [] for it in items}
    for owner, g in zip(owners, grades):
        correct[owner].append(g.correct)
    counts = {"kept": 0, "too_easy": 0, "too_hard": 0, "ungraded": 0}
    kept = []
    for it in items:
        marks = correct[it.id]
        if len(marks) < k or any(m is None for m in marks):  # a model error, or the judge failed
            counts["ungraded"] += 1
            continue
        v = band_verdict(sum(map(bool, marks)), k, band)
        counts[v] += 1
        if v == "kept":
            kept.append(it)
    logger.info(
        "prefilter (%d rollouts per item, band %s): %d kept, %d too easy, %d too hard, %d ungraded",
        k,
        band,
        counts["kept"],
        counts["too_easy"],
        counts["too_hard"],
        counts["ungraded"],
    )
    if record is not None:
        _write_prefilter(record, {"k": k, "band": band, **counts}, kept)
    if not kept:
        raise ConfigError(
            f"no moderate items left after the prefilter ({k} rollouts per item: {counts['too_easy']} too easy, "
            f"{counts['too_hard']} too hard, {counts['ungraded']} ungraded out of {len(items)}; band {band}): "
            "start from a stronger model, use other items, a wider --prefilter-band, or train without --prefilter"
        )
    return kept, counts


def _write_prefilter(record: Path, head: dict, kept: list[Any]) -> None:
    """``prefilter.json``: how the items were chosen, the counts and the kept ids."""
    record.write_text(json.dumps({**head, "kept_ids": [it.id for it in kept]}, indent=2), encoding="utf-8")


def prefilter_source(path: str | Path) -> tuple[Path, Path | None]:
    """The trajectories file behind a ``--prefilter-from`` path and the scores file beside
    it, if any: an ``eval`` directory (``trajectories.jsonl``, ``scores.jsonl``), an RL run
    directory (``prefilter_rollouts.jsonl``), or one of those files.

    Raises:
        ConfigError: the path does not exist, or a directory holds neither file.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("trajectories.jsonl", "prefilter_rollouts.jsonl"):
            if (path / name).is_file():
                return prefilter_source(path / name)
        raise ConfigError(
            f"--prefilter-from {path}: no trajectories.jsonl (an eval output) or prefilter_rollouts.jsonl "
            "(an RL run's prefilter) in this directory"
        )
    if not path.is_file():
        raise ConfigError(f"--prefilter-from {path}: no such file or directory")
    scores = path.with_name("scores.jsonl")
    return path, scores if path.name == "trajectories.jsonl" and scores.is_file() else None


def _stored_grades(scores: Path | None, judge_name: str) -> dict[tuple[str, int], Any]:
    """The grades of ``scores`` (an eval's ``scores.jsonl``) by ``judge_name``, by ``(id,
    rollout)``; ungraded ones are left out."""
    from websailor.eval.scoring import Score
    from websailor.jsonio import read_appended_jsonl

    if scores is None:
        return {}
    out = {}
    for lineno, rec in read_appended_jsonl(scores, "a score record"):
        try:
            s = Score(**rec)
        except TypeError:
            raise InputFormatError(f"{scores} line {lineno} is not a score record") from None
        if s.judge == judge_name and s.correct is not None:
            out[(s.id, s.rollout)] = s
    return out


def _warn_other_sampling(records: list[dict], sampling: dict[str, float], traj_path: Path) -> None:
    """One warning when rollouts of ``records`` recorded other sampling values than ``sampling``
    (records from before the sampling was recorded say nothing and are passed over)."""
    seen = {
        tuple((key, r["sampling"].get(key)) for key in sampling) for r in records if isinstance(r.get("sampling"), dict)
    }
    other = [dict(s) for s in seen if dict(s) != dict(sampling)]
    if other:

        def shown(s: dict) -> str:
            return ", ".join(f"{key.replace('_', ' ')} {s[key]}" for key in sampling)

        logger.warning(
            "--prefilter-from %s: its rollouts sampled with %s; this run samples with %s: an item's rate there "
            "is not its rate under this run's sampler, so the moderate band is judged at other settings (rate "
            "them at this run's with eval %s)",
            traj_path,
            "; ".join(shown(s) for s in other),
            shown(sampling),
            " ".join(sampling_options(sampling)),
        )


def prefilter_from_file(
    items: list[Question],
    source: str | Path,
    judge: Any,
    k: int = 0,
    band: str = DEFAULT_BAND,
    record: Path | None = None,
    max_env_failures: int = 0,
    sampling: dict[str, float] | None = None,
) -> tuple[list[Question], dict[str, Any]]:
    """Keep the moderate items of ``items`` as rated by rollouts that already exist (an
    ``eval`` output or an earlier prefilter's rollouts) instead of sampling again.

    The trajectories are read by :func:`websailor.eval.scoring.read_trajectories` and graded
    against the gold answer of ``items`` with ``judge``; a grade of the same judge for the same
    question, prediction and gold answer already in the eval's ``scores.jsonl`` is reused (the
    file is not changed). Rollouts that ended in a model error, in which the environment
    degraded more than ``max_env_failures`` tool calls, or that the judge could not grade, are
    not counted. An item needs ``k`` graded rollouts (0: as many as the file holds
    for any item; more than ``k``: the lowest rollout indices count); one with fewer is
    ``short`` and not kept, and so is an item of ``items`` the file has no rollout of
    (``unrated``). ``band``: :func:`parse_band`. ``sampling``: the training rollouts' own
    (``temperature``, ``top_p``, ``presence_penalty``); rollouts that recorded other values
    (an ``eval`` samples at the paper's evaluation settings by default) get one warning, since
    an item's rate there is not its rate under the training sampler.

    Returns:
        The kept items and the record written to ``record`` (without the kept ids): ``from``
        (``source`` as given), ``source`` (the trajectories file read), ``sha256`` of the trajectories file, ``band``, ``k``, the counts ``kept``, ``too_easy``,
        ``too_hard``, ``ungraded`` (= ``short`` + ``unrated``, as the sampling prefilter
        counts), ``short``, ``unrated``, and ``rollouts`` / ``graded`` / ``reused_grades``.

    Raises:
        ConfigError: a file of another question set (ids not in ``items``, or the same id with
            another question text; the message gives the counts), a file without one graded
            rollout, or no item left.
        InputFormatError: an unreadable trajectories or scores file.
    """
    import hashlib

    from websailor.eval.scoring import read_trajectories

    traj_path, scores_path = prefilter_source(source)
    records = read_trajectories([traj_path])
    by_id = {it.id: it for it in items}
    _check_question_set(records, by_id, traj_path)
    if sampling:
        _warn_other_sampling(records, sampling, traj_path)
    records = [{**r, "answer": by_id[str(r["id"])].gold.to_dict()} for r in records]  # grade against --data's gold
    grades, reused = _grade(records, scores_path, judge, max_env_failures)
    marks: dict[str, list[tuple[int, bool]]] = {it.id: [] for it in items}
    for (qid, rollout), correct in grades.items():
        if correct is not None:
            marks[qid].append((rollout, bool(correct)))
    graded = sum(len(m) for m in marks.values())
    if not graded:
        raise ConfigError(
            f"--prefilter-from {traj_path}: none of its {len(records)} rollouts is graded (model errors, or "
            f"the judge {judge.name} failed on every one): nothing tells which items are moderate"
        )
    per_item: dict[str, int] = {}
    for r in records:
        per_item[str(r["id"])] = per_item.get(str(r["id"]), 0) + 1
    need = k or max(per_item.values())
    kept, counts = _verdicts(items, marks, per_item, need, band)
    head = {
        "from": str(source),
        "source": str(traj_path),
        "sha256": hashlib.sha256(traj_path.read_bytes()).hexdigest(),
        "band": band,
        "k": need,
        **counts,
        "rollouts": len(records),
        "graded": graded,
        "reused_grades": reused,
    }
    if counts["short"]:
        logger.warning(
            "--prefilter-from %s: %d items have fewer than %d graded rollouts (model errors or ungraded): not kept",
            traj_path,
            counts["short"],
            need,
        )
    if counts["unrated"]:
        logger.warning(
            "--prefilter-from %s: %d items of the data have no rollouts there: not kept", traj_path, counts["unrated"]
        )
    logger.info(
        "prefilter from %s (%d graded rollouts per item, band %s): %d kept, %d too easy, %d too hard, %d short, %d unrated",
        traj_path,
        need,
        band,
        counts["kept"],
        counts["too_easy"],
        counts["too_hard"],
        counts["short"],
        counts["unrated"],
    )
    if record is not None:
        _write_prefilter(record, head, kept)
    if not kept:
        raise ConfigError(
            f"no moderate items in --prefilter-from {traj_path} ({need} graded rollouts per item, band {band}: "
            f"{counts['too_easy']} too easy, {counts['too_hard']} too hard, {counts['short']} with fewer graded "
            f"rollouts, {counts['unrated']} without rollouts, out of {len(items)}): use a wider --prefilter-band, "
            "other rollouts, or train without a prefilter"
        )
    return kept, head


def _check_question_set(records: list[dict], by_id: dict[str, Question], traj_path: Path) -> None:
    """Refuse rollouts of another question set: ids not among ``by_id``, or the same id asking
    another question.

    Raises:
        ConfigError: with both counts and an example of each.
    """
    foreign = sorted({str(r["id"]) for r in records if str(r["id"]) not in by_id})
    changed = sorted(
        {str(r["id"]) for r in records if str(r["id"]) in by_id and r["question"] != by_id[str(r["id"])].question}
    )
    if not (foreign or changed):
        return
    detail = []
    if foreign:
        detail.append(f"{len(foreign)} item ids are not in the training data (e.g. {foreign[0]!r})")
    if changed:
        detail.append(f"{len(changed)} ids ask another question than the training data's (e.g. {changed[0]!r})")
    raise ConfigError(
        f"--prefilter-from {traj_path} holds rollouts of another question set: {'; '.join(detail)} "
        f"({len({str(r['id']) for r in records})} items in the file, {len(by_id)} in --data): rate these items "
        "(websailor eval on the same file, with --split train: eval rates the test split unless told "
        "otherwise) or use --prefilter K"
    )


def _grade(
    records: list[dict], scores_path: Path | None, judge: Any, max_env_failures: int
) -> tuple[dict[tuple[str, int], bool | None], int]:
    """The grade of each rollout, ``{(id, rollout): correct}`` (``None``: ungraded), and how many
    came from the eval's ``scores.jsonl`` (same judge, same question, prediction and gold)
    instead of the judge."""
    from websailor.eval.scoring import case_key, score_trajectories, ungraded_reason

    stored = _stored_grades(scores_path, judge.name)
    grades: dict[tuple[str, int], bool | None] = {}
    for r in records:
        s = stored.get((str(r["id"]), r["rollout"]))
        if s is not None and s.key == case_key(r) and ungraded_reason(r, max_env_failures) is None:
            grades[(str(r["id"]), r["rollout"])] = s.correct
    reused = len(grades)
    todo = [r for r in records if (str(r["id"]), r["rollout"]) not in grades]
    fresh = score_trajectories(todo, judge, progress=False, max_env_failures=max_env_failures) if todo else []
    grades.update({(s.id, s.rollout): s.correct for s in fresh})
    return grades, reused


def _verdicts(
    items: list[Question], marks: dict[str, list[tuple[int, bool]]], per_item: dict[str, int], need: int, band: str
) -> tuple[list[Question], dict[str, int]]:
    """The kept items and the counts ``kept``, ``too_easy``, ``too_hard``, ``short`` (fewer than
    ``need`` graded rollouts), ``unrated`` (no rollout) and ``ungraded`` (the last two together);
    an item's first ``need`` graded rollouts (lowest indices) decide."""
    counts = {"kept": 0, "too_easy": 0, "too_hard": 0, "ungraded": 0, "short": 0, "unrated": 0}
    kept = []
    for it in items:
        if it.id not in per_item:
            counts["unrated"] += 1
            continue
        got = sorted(marks[it.id])
        if len(got) < need:
            counts["short"] += 1
            continue
        v = band_verdict(sum(c for _, c in got[:need]), need, band)
        counts[v] += 1
        if v == "kept":
            kept.append(it)
    counts["ungraded"] = counts["short"] + counts["unrated"]
    return kept, counts


def check_prefilter_record(path: Path, saved: dict, settings: RLSettings) -> None:
    """A resumed run keeps the items of its ``prefilter.json``, made from the same source
    and band.

    Raises:
        ConfigError: the record was made from another ``prefilter_from`` or band.
    """
    source = settings.prefilter_from
    then = (saved.get("from"), saved.get("band", DEFAULT_BAND))
    if then != (source, settings.prefilter_band):
        raise ConfigError(
            f"{path} chose this run's items from {then[0] or 'sampled rollouts'} with band {then[1]}, not "
            f"{source or 'sampled rollouts'} with band {settings.prefilter_band}: rerun with the same prefilter "
            "settings to resume, or choose a new --out"
        )
