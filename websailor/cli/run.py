"""``websailor run``: the agent on one question (steps shown live) or on a questions file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import (
    Engine,
    EngineOpt,
    MaxCallsOpt,
    MaxEnvFailuresOpt,
    MaxTokensOpt,
    ModelOpt,
    PresencePenaltyOpt,
    SeedOpt,
    SummarizeAtOpt,
    Task,
    TaskOpt,
    TemperatureOpt,
    TimeoutOpt,
    TopPOpt,
    agent_config,
    check_output_path,
    env_options,
    fail,
    handle_errors,
    print_metrics,
    service_options,
)
from websailor.errors import EXIT_SERVICE_DOWN, ServiceDown


def print_step(turn: int, action: Any, result: Any) -> None:
    """One step of a live run: the thought, then the call and its observation (or the answer)."""
    from websailor.text import truncate

    if action.thought:
        print(f"[{turn}] think: {truncate(' '.join(action.thought.split()), 300)}")
    if action.answer is not None:
        print(f"[{turn}] answer: {action.answer}")
    elif action.tool_call is not None:
        args = json.dumps(action.tool_call.arguments, ensure_ascii=False)
        print(f"[{turn}] call {action.tool_call.name} {truncate(args, 200)}")
        print(f"     -> {truncate(' '.join(result.observation.split()), 240)}")
    else:
        print(f"[{turn}] reply: {truncate(' '.join(action.text.split()), 240)}")
        print(f"     -> format error: {action.error}")


def print_report(text: Optional[str], report: dict) -> None:
    """A finished report and what its citations say: each reference's problem, and the
    report's own problems (no citations, no reference list)."""
    print("\nreport:\n" + (text or "(none)"))
    counts = report.get("counts", {})
    print(
        f"\ncitations: {counts.get('references', 0)} references, {counts.get('cited_statements', 0)} cited "
        f"statements, {counts.get('pairs', 0)} statement-URL pairs"
    )
    for ref in report.get("references", []):
        if ref.get("problem"):
            print(f"  [{ref['n']}] {ref.get('url') or ref.get('title')}: {ref['problem'].replace('_', ' ')}")
    if report.get("dangling"):
        print(f"  cited but not in the references: {', '.join(map(str, report['dangling']))}")
    if report.get("problems"):
        print(f"  report: {', '.join(p.replace('_', ' ') for p in report['problems'])}")


