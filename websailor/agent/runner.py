"""Batch runs: many questions, K rollouts each, concurrent, appended as they finish, resumable.

Each finished trajectory is appended to the output JSONL at once (flushed and fsynced), so a
killed run loses only rollouts in flight; running again with the same output skips every
``(id, rollout)`` already there. A partial last line left by a kill is dropped first.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from websailor.agent.loop import Agent
from websailor.agent.trajectory import Trajectory, environment_failed
from websailor.errors import InputFormatError, ServiceDown
from websailor.jsonio import appending, read_appended_jsonl
from websailor.log import get_logger
from websailor.questions import Question, question_level

logger = get_logger(__name__)


def trajectory_line(traj: Trajectory) -> str:
    """One JSONL line. ASCII-escaped, so that no character a model may emit (lone
    surrogates, U+2028 line separators) can break the line structure of the file."""
    return json.dumps(traj.to_dict(), ensure_ascii=True) + "\n"


def append_trajectory(out: Path, traj: Trajectory) -> None:
    """Append one record and make it durable (single-question runs)."""
    with appending(out, "a trajectory record") as (fh, _):
        fh.write(trajectory_line(traj))
        fh.flush()
        os.fsync(fh.fileno())


def check_source(out: Path, records: list[tuple[int, dict]], model: str) -> None:
    """Refuse to add trajectories of ``model`` (their source: ``constructive``, an expert
    model, ``imported``, with a thought writer) to a file that holds another source's: resuming
    would take their ids for done and skip the new ones silently.

    Raises:
        InvalidArgumentError: ``out`` holds trajectories of another source.
    """
    from websailor.errors import InvalidArgumentError

    others = sorted({str(rec.get("model")) for _, rec in records} - {model})
    if others:
        raise InvalidArgumentError(
            f"{out} holds trajectories of {', '.join(map(repr, others))}; these would be of "
            f"{model!r}: write them to another file (train sft reads several --data files)"
        )


def check_env_settings(out: Path, records: list[tuple[int, dict]], settings: dict[str, int]) -> None:
    """Refuse to add trajectories made with the observation settings ``settings`` (a record's
    ``env_settings``; empty: the paper's) to a file whose trajectories were made with others:
    resuming would mix observation sizes in one run's figures or data.

    Raises:
        InvalidArgumentError: a record of ``out`` has other settings; the message names the
            option (``--search-results``, ...) and both values.
    """
    from websailor.errors import InvalidArgumentError
    from websailor.tools.environment import OBSERVATION_FIELDS, OPTIONS

    def shown(value: Any) -> str:
        return "the default" if value is None else str(value)

    for _, rec in records:
        theirs = rec.get("env_settings") or {}
        if not isinstance(theirs, dict):
            theirs = {}
        differ = [f for f in OBSERVATION_FIELDS if theirs.get(f) != settings.get(f)]
        if differ:
            what = "; ".join(
                f"{OPTIONS[f]} {shown(theirs.get(f))} there, {shown(settings.get(f))} in this run" for f in differ
            )
            raise InvalidArgumentError(
                f"{out} holds trajectories made with other observation settings ({what}): give the same "
                "values to resume, or write to another output"
            )


def append_new_trajectories(
    out: Path,
    makers: list[tuple[str, Callable[[], Trajectory | None]]],
    desc: str,
    progress: bool = True,
    transform: Callable[[Trajectory], Trajectory] | None = None,
    model: str | None = None,
) -> tuple[int, int]:
    """Append one trajectory per id of ``makers`` that ``out`` does not hold yet, each made
    on demand by its function (``None``: nothing for that id; then passed through
    ``transform``, if given) and flushed at
    once (the file is locked meanwhile, see :func:`websailor.jsonio.appending`). With
    ``model`` (the trajectories' source), a file of another source is refused
    (:func:`check_source`). Returns ``(written, skipped)``.

    Raises:
        InputFormatError: ``out`` holds lines that are not JSON objects.
        InvalidArgumentError: another process is writing ``out``, or it holds another source.
    """
    with appending(out, "a trajectory record") as (fh, records):
        if model is not None:
            check_source(out, records, model)
        done = {str(rec.get("id")) for _, rec in records}
        todo = [make for qid, make in makers if qid not in done]
        for make in tqdm(todo, desc=desc, unit="traj", disable=not progress):
            traj = make()
            if traj is None:  # the maker had nothing to write for this id
                continue
            fh.write(trajectory_line(transform(traj) if transform else traj))
            fh.flush()
        os.fsync(fh.fileno())
    return len(todo), len(makers) - len(todo)


def done_rollouts(out: Path, env_settings: dict[str, int] | None = None) -> set[tuple[str, int]]:
    """``(id, rollout)`` pairs already in ``out`` (reads only; an unfinished last line is skipped).
    With ``env_settings`` (a run's observation settings), a file made with others is refused
    (:func:`check_env_settings`): commands check before loading a model.

    Raises:
        InputFormatError: a line is not a trajectory record.
        InvalidArgumentError: ``out`` holds trajectories made with other observation settings.
    """
    records = read_appended_jsonl(out, "a trajectory record")
    if env_settings is not None:
        check_env_settings(out, records, env_settings)
    return set(latest_rollouts(out, records))


@dataclass
class RunSummary:
    """Figures of a batch run (this invocation only; ``skipped`` were already done)."""

    finished: int = 0
    skipped: int = 0
    terminations: Counter = field(default_factory=Counter)
    tool_calls: int = 0
    model_calls: int = 0
    seconds: float = 0.0
    #: rollouts of this invocation in which the environment degraded a tool call's observation
    env_failed: int = 0

    def add(self, t: Trajectory) -> None:
        self.finished += 1
        self.terminations[t.termination] += 1
        self.tool_calls += t.num_tool_calls
        self.model_calls += t.num_model_calls
        self.env_failed += bool(t.env_failures)


def stream_rollouts(
    agent: Agent, todo: list[tuple[Question, int]], fh: TextIO, concurrency: int = 4
) -> Iterator[Trajectory]:
    """Run ``(question, rollout)`` pairs with ``concurrency`` threads; append each finished
    trajectory to the open file ``fh`` (flushed and fsynced; see
    :func:`websailor.jsonio.appending`), with the question's level when it has one, and yield
    it, in finishing order. Stopping early (an
    interrupt, or the consumer closing the generator) cancels the calls not started and does
    not wait for those in flight; what finished is already on disk.

    Raises:
        ServiceDown: a rollout met a service declared down (:mod:`websailor.breaker`): the
            rollouts that had finished by then are written first, the others are not (a
            resumed run runs them).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rollout")
    finished_cleanly = False

    def write(fut: Any) -> Trajectory:
        traj = fut.result()
        traj.level = question_level(futures[fut])
        fh.write(trajectory_line(traj))  # only this thread writes
        fh.flush()
        os.fsync(fh.fileno())
        return traj

    try:
        futures = {pool.submit(agent.run, q.question, q.id, r, q.answer): q for q, r in todo}
        written: set = set()
        for fut in as_completed(futures):
            try:
                traj = write(fut)
            except ServiceDown:
                for other in futures:  # keep what finished before the outage stopped the run
                    if (
                        other is not fut
                        and other not in written
                        and other.done()
                        and not other.cancelled()
                        and other.exception() is None
                    ):
                        yield write(other)
                raise
            written.add(fut)
            yield traj
        finished_cleanly = True
    finally:
        pool.shutdown(wait=finished_cleanly, cancel_futures=not finished_cleanly)


def latest_rollouts(out: Path, records: list[tuple[int, dict]]) -> dict[tuple[str, int], dict]:
    """The latest record of each ``(id, rollout)``."""
    done: dict[tuple[str, int], dict] = {}
    for lineno, rec in records:
        try:
            rollout = rec["rollout"]
            if isinstance(rollout, bool) or not isinstance(rollout, int):
                raise TypeError
            done[(str(rec["id"]), rollout)] = rec
        except (KeyError, TypeError, ValueError):
            raise InputFormatError(
                f"{out} line {lineno} is not a trajectory record; use another --out or repair the file"
            ) from None
    return done


def finished(rec: dict | None, question: str | None = None, max_env_failures: int = 0) -> bool:
    """Whether a stored rollout counts as done: it did not end in a model error (the endpoint
    failed: rerun it), the environment degraded at most ``max_env_failures`` of its tool calls
    (:func:`~websailor.agent.trajectory.environment_failed`: an outage, rerun it), and it
    answered ``question`` when one is given (the same id may carry another question in an
    edited benchmark file: rerun it). A record whose ``env_failures`` is malformed counts as
    not done."""
    if rec is None or rec.get("termination") == "model_error":
        return False
    if question is not None and rec.get("question") != question:
        return False
    try:
        return not environment_failed(rec, max_env_failures)
    except ValueError:
        return False


def run_questions(
    agent: Agent,
    questions: list[Question],
    out: str | Path,
    rollouts: int = 1,
    concurrency: int = 4,
    progress: bool = True,
    max_env_failures: int = 0,
) -> RunSummary:
    """Run every question ``rollouts`` times with ``concurrency`` threads, appending each
    finished trajectory to ``out``; resumes a previous run on the same file, rerunning the
    rollouts that :func:`finished` does not accept (model errors, and rollouts in which the
    environment degraded more than ``max_env_failures`` tool calls). The file is locked while
    the run writes it (a second run on it is refused).

    Raises:
        InvalidArgumentError: another process is writing ``out``, or it holds trajectories
            made with other observation settings than the agent's (:func:`check_env_settings`).
        InputFormatError: ``out`` holds lines that are not trajectory records.
    """
    import time

    if rollouts < 1 or concurrency < 1:
        raise ValueError("rollouts and concurrency must be at least 1")
    if isinstance(max_env_failures, bool) or not isinstance(max_env_failures, int) or max_env_failures < 0:
        raise ValueError(f"max_env_failures must be an integer of at least 0, got {max_env_failures!r}")
    out = Path(out)
    with appending(out, "a trajectory record") as (fh, records):
        done = latest_rollouts(out, records)
        check_env_settings(out, records, getattr(agent, "env_settings", {}))
        if records:
            first = records[0][1]
            for what, theirs, ours in (
                ("model", first.get("model"), agent.model.name),
                ("environment", first.get("env"), agent.env),
            ):
                if theirs != ours:
                    logger.warning(
                        "%s holds trajectories of %s %r; this run uses %r. Resuming keeps every finished "
                        "(id, rollout) already there: use another output to compare",
                        out,
                        what,
                        theirs,
                        ours,
                    )
        todo = [
            (q, r)
            for q in questions
            for r in range(rollouts)
            if not finished(done.get((q.id, r)), q.question, max_env_failures)
        ]
        redo = sum((q.id, r) in done for q, r in todo)
        summary = RunSummary(skipped=len(questions) * rollouts - len(todo))
        if summary.skipped:
            logger.info("%s: %d rollouts already done, %d to run", out, summary.skipped, len(todo))
        if redo:
            logger.warning(
                "%s: %d stored rollouts are run again (they ended in a model error, the environment failed "
                "their tool calls, or their id now has another question); the new records supersede them",
                out,
                redo,
            )
        t0 = time.perf_counter()
        with tqdm(total=len(todo), desc="rollouts", unit="traj", disable=not progress) as bar:
            for traj in stream_rollouts(agent, todo, fh, concurrency):
                summary.add(traj)
                bar.update(1)
                bar.set_postfix(answered=summary.terminations["answer"])
        summary.seconds = time.perf_counter() - t0
    return summary
