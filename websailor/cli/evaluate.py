"""``websailor eval`` (run, grade, report) and ``websailor score`` (grade existing trajectories)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import (
    JsonOpt,
    MaxCallsOpt,
    MaxEnvFailuresOpt,
    MaxTokensOpt,
    ModelOpt,
    SeedOpt,
    Split,
    TemperatureOpt,
    TimeoutOpt,
    agent_config,
    check_output_path,
    env_options,
    fail,
    handle_errors,
    logger,
    print_json,
    print_metrics,
)


def print_summary(summary: dict) -> None:
    """The report table of an evaluation summary, as markdown."""
    from websailor.eval.report import to_markdown

    print(to_markdown(summary), end="")


@handle_errors
@env_options()
def eval_cmd(
    bench: Annotated[
        str, typer.Option(help="Benchmark: a file (layout detected), FORMAT:PATH or a name (fanoutqa-dev).")
    ],
    out: Annotated[Path, typer.Option(help="Output directory (trajectories, scores, report; resumes).")],
    split: Annotated[Optional[Split], typer.Option(help="Split of synthesized QA items (default test).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the first N questions.")] = None,
    model: ModelOpt = "smollm2",
    rollouts: Annotated[int, typer.Option(min=1, help="k: rollouts per question.")] = 3,
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts.")] = 8,
    max_calls: MaxCallsOpt = 100,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    temperature: TemperatureOpt = 0.85,
    seed: SeedOpt = 0,
    max_env_failures: MaxEnvFailuresOpt = 0,
    env_spec: Any = None,
) -> None:
    """Run the agent k times on a benchmark, grade every rollout and write the report (tool
    metrics go to OUT/tool_metrics.jsonl). Rollouts that ended in a model error or whose tool
    calls the environment failed are ungraded, counted in the report, and rerun by the next
    run of the same command."""
    from websailor.agent.runner import done_rollouts
    from websailor.agent.session import open_agent
    from websailor.config import websailor_home
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge
    from websailor.models import check_endpoint
    from websailor.questions import load_questions

    cfg = agent_config(max_calls, max_tokens, timeout, temperature, seed)
    items = load_questions(bench, split=split.value if split else None, limit=limit)
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; eval writes a directory")
    check_output_path(out)
    done_rollouts(
        out / "trajectories.jsonl", env_spec.trajectory_settings()
    )  # a wrong --out fails before any model time
    grader = load_judge(judge, cache=websailor_home() / "cache" / "judge.sqlite")
    check_endpoint(judge)  # an llm: judge's endpoint answers, or one line in seconds
    session = open_agent(model, env_spec, cfg, check=True)  # tools and model answer before anything is written
    out.mkdir(parents=True, exist_ok=True)
    logger.info("%d questions from %s, k = %d, judge %s", len(items), bench, rollouts, grader.name)
    try:
        summary = evaluate(
            items,
            session.agent,
            grader,
            out,
            EvalConfig(rollouts=rollouts, concurrency=concurrency, max_env_failures=max_env_failures),
            bench=bench,
        )
    finally:
        print_metrics(session.close(out / "tool_metrics.jsonl"))
    print_summary(summary)
    print(f"\nwritten to {out}: trajectories.jsonl, scores.jsonl, summary.json, report.md, *.png")
    exit_if_all_ungraded(summary, "rerun the same command once the model, the tools and the judge answer")


def exit_if_all_ungraded(summary: dict, rerun: str) -> None:
    """Exit 3 with one line when no rollout of the evaluation could be graded (model errors,
    environment failures, a judge that did not answer), naming the reasons from the summary's
    ``ungraded_for`` and what to rerun (``rerun``): a script must not read an outage as a
    score. Some rollouts ungraded exit 0; the report counts them."""
    total, ungraded = summary.get("trajectories") or 0, summary.get("ungraded") or 0
    if total and ungraded >= total:
        why = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in (summary.get("ungraded_for") or {}).items())
        print(
            f"error: none of the {total} rollouts could be graded ({why or 'ungraded'}); {rerun}",
            file=sys.stderr,
        )
        raise typer.Exit(3)


@handle_errors
def score(
    paths: Annotated[list[Path], typer.Argument(help="Trajectory JSONL files (one run, one k).")],
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    out: Annotated[
        Optional[Path], typer.Option(help="Also write scores.jsonl, summary.json, report.md, plots here.")
    ] = None,
    max_env_failures: MaxEnvFailuresOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Grade existing trajectory files and print the report table (rollouts whose tool calls
    the environment failed beyond --max-env-failures are ungraded; a large value grades them
    all, to see what an outage would have cost)."""
    from websailor.config import websailor_home
    from websailor.eval.report import summarize, write_report
    from websailor.eval.scoring import read_trajectories, rollouts_per_question, score_trajectories
    from websailor.judge import load_judge
    from websailor.models import check_endpoint

    records = read_trajectories(paths)
    rollouts_per_question(records)
    for field, what in (("model", "models"), ("env", "envs"), ("env_settings", "observation settings")):
        seen = sorted(
            {
                json.dumps(r.get(field) or {}, sort_keys=True) if field == "env_settings" else str(r.get(field))
                for r in records
            }
        )
        if len(seen) > 1:
            logger.warning(
                "these trajectories come from different %s (%s): the figures pool them", what, ", ".join(seen)
            )
    grader = load_judge(judge, cache=websailor_home() / "cache" / "judge.sqlite")
    check_endpoint(judge)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    scores = score_trajectories(
        records,
        grader,
        out / "scores.jsonl" if out else None,
        progress=not as_json,
        max_env_failures=max_env_failures,
    )
    bench = ", ".join(p.name for p in paths)
    summary = (
        write_report(scores, out, bench, max_env_failures=max_env_failures)
        if out
        else summarize(scores, bench, max_env_failures=max_env_failures)
    )
    if as_json:
        print_json(summary)
    else:
        print_summary(summary)
    exit_if_all_ungraded(
        summary,
        "a judge that did not answer: rerun once it does; model errors and environment failures: rerun the eval "
        "or run that made the trajectories",
    )


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command()(score)