@handle_errors
@service_options(judge=False)
@env_options()
def run(
    question: Annotated[Optional[str], typer.Argument(help="One question (or use --questions).")] = None,
    questions: Annotated[
        Optional[Path],
        typer.Option(help="Questions file: JSONL with question, optional answer and id, or any layout eval reads."),
    ] = None,
    out: Annotated[Optional[Path], typer.Option(help="Trajectories JSONL (appended; resumes).")] = None,
    rollouts: Annotated[int, typer.Option(min=1, help="Rollouts per question.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts.")] = 4,
    max_calls: MaxCallsOpt = 100,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    temperature: TemperatureOpt = 0.85,
    top_p: TopPOpt = 0.95,
    presence_penalty: PresencePenaltyOpt = 1.1,
    seed: SeedOpt = 0,
    model: ModelOpt = "smollm2",
    engine: EngineOpt = Engine.auto,
    max_env_failures: MaxEnvFailuresOpt = 0,
    task: TaskOpt = Task.qa,
    summarize_at: SummarizeAtOpt = None,
    env_spec: Any = None,
) -> None:
    """Run the ReAct agent on one question (steps shown live) or on a questions file. Tool
    metrics are printed at the end and appended to OUT.tool_metrics.jsonl. A resumed batch run
    reruns the rollouts that ended in a model error or whose tool calls the environment failed
    (beyond --max-env-failures). With --task report the answer is a cited Markdown report;
    its citations are checked against the pages the agent opened. Exits 3 when the rollout (or
    any rollout of a file) ended in a model error; 4 when a service went down (the run stops,
    what finished is kept, rerunning resumes)."""
    from websailor.agent.runner import done_rollouts
    from websailor.agent.session import open_agent
    from websailor.questions import load_questions, resolve_split

    if (question is None) == (questions is None):
        fail("give either a QUESTION or --questions FILE")
    if question is not None and not question.strip():
        fail("the question is empty")
    if questions is not None and out is None:
        fail("--questions needs --out TRAJ.jsonl")
    cfg = agent_config(
        max_calls, max_tokens, timeout, temperature, seed, task.value, summarize_at, top_p, presence_penalty
    )
    items = None
    if questions is not None:  # every layout eval reads; all items of a synth file
        items = load_questions(questions, resolve_split(questions, None, "all"), require_answer=False)
    done: set = set()
    if out is not None:  # check the output before spending any model time
        check_output_path(out)
        done = done_rollouts(out, env_spec.trajectory_settings())
    todo = 1 if items is None else max(0, len(items) * rollouts - len(done))
    # tools and model answer before anything is written
    session = open_agent(model, env_spec, cfg, engine=engine.value, rollouts=todo, check=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    metrics_file = out.with_name(out.name + ".tool_metrics.jsonl") if out is not None else None
    try:
        failed = _run_agent(session.agent, question, items, out, rollouts, concurrency, max_env_failures)
    except ServiceDown as e:
        if out is not None:
            raise  # what finished is in OUT: the usual line says how to resume
        print(f"error: {e}; nothing was saved (no --out); once it answers, run the same command again", file=sys.stderr)
        raise typer.Exit(EXIT_SERVICE_DOWN) from None
    finally:
        print_metrics(session.close(metrics_file))
    if failed:  # a script must not read a model outage as an answer
        print(f"error: {failed}; rerun the same command once the model answers", file=sys.stderr)
        raise typer.Exit(3)


def _run_agent(
    agent: Any,
    question: Optional[str],
    items: Any,
    out: Optional[Path],
    rollouts: int,
    concurrency: int,
    max_env_failures: int = 0,
) -> str | None:
    """Run the question (or the questions), print what happened; returns why the command
    failed when any rollout it ran ended in a model error (exit 3: a script must not read an
    outage as an answer), else ``None``."""
    from websailor.agent.runner import append_trajectory, run_questions

    if items is None:
        traj = agent.run(question, id="cli", on_step=print_step)
        if out is not None:
            append_trajectory(out, traj)
        if traj.report is not None:
            print_report(traj.prediction, traj.report)
        else:
            print(f"\nprediction: {traj.prediction}")
        print(f"termination: {traj.termination}" + (f" ({traj.error})" if traj.error else ""))
        print(
            f"model calls {traj.num_model_calls}, tool calls {traj.num_tool_calls}, "
            f"tokens {traj.tokens['prompt']} prompt / {traj.tokens['completion']} completion, "
            f"time {traj.timings['total_s']:.1f} s (model {traj.timings['model_s']:.1f} s, tools {traj.timings['tools_s']:.2f} s)"
        )
        if traj.summaries:
            done = sum(bool(s["text"]) for s in traj.summaries)
            print(f"context summaries: {done} of {len(traj.summaries)} asked (earlier turns replaced)")
        if traj.env_failures:
            env = traj.env_failures
            print(
                f"environment failures: {env['calls']} tool calls degraded ("
                + ", ".join(f"{k} {n}" for k, n in env["kinds"].items())
                + "): this rollout says nothing about the model"
            )
        return "the rollout ended in a model error" if traj.termination == "model_error" else None
    summary = run_questions(
        agent, items, out, rollouts=rollouts, concurrency=concurrency, max_env_failures=max_env_failures
    )
    terms = ", ".join(f"{k} {v}" for k, v in summary.terminations.most_common()) or "none"
    print(
        f"{summary.finished} trajectories written to {out} ({summary.skipped} already there) in {summary.seconds:.1f} s"
    )
    print(f"terminations: {terms}; tool calls {summary.tool_calls}, model calls {summary.model_calls}")
    if summary.env_failed:
        print(
            f"environment failures: in {summary.env_failed} rollouts the environment degraded a tool call; "
            f"rerunning the same command runs again those with more than {max_env_failures}"
        )
    errors = summary.terminations.get("model_error", 0)
    if errors:
        return f"{errors} of {summary.finished} rollouts run ended in a model error (they are not kept as done)"
    return None


def register(app: typer.Typer) -> None:
    app.command()(run)
