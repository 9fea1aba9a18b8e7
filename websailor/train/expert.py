"""Expert trajectories by rejection sampling (``traj build --source expert``).

A strong model runs the agent ``k`` times on every training question; a judge grades each
rollout against the gold answer, and only the rollouts that are correct, ended with an answer,
made at least ``min_tool_calls`` tool calls and fit the token budget become SFT data
(arXiv 2509.13305, Sec. 4 cold start; the WebSailor V1 report keeps trajectories within 32k
tokens). Every rollout is kept in ``<out>.rollouts.jsonl`` and every grade in
``<out>.scores.jsonl``, so an interrupted build resumes without running or grading twice.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websailor.agent.loop import Agent
from websailor.agent.runner import check_source, latest_rollouts, run_questions, trajectory_line
from websailor.agent.trajectory import Trajectory
from websailor.errors import InvalidArgumentError, ModelError
from websailor.eval.scoring import Score, read_trajectories, score_trajectories
from websailor.jsonio import appending, read_appended_jsonl
from websailor.judge.base import Judge
from websailor.questions import Question, load_questions

if TYPE_CHECKING:
    from websailor.agent.loop import AgentConfig
    from websailor.tools.environment import EnvSpec


@dataclass
class ExpertFilter:
    """Which graded rollouts become training data.

    Attributes:
        max_tokens: longest trajectory, in tokens of the student's chat template (paper V1: 32k).
        min_tool_calls: fewest tool calls (the paper keeps trajectories with more than a few).
        grounded: keep only rollouts whose every visit is grounded (the page was shown by an
            earlier observation and the thought says where:
            :func:`websailor.eval.grounding.choice_grounding`) and whose answer was read before
            it was given (issue 38: a right answer reached by a guess teaches guessing).
    """

    max_tokens: int = 32768
    min_tool_calls: int = 2
    grounded: bool = True


@dataclass
class ExpertRun:
    """The expert side of ``traj build --source expert``.

    Attributes:
        expert: model spec of the strong model that answers.
        k: rollouts per item.
        judge: judge spec (``em``, ``f1[:T]``, ``llm:SPEC``).
        filter: which graded rollouts are kept.
        tokenizer: model spec of the student whose chat template counts the token budget.
        concurrency: rollouts in flight.
        engine: which engine serves a local expert (``auto``, ``local``, ``vllm``;
            :func:`websailor.agent.session.open_agent`); ``None``: the spec as it is.
    """

    expert: str
    k: int = 4
    judge: str = "em"
    filter: ExpertFilter = field(default_factory=ExpertFilter)
    tokenizer: str = "smollm2"
    concurrency: int = 4
    engine: str | None = None


def side_files(out: Path) -> tuple[Path, Path]:
    """``(rollouts, scores)`` files kept beside ``out``: every sampled rollout and its grade."""
    return out.with_name(out.stem + ".rollouts.jsonl"), out.with_name(out.stem + ".scores.jsonl")


def conversation_tokens(messages: list[dict], tokenizer: Any) -> int:
    """Length of the chat-templated conversation in ``tokenizer``'s tokens."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def grounded(rec: dict) -> bool:
    """Whether every visit of the rollout ``rec`` is grounded and its answer was read before it
    was given (:func:`websailor.eval.grounding.choice_grounding`, :func:`~websailor.eval.grounding.record_grounding`)."""
    from websailor.eval.grounding import choice_grounding, record_grounding

    return all(c["grounded"] for c in choice_grounding(rec["messages"])) and bool(record_grounding(rec).get("grounded"))


def verdict(rec: dict, score: Score, flt: ExpertFilter, tokenizer: Any) -> str:
    """Why a rollout is kept or rejected: ``kept``, ``model_error`` (the expert's endpoint
    failed), ``no_answer`` (it ended otherwise), ``ungraded`` (the judge failed), ``wrong``,
    ``few_tool_calls``, ``ungrounded`` (with ``flt.grounded``: a visit without its reason in
    what was read, or an answer not read before it was given) or ``too_long``."""
    if rec["termination"] == "model_error":
        return "model_error"
    if rec["termination"] != "answer":
        return "no_answer"
    if score.correct is None:
        return "ungraded"
    if not score.correct:
        return "wrong"
    if int(rec.get("num_tool_calls", 0)) < flt.min_tool_calls:
        return "few_tool_calls"
    if flt.grounded and not grounded(rec):
        return "ungrounded"
    if conversation_tokens(rec["messages"], tokenizer) > flt.max_tokens:
        return "too_long"
    return "kept"


