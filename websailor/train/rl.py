"""Agentic RL with TRL's ``GRPOTrainer``: DUPO (WebSailor V1) and the V2 on-policy GRPO
variant (WebSailor-V2, arXiv 2509.13305, Sec. 5), with multi-turn rollouts of our agent.

The trainer runs a token-level clipped objective (``loss_type="dapo"``: clip-higher with
``epsilon_low`` / ``epsilon_high``, no KL term, no entropy bonus); the rollouts, rewards and
advantages are ours (:mod:`websailor.train.rl_rollouts`). One optimizer step per batch of
rollouts keeps training strictly on-policy. The same call runs on CPU with transformers'
generation and, launched with ``accelerate launch`` and a shipped ``configs/accelerate`` file,
on several GPUs (DeepSpeed ZeRO-3 gathers the weights for generation through TRL's
``unwrap_model_for_generation``).

The output directory holds a plain transformers model (``--model hf:DIR`` in ``run`` and
``eval``), ``checkpoints/`` to resume from, ``rollouts.jsonl`` (every graded rollout),
``rl_log.jsonl`` and TensorBoard event files (per-step figures), and ``rl_summary.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from websailor.errors import ConfigError, InputFormatError
from websailor.log import get_logger
from websailor.memory import release_memory
from websailor.models.hf import turn_budget
from websailor.models.turns import TurnTemplate
from websailor.questions import Question, load_questions, resolve_split

if TYPE_CHECKING:
    from websailor.tools.environment import EnvSpec
from websailor.train.common import (
    CHECKPOINTING_KWARGS,
    TrainSettings,
    check_resume,
    limit_training_memory,
    load_tokenizer,
    load_trainable_model,
    memory_record,
    read_settings,
    resolve_model_dir,
    save_model,
    use_bf16,
)

logger = get_logger(__name__)

SETTINGS_FILE = "rl_settings.json"
SUMMARY_FILE = "rl_summary.json"
LOG_FILE = "rl_log.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
PREFILTER_FILE = "prefilter.json"
#: settings that may change between a run and its continuation (not part of a run's identity)
CONTINUABLE = ("max_steps",)
#: the moderate band of WebSailor's filter: solved sometimes but not always
DEFAULT_BAND = "0<c<k"


def parse_band(band: str) -> tuple[float, float] | None:
    """The pass-rate interval ``(lo, hi)`` of a ``prefilter_band``; ``None`` for the default
    :data:`DEFAULT_BAND` (``0 < correct < k``).

    Raises:
        ValueError: neither ``0<c<k`` nor ``LO:HI`` with ``0 <= LO <= HI <= 1``.
    """
    text = band.replace(" ", "")
    if text == DEFAULT_BAND:
        return None
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo = hi = float("nan")
    if not sep or not 0 <= lo <= hi <= 1:
        raise ValueError(
            f"prefilter_band {band!r}: use {DEFAULT_BAND} (solved sometimes, not always) or a pass-rate "
            "interval LO:HI with 0 <= LO <= HI <= 1, e.g. 0.1:0.75"
        )
    return lo, hi


def band_verdict(correct: int, k: int, band: str) -> str:
    """``"kept"``, ``"too_easy"`` or ``"too_hard"`` for an item solved ``correct`` times in
    ``k`` under ``band`` (see :func:`parse_band`)."""
    from websailor.synth.difficulty import verdict

    interval = parse_band(band)
    if interval is None:
        return verdict(correct, k, "moderate")
    rate = correct / k
    return "too_hard" if rate < interval[0] else "too_easy" if rate > interval[1] else "kept"


class RLSettings(TrainSettings):
    """Every knob of an RL run; a ``--config`` YAML or JSON file holds any subset of them.

    Attributes:
        algo: ``v2`` (leave-one-out advantage, 0/1 reward, negative exclusion) or ``dupo``
            (group-normalized advantage, 0.1 format + 0.9 answer, duplication of groups with
            spread).
        group_size: rollouts per question (paper: 8).
        batch_size: rollouts per optimizer step over all devices (paper V2: 128); a multiple
            of ``group_size``.
        micro_batch_size: rollouts per forward and backward pass on one device.
        learning_rate: constant after warm-up (paper V2: 1e-6).
        epsilon_low, epsilon_high: clip range of the importance ratio (clip-higher, DAPO).
        temperature, top_p: rollout sampling (paper V2: 1.0 and 1.0).
        max_calls, max_tokens_per_turn, max_context_tokens, timeout_s: the agent's budgets
            (``max_tokens_per_turn`` unset: the policy's own, :func:`websailor.models.hf.turn_budget`;
            the paper config sets 8,192).
        reward: judge spec: ``em``, ``f1[:T]`` or ``llm:MODEL_SPEC``.
        prefilter: run the starting model this many times per item before training and keep
            the items it solves sometimes but not always (0: off). With ``prefilter_from``: the
            graded rollouts each item needs (0: as many as the file has for its items).
        prefilter_from: take the moderate items from rollouts that already exist instead of
            sampling: an ``eval`` output directory (or its ``trajectories.jsonl``), an RL run
            directory or its ``prefilter_rollouts.jsonl`` (:func:`prefilter_from_file`).
        prefilter_band: which items are moderate: ``0<c<k`` (solved sometimes, not always;
            the default) or a pass-rate interval ``LO:HI`` (``0.1:0.75`` keeps items with
            ``0.1 <= correct / k <= 0.75``).
        concurrency: rollouts run at once (they share batched generation).
        max_env_failures: tool calls per rollout the environment may degrade (a provider
            outage, an unreachable tool server) and the rollout still get a reward; beyond it
            the rollout has none and its group is skipped (``groups/env_failed``), and the
            prefilter does not count it (default 0: any such call).
        skip_zero_advantage: do not spend a forward and backward pass on rollouts without
            gradient (advantage exactly 0, or left out of the loss); see
            :class:`websailor.train.rl_rollouts.RolloutSettings`.
        max_steps: optimizer steps; ``None`` runs ``epochs`` over the questions.
        (LoRA, precision, gradient checkpointing: :class:`websailor.train.common.TrainSettings`.)
        use_vllm, vllm_mode: generate with TRL's vLLM integration on GPUs (colocate mode:
            multi-turn rollouts of different lengths cannot keep server mode's lock-step).
    """

    algo: Literal["v2", "dupo"] = "v2"
    group_size: int = Field(8, ge=1)
    batch_size: int = Field(128, ge=1)
    micro_batch_size: int = Field(1, ge=1)
    learning_rate: float = Field(1e-6, gt=0)
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    epsilon_low: float = Field(0.2, gt=0, lt=1)
    epsilon_high: float = Field(0.28, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_calls: int = Field(100, ge=1)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    max_context_tokens: int = Field(128_000, ge=256)
    timeout_s: float = Field(150 * 60, gt=0)
    reward: str = "em"
    prefilter: int = Field(0, ge=0)
    prefilter_from: str | None = None
    prefilter_band: str = DEFAULT_BAND
    concurrency: int = Field(8, ge=1)
    max_env_failures: int = Field(0, ge=0, strict=True)
    skip_zero_advantage: bool = True
    epochs: float = Field(1.0, gt=0)
    max_steps: int | None = Field(None, ge=1)
    use_vllm: bool = False
    vllm_mode: Literal["colocate"] = "colocate"
    save_steps: int = Field(10, ge=1)
    seed: int = Field(0, ge=0, lt=2**32)

    @model_validator(mode="after")
    def _groups_fit(self) -> RLSettings:
        if self.group_size < 2:
            raise ValueError(
                f"group_size {self.group_size}: a group of one rollout has no baseline (every advantage "
                "would be 0); use 2 or more (paper: 8)"
            )
        if self.batch_size % self.group_size:
            raise ValueError(
                f"batch_size {self.batch_size} is not a multiple of group_size {self.group_size}: "
                "a batch holds whole groups"
            )
        if self.micro_batch_size > self.batch_size:
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}) is larger than batch_size ({self.batch_size})"
            )
        if self.prefilter == 1:
            raise ValueError("prefilter 1: one rollout per item cannot tell a moderate item; use 2 or more (paper: 8)")
        parse_band(self.prefilter_band)
        return self


def load_settings(config: str | Path | None = None, **overrides: Any) -> RLSettings:
    """RL settings from an optional YAML/JSON ``config`` file, then ``overrides`` (``None``
    values are ignored).

    Raises:
        ConfigError: unreadable file, unknown keys, or values of the wrong type or range.
    """
    return read_settings(RLSettings, "RL", config, **overrides)


def accumulation_steps(settings: RLSettings, world: int) -> int:
    """Micro-batches per optimizer step on each of ``world`` processes, so that one step
    consumes exactly one batch of rollouts.

    Raises:
        ConfigError: the batch does not split evenly over the processes, or a process's share
            does not hold whole groups (group advantages are computed where the rollouts run).
    """
    per_process, rest = divmod(settings.batch_size, world)
    if rest or per_process % settings.micro_batch_size:
        raise ConfigError(
            f"batch_size {settings.batch_size} does not split into {world} processes x micro-batches "
            f"of {settings.micro_batch_size}"
        )
    if per_process % settings.group_size:
        raise ConfigError(
            f"each of the {world} processes gets {per_process} rollouts, not whole groups of "
            f"{settings.group_size}: raise batch_size to a multiple of {world * settings.group_size}"
        )
    return per_process // settings.micro_batch_size


def build_agent_config(settings: RLSettings) -> Any:
    """The agent's budgets and sampling during RL rollouts."""
    from websailor.agent.loop import AgentConfig
    from websailor.models.base import SamplingParams

    return AgentConfig(
        max_calls=settings.max_calls,
        max_context_tokens=settings.max_context_tokens,
        answer_nudge_tokens=settings.max_context_tokens * 110 // 128,
        timeout_s=settings.timeout_s,
        max_tokens_per_turn=settings.max_tokens_per_turn,
        sampling=SamplingParams(temperature=settings.temperature, top_p=settings.top_p, presence_penalty=0.0),
        seed=settings.seed,
    )