def build_expert(
    items: list[Question],
    agent: Agent,
    judge: Judge,
    out: str | Path,
    tokenizer: Any,
    k: int = 4,
    flt: ExpertFilter | None = None,
    concurrency: int = 4,
    rewrite=None,
    progress: bool = True,
    counts: Counter | None = None,
) -> Counter:
    """Sample ``k`` rollouts per item with ``agent``, grade them with ``judge`` and append the
    accepted ones (:func:`verdict`) to ``out`` (each ``(id, rollout)`` once; resumable).

    Args:
        items: questions with gold answers (``websailor.questions.load_questions``).
        agent: the expert agent (a strong model and the tools).
        judge: grades predictions against the gold answers.
        out: accepted trajectories, JSONL; the rollouts and scores files sit beside it.
        tokenizer: counts trajectory tokens for the budget (the student's tokenizer).
        k: rollouts per item.
        flt: acceptance rules.
        concurrency: rollouts in flight.
        rewrite: optional :class:`websailor.train.thoughts.ThoughtRewriter` applied to each
            accepted trajectory before it is written (short-CoT reconstruction).

    Returns:
        Counts of every verdict over the ``len(items) * k`` rollouts, plus ``written``; also
        filled into ``counts`` when given (so a caller has them when ModelError is raised).

    Raises:
        InputFormatError: an output file holds lines that are not its records.
        InvalidArgumentError: another process writes one of the files, ``out`` holds another
            source's trajectories, or the rollouts file another expert's rollouts.
        ModelError: after writing what was accepted, when rollouts ended in a model error or
            could not be graded (a rerun retries them).
    """
    flt = flt or ExpertFilter()
    out = Path(out)
    rollouts_path, scores_path = side_files(out)
    source = agent.model.name if rewrite is None else rewrite.source(agent.model.name)
    check_source(out, read_appended_jsonl(out, "a trajectory record"), source)  # before any model time
    sampled = {str(rec.get("model")) for _, rec in read_appended_jsonl(rollouts_path, "a trajectory record")}
    if sampled - {agent.model.name}:
        raise InvalidArgumentError(
            f"{rollouts_path} holds rollouts of {', '.join(map(repr, sorted(sampled)))}, not of "
            f"{agent.model.name!r}: use another --out for another expert"
        )
    questions = [it.with_gold_record() for it in items]
    run_questions(agent, questions, rollouts_path, rollouts=k, concurrency=concurrency, progress=progress)
    wanted = {(q.id, r): q for q in questions for r in range(k)}
    records = [
        rec
        for rec in read_trajectories([rollouts_path])
        if (q := wanted.get((str(rec["id"]), rec["rollout"]))) is not None and rec["question"] == q.question
    ]
    scores = score_trajectories(records, judge, scores_path, progress=progress)
    counts = Counter() if counts is None else counts
    accepted = []
    for rec, score in zip(records, scores):
        v = verdict(rec, score, flt, tokenizer)
        counts[v] += 1
        if v == "kept":
            accepted.append(rec)
    with appending(out, "a trajectory record") as (fh, existing):
        check_source(out, existing, source)
        have = set(latest_rollouts(out, existing))
        for rec in accepted:
            if (str(rec["id"]), rec["rollout"]) in have:
                continue
            traj = Trajectory.from_dict(rec)
            fh.write(trajectory_line(rewrite(traj) if rewrite else traj))
            fh.flush()
            counts["written"] += 1
        os.fsync(fh.fileno())
    failed = [(v, n) for v, n in (("model_error", counts["model_error"]), ("ungraded", counts["ungraded"])) if n]
    if failed:
        first = next((rec.get("error") for rec in records if rec["termination"] == "model_error"), None)
        raise ModelError(
            f"{counts['written']} expert trajectories written to {out}, but "
            + " and ".join(
                f"{n} rollouts {'ended in a model error' if v == 'model_error' else 'could not be graded (judge errors)'}"
                for v, n in failed
            )
            + (f" (first: {first})" if first else "")
            + "; rerun the same command to retry them"
        )
    return counts


def build_expert_file(
    qa: str | Path,
    out: str | Path,
    run: ExpertRun,
    agent_config: AgentConfig | None = None,
    env: EnvSpec | None = None,
    split: str | None = "train",
    rewrite=None,
    progress: bool = True,
    counts: Counter | None = None,
) -> Counter:
    """:func:`build_expert` on the ``split`` items of the questions file ``qa`` (``None`` for a
    file of another layout, which has no splits), with the
    expert agent of ``run`` in the environment ``env`` (default: local); the expert's model and
    tools are closed at the end.

    Returns:
        The verdict counts and ``written`` (see :func:`build_expert`); also filled into
        ``counts`` when given.

    Raises:
        ConfigError: a bad expert, tokenizer, judge or environment.
        InputFormatError: an unreadable questions file.
        ModelError: see :func:`build_expert`.
    """
    from websailor.agent.session import open_agent
    from websailor.judge import load_judge
    from websailor.train.common import load_tokenizer, resolve_model_dir

    items = load_questions(qa, split=split)
    student = load_tokenizer(resolve_model_dir(run.tokenizer))
    judge = load_judge(run.judge)
    with open_agent(run.expert, env, agent_config, engine=run.engine, rollouts=len(items) * run.k) as session:
        return build_expert(
            items,
            session.agent,
            judge,
            out,
            student,
            k=run.k,
            flt=run.filter,
            concurrency=run.concurrency,
            rewrite=rewrite,
            progress=progress,
            counts=counts,
        )