def training_questions(path: str | Path, split: str | None = None) -> list[Question]:
    """The training questions of a QA file, read by :func:`websailor.questions.load_questions`:
    a ``synth`` file's ``split`` (default ``train``), or every item of any other layout; one
    record per question text.

    Raises:
        InputFormatError: an unreadable file, no items, ``split`` on a file without splits,
            or one question text with two different gold answers (TRL hands prompts back as
            text only).
    """
    items = load_questions(str(path), split=resolve_split(path, split, "train"))
    if not items:
        raise InputFormatError(f"{path}: no questions to train on")
    seen: dict[str, Question] = {}
    for it in items:
        other = seen.setdefault(it.question, it)
        if other.gold != it.gold:
            raise InputFormatError(
                f"{path}: items {other.id} and {it.id} ask the same question with different gold "
                "answers or aliases; remove one or merge them"
            )
    return list(seen.values())


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


def prefilter_from_file(
    items: list[Question],
    source: str | Path,
    judge: Any,
    k: int = 0,
    band: str = DEFAULT_BAND,
    record: Path | None = None,
    max_env_failures: int = 0,
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
    (``unrated``). ``band``: :func:`parse_band`.

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

    from websailor.eval.scoring import case_key, read_trajectories, score_trajectories, ungraded_reason

    traj_path, scores_path = prefilter_source(source)
    records = read_trajectories([traj_path])
    by_id = {it.id: it for it in items}
    foreign = sorted({str(r["id"]) for r in records if str(r["id"]) not in by_id})
    changed = sorted(
        {str(r["id"]) for r in records if str(r["id"]) in by_id and r["question"] != by_id[str(r["id"])].question}
    )
    if foreign or changed:
        detail = []
        if foreign:
            detail.append(f"{len(foreign)} item ids are not in the training data (e.g. {foreign[0]!r})")
        if changed:
            detail.append(f"{len(changed)} ids ask another question than the training data's (e.g. {changed[0]!r})")
        raise ConfigError(
            f"--prefilter-from {traj_path} holds rollouts of another question set: {'; '.join(detail)} "
            f"({len({str(r['id']) for r in records})} items in the file, {len(items)} in --data): rate these items "
            "(websailor eval on the same file, with --split train: eval rates the test split unless told "
            "otherwise) or use --prefilter K"
        )
    records = [{**r, "answer": by_id[str(r["id"])].gold.to_dict()} for r in records]  # grade against --data's gold
    stored = _stored_grades(scores_path, judge.name)
    reuse = {}
    for r in records:
        s = stored.get((str(r["id"]), r["rollout"]))
        if s is not None and s.key == case_key(r) and ungraded_reason(r, max_env_failures) is None:
            reuse[(str(r["id"]), r["rollout"])] = s.correct
    todo = [r for r in records if (str(r["id"]), r["rollout"]) not in reuse]
    fresh = score_trajectories(todo, judge, progress=False, max_env_failures=max_env_failures) if todo else []
    grades = dict(reuse)
    grades.update({(s.id, s.rollout): s.correct for s in fresh})
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
    head = {
        "from": str(source),
        "source": str(traj_path),
        "sha256": hashlib.sha256(traj_path.read_bytes()).hexdigest(),
        "band": band,
        "k": need,
        **counts,
        "rollouts": len(records),
        "graded": graded,
        "reused_grades": len(reuse),
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


def _check_prefilter_record(path: Path, saved: dict, settings: RLSettings) -> None:
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


def _trim_jsonl(path: Path, max_step: int) -> None:
    """Drop the records of steps after ``max_step`` (a resumed run repeats those steps) and an
    unfinished last line of a killed run (with a warning), streaming the file
    (:class:`websailor.jsonio.JsonlStream`); blank lines go too. The file is replaced (a new
    file moved over it) only when something is dropped or its last line lacks its newline.

    Raises:
        InputFormatError: a complete line that is not a JSON object: refused, and the file left
            as it is, rather than dropped unseen.
    """
    from websailor.jsonio import JsonlStream, parse_line

    if not path.exists():
        return
    stream = JsonlStream(path, f"a record of {path.name}")
    tmp = path.with_name(f".{path.name}.trim-{os.getpid()}")
    changed = False
    try:
        with tmp.open("wb") as out:
            for _, lineno, raw in stream.lines():
                step = parse_line(path, lineno, raw, f"a record of {path.name}").get("step", 0) if raw.strip() else None
                if step is None or (isinstance(step, int) and step > max_step):
                    changed = True
                    continue
                changed = changed or not raw.endswith(b"\n")
                out.write(raw if raw.endswith(b"\n") else raw + b"\n")
        if stream.unfinished is not None:
            logger.warning("%s", stream.unfinished)
            changed = True
        if changed:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _digest(data_path: str | Path, items: list[Any]) -> str:
    """Identifies the training data of a run: the file's bytes, or (for a named benchmark or a
    ``FORMAT:PATH`` spec) its items."""
    import hashlib

    path = Path(str(data_path))
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    rows = [[it.id, it.question, it.gold.to_dict()] for it in items]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()


def _check_enough(items: list[Any], settings: RLSettings, what: str) -> None:
    """A batch takes ``batch_size / group_size`` distinct questions.

    Raises:
        ConfigError: there are fewer.
    """
    need = settings.batch_size // settings.group_size
    if len(items) < need:
        raise ConfigError(
            f"a batch of {settings.batch_size} rollouts in groups of {settings.group_size} needs {need} "
            f"questions, {what} has {len(items)}: lower batch_size or add questions"
        )


def _holds_other_run(out: Path, record: dict) -> bool:
    """Whether ``out`` holds the settings of another run (the resume check decides whether it
    may be replaced)."""
    saved = out / SETTINGS_FILE
    try:
        before = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(before, dict):
        return False
    return {k: v for k, v in before.items() if k not in CONTINUABLE} != {
        k: v for k, v in record.items() if k not in CONTINUABLE
    }


def _finish_from_checkpoint(
    checkpoint: Path, out: Path, base_dir: Path, tokenizer: Any, settings: RLSettings, record_summary: dict
) -> dict:
    """Save the model of ``checkpoint`` (LoRA adapters merged) as the run's model and write
    its summary; returns the summary."""
    import torch
    from transformers import AutoModelForCausalLM

    from websailor.train.rl_log import read_log

    if settings.lora:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        net = PeftModel.from_pretrained(base, checkpoint).merge_and_unload()
    else:
        net = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    if int(os.environ.get("RANK", "0")) == 0:
        net.save_pretrained(out)
        tokenizer.save_pretrained(out)
    log = read_log(out) if (out / LOG_FILE).exists() else []
    summary = {**record_summary, "train_seconds": sum(r.get("time/step_s") or 0.0 for r in log), "log": log}
    if int(os.environ.get("RANK", "0")) == 0:
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _callback(out: Path, rollouts: Any, micro_batch_size: int, resumed: bool) -> Any:
    from transformers import TrainerCallback

    from websailor.train.rl_log import StepLogger

    class _Log(TrainerCallback):
        """Merges the rollout figures with the trainer's (loss, entropy, clip fractions) into
        one record per step."""

        def __init__(self) -> None:
            self.log = StepLogger(out, replay=resumed)
            self.t0 = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            release_memory()

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if not state.is_world_process_zero or not logs or "loss" not in logs:
                return
            step_s = time.perf_counter() - self.t0
            trainer_figures = {
                k: v
                for k, v in logs.items()
                if not k.startswith(("reward", "rewards/", "frac_reward")) and isinstance(v, (int, float))
            }
            share = rollouts.last.get("rollouts/in_loss_share", 1.0)
            if micro_batch_size == 1 and share < 1.0:
                # the trainer averages these over micro-batches; one without loss tokens counts as 0
                for key in ("entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
                    if key in trainer_figures:
                        trainer_figures[key] = trainer_figures[key] / share if share > 0 else None
            record = {
                **trainer_figures,
                **rollouts.last,
                "time/step_s": step_s,
                "time/update_s": max(0.0, step_s - rollouts.last.get("time/rollout_s", 0.0)),
            }
            self.log.write(state.global_step, record)

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            self.log.close()

    return _Log()


def train_rl(
    data_path: str | Path,
    model: str,
    out: str | Path,
    settings: RLSettings | None = None,
    split: str | None = None,
    env: EnvSpec | None = None,
    progress: bool = True,
) -> dict:
    """Train ``model`` with RL on the questions of ``data_path`` in the local environment
    (offline Wikipedia), the real web, or a tool server's.

    Args:
        data_path: QA JSONL (``synth`` output; ``split`` selects its items) or any format
            ``eval`` reads.
        model: ``smollm2`` or ``hf:DIR`` (usually the SFT model).
        out: run directory; rerunning the same command resumes from its latest checkpoint, and
            rerunning it with a larger ``max_steps`` continues a finished run.
        settings: hyper-parameters (paper V2 defaults when ``None``).
        split: which split of a ``synth`` file to train on (``train``, ``test``, ``all``;
            default ``train``); other formats have no splits.
        env: the rollouts' environment (default: the local tools over the embedded corpus); its
            :meth:`~websailor.tools.environment.EnvSpec.record` is part of the run's identity.
        progress: progress bars.

    Returns:
        The summary written to ``out/rl_summary.json``: settings, item counts (and prefilter
        counts), steps, seconds, and the per-step log.

    Raises:
        ConfigError: bad settings for this world size, model or tokenizer problems (a chat
            template that cannot be split into per-turn pieces among them), ``out``
            holding another run, nothing left after the prefilter.
        InputFormatError: an unreadable or empty QA file.
        ModelError: the judge (or the policy) failed on every rollout of several batches.
    """
    import importlib.util

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from websailor.agent.loop import Agent
    from websailor.judge.base import load_judge
    from websailor.models import load_model
    from websailor.tools.environment import EnvSpec, open_environment
    from websailor.train.rl_rollouts import AgentRollouts, RolloutSettings

    settings = settings or RLSettings()
    env = env or EnvSpec()
    if env.kind == "none" and env.tools_url is None:
        raise ConfigError("--env none has no tools to train with; use local or web")
    out = Path(out)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    accumulation = accumulation_steps(settings, world)
    model_dir = resolve_model_dir(model)
    tokenizer = load_tokenizer(model_dir)
    TurnTemplate(tokenizer, model)  # refuses a template whose turns cannot be assembled exactly
    load_judge(settings.reward)  # a bad spec is refused before anything is written
    if settings.prefilter_from and not (out / PREFILTER_FILE).exists():
        prefilter_source(settings.prefilter_from)  # so is a missing --prefilter-from (a resumed run needs it no more)
    if settings.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError("use_vllm: vLLM is not installed; install a release TRL supports, or set use_vllm: false")
    split = resolve_split(data_path, split, "train")
    items = training_questions(data_path, split)
    _check_enough(items, settings, "the data")
    record = {"model": model, "data_sha256": _digest(data_path, items), "split": split, **settings.model_dump()}
    record.update(env.record())  # nothing for the default local environment: older runs keep their record
    stale = _holds_other_run(out, record)
    resume = check_resume(out, record, SETTINGS_FILE, SUMMARY_FILE, "RL", ignore=CONTINUABLE)
    if (out / SUMMARY_FILE).exists():
        done = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
        if settings.max_steps is None or done["steps"] >= settings.max_steps or resume is None:
            logger.info("%s already holds the finished model of this run (%d steps)", out, done["steps"])
            return done
        logger.info("%s: continuing the finished run of %d steps to %d", out, done["steps"], settings.max_steps)
    tool_env = open_environment(env)
    tools = tool_env.tools
    try:
        if stale:  # a run that never trained, with other settings: its rollouts and prefilter are not ours
            for name in (LOG_FILE, ROLLOUTS_FILE, PREFILTER_FILE, "prefilter_rollouts.jsonl"):
                (out / name).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        judge = load_judge(settings.reward, cache=out / "judge_cache.sqlite")  # LLM verdicts survive a resume
        if int(os.environ.get("RANK", "0")) == 0:
            (out / SETTINGS_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")

        prefilter_counts = None
        prefiltering = bool(settings.prefilter or settings.prefilter_from)
        if prefiltering and (out / PREFILTER_FILE).exists():  # a resumed run keeps its items
            saved = json.loads((out / PREFILTER_FILE).read_text(encoding="utf-8"))
            _check_prefilter_record(out / PREFILTER_FILE, saved, settings)
            kept_ids = set(saved["kept_ids"])
            items = [it for it in items if it.id in kept_ids]
            prefilter_counts = {k: v for k, v in saved.items() if k != "kept_ids"}
        elif settings.prefilter_from:
            items, prefilter_counts = prefilter_from_file(
                items,
                settings.prefilter_from,
                judge,
                settings.prefilter,
                settings.prefilter_band,
                record=out / PREFILTER_FILE,
                max_env_failures=settings.max_env_failures,
            )
        elif settings.prefilter:
            start = Agent(load_model(model), tools, build_agent_config(settings), env=tool_env.name)
            try:
                items, counts = prefilter_items(
                    items,
                    start,
                    judge,
                    settings.prefilter,
                    out / "prefilter_rollouts.jsonl",
                    settings.concurrency,
                    progress,
                    record=out / PREFILTER_FILE,
                    band=settings.prefilter_band,
                    max_env_failures=settings.max_env_failures,
                )
                prefilter_counts = {"k": settings.prefilter, "band": settings.prefilter_band, **counts}
            finally:
                start.model.close()
        if prefiltering:
            if not items:
                raise ConfigError(
                    f"no moderate items left after the prefilter ({out / PREFILTER_FILE}): start from a "
                    "stronger model, use other items, or train without --prefilter"
                )
            _check_enough(items, settings, "the prefilter's moderate items")

        bf16 = use_bf16(settings.precision)
        limits = limit_training_memory()

        def run_summary(steps: int) -> dict[str, Any]:
            """What ``rl_summary.json`` says of the run, less its time and log."""
            return {
                "model": model,
                "data": str(data_path),
                "split": split,
                "settings": settings.model_dump(),
                "questions": len(items),
                "prefilter": prefilter_counts,
                "steps": steps,
                "gradient_accumulation": accumulation,
                "bf16": bf16,
                "memory": memory_record(settings, limits),
            }

        net = load_trainable_model(model_dir, settings)
        step0 = int(resume.name.rpartition("-")[2]) if resume else 0
        for name in (LOG_FILE, ROLLOUTS_FILE):
            _trim_jsonl(out / name, step0)
        if resume is not None and settings.max_steps is not None and step0 >= settings.max_steps:
            # the trainer would still sample one more batch: take the model of that checkpoint as it is
            logger.info("%s: checkpoint %d reaches --max-steps %d; saving its model", out, step0, settings.max_steps)
            return _finish_from_checkpoint(resume, out, model_dir, tokenizer, settings, run_summary(step0))

        rollouts = AgentRollouts(
            {it.question: it for it in items},
            tools,
            judge,
            RolloutSettings(
                settings.group_size,
                settings.algo,
                build_agent_config(settings),
                settings.concurrency,
                settings.seed,
                skip_zero_advantage=settings.skip_zero_advantage,
                max_env_failures=settings.max_env_failures,
            ),
            out / ROLLOUTS_FILE,
            env=tool_env.name,
        )

        def advantage(prompts: list, completions: list, advantage: list, **kw: Any) -> list[float]:
            """The advantage computed by the rollout function, passed through as the reward."""
            return list(advantage)

        args = GRPOConfig(
            output_dir=str(out / "checkpoints"),
            learning_rate=settings.learning_rate,
            lr_scheduler_type="constant_with_warmup",
            warmup_steps=settings.warmup_ratio,
            weight_decay=settings.weight_decay,
            max_grad_norm=settings.max_grad_norm,
            per_device_train_batch_size=settings.micro_batch_size,
            gradient_accumulation_steps=accumulation,
            num_generations=settings.group_size,
            num_iterations=1,
            num_train_epochs=settings.epochs,
            max_steps=settings.max_steps or -1,
            beta=0.0,
            loss_type="dapo",
            epsilon=settings.epsilon_low,
            epsilon_high=settings.epsilon_high,
            scale_rewards="none",
            temperature=settings.temperature,
            top_p=settings.top_p,
            mask_truncated_completions=False,
            use_vllm=settings.use_vllm,
            vllm_mode=settings.vllm_mode,
            # vLLM's reply budget per turn
            max_completion_length=settings.max_tokens_per_turn or turn_budget(net.config.max_position_embeddings),
            bf16=bf16,
            gradient_checkpointing=None,  # the deprecated alias
            activation_checkpointing=settings.gradient_checkpointing,
            activation_checkpointing_kwargs=dict(CHECKPOINTING_KWARGS) if settings.gradient_checkpointing else None,
            save_strategy="steps",
            save_steps=settings.save_steps,
            save_total_limit=2,
            logging_steps=1,
            report_to="none",
            seed=settings.seed,
            disable_tqdm=not progress,
            use_cpu=not torch.cuda.is_available(),
        )
        dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": it.question}]} for it in items])
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        trainer = GRPOTrainer(
            model=net,
            reward_funcs=[advantage],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollouts,
            callbacks=[_callback(out, rollouts, settings.micro_batch_size, resume is not None)],
        )
        t0 = time.perf_counter()
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        seconds = time.perf_counter() - t0
        save_model(trainer, out, model_dir, settings.lora)
        from websailor.train.rl_log import read_log

        summary = {**run_summary(trainer.state.global_step), "train_seconds": round(seconds, 1), "log": read_log(out)}
        if trainer.is_world_process_zero():
            (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
        return summary
    finally:
        tool_env.close()
        tool_env.record_metrics(out / "tool_metrics.jsonl")


__all__ = [
    "DEFAULT_BAND",
    "RLSettings",
    "accumulation_steps",
    "band_verdict",
    "load_settings",
    "parse_band",
    "prefilter_from_file",
    "prefilter_items",
    "prefilter_source",
    "train_rl",
    "training_questions",
]
