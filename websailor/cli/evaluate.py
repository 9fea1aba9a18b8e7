"""``websailor eval`` (run, grade, report) and ``websailor score`` (grade existing trajectories)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import (
    Engine,
    EngineOpt,
    JsonOpt,
    MaxCallsOpt,
    MaxEnvFailuresOpt,
    MaxTokensOpt,
    ModelOpt,
    PresencePenaltyOpt,
    SeedOpt,
    Split,
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
    logger,
    print_json,
    print_metrics,
    service_options,
    warn_unused_env,
)

LanguageOpt = Annotated[
    Optional[str], typer.Option(help="Report tasks: only the tasks in this language (en, zh; default all).")
]


def print_summary(summary: dict) -> None:
    """The report table of an evaluation summary, as markdown."""
    from websailor.eval.report import to_markdown

    print(to_markdown(summary), end="")


@handle_errors
@service_options()
@env_options()
def eval_cmd(
    bench: Annotated[
        str, typer.Option(help="Benchmark: a file (layout detected), FORMAT:PATH or a name (fanoutqa-dev).")
    ],
    out: Annotated[Path, typer.Option(help="Output directory (trajectories, scores, report; resumes).")],
    split: Annotated[Optional[Split], typer.Option(help="Split of synthesized QA items (default test).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the first N questions.")] = None,
    model: ModelOpt = "smollm2",
    engine: EngineOpt = Engine.auto,
    rollouts: Annotated[int, typer.Option(min=1, help="k: rollouts per question.")] = 3,
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts.")] = 8,
    max_calls: MaxCallsOpt = 100,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    temperature: TemperatureOpt = 0.85,
    top_p: TopPOpt = 0.95,
    presence_penalty: PresencePenaltyOpt = 1.1,
    seed: SeedOpt = 0,
    max_env_failures: MaxEnvFailuresOpt = 0,
    task: TaskOpt = Task.qa,
    summarize_at: SummarizeAtOpt = None,
    language: LanguageOpt = None,
    env_spec: Any = None,
) -> None:
    """Run the agent k times on a benchmark, grade every rollout and write the report (tool
    metrics go to OUT/tool_metrics.jsonl). Rollouts that ended in a model error or whose tool
    calls the environment failed are ungraded, counted in the report, and rerun by the next
    run of the same command. With --task report, --bench is DeepResearch Bench's task file (or
    its repository folder) and every report is scored with RACE and FACT by --judge llm:MODEL."""
    from websailor.agent.runner import done_rollouts
    from websailor.agent.session import open_agent
    from websailor.config import websailor_home
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge
    from websailor.models import check_endpoint
    from websailor.questions import load_questions

    cfg = agent_config(
        max_calls, max_tokens, timeout, temperature, seed, task.value, summarize_at, top_p, presence_penalty
    )
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; eval writes a directory")
    if task is Task.report:
        if split is not None:
            fail("--split is for synthesized QA items; report tasks have none")
        return _eval_reports(
            bench, out, limit, language, model, rollouts, judge, concurrency, cfg, env_spec, engine.value
        )
    if language is not None:
        fail("--language selects report tasks: use it with --task report")
    items = load_questions(bench, split=split.value if split else None, limit=limit, require_answer=False)
    no_gold = sum(it.gold is None for it in items)
    if no_gold:  # run and reported, never counted wrong
        print(f"{no_gold} of {len(items)} questions in {bench} have no gold answer: their rollouts are ungraded")
    check_output_path(out)
    # a wrong --out fails before any model time
    done = done_rollouts(out / "trajectories.jsonl", env_spec.trajectory_settings())
    grader = load_judge(judge, cache=websailor_home() / "cache" / "judge.sqlite")
    check_endpoint(judge)  # an llm: judge's endpoint answers, or one line in seconds
    todo = max(0, len(items) * rollouts - len({(i, r) for i, r in done if r < rollouts}))
    # tools and model answer before anything is written
    session = open_agent(model, env_spec, cfg, engine=engine.value, rollouts=todo, check=True)
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


def report_judge(judge: str) -> Any:
    """The judge model of report scoring: ``llm:MODEL_SPEC`` only (RACE and FACT need a model
    that reads); its endpoint is checked before anything runs.

    Raises:
        typer.Exit: another judge (one line, exit 2).
    """
    from websailor.models import check_endpoint, load_model

    if not judge.startswith("llm:") or not judge[4:].strip():
        fail(f"--judge {judge!r} cannot score reports: RACE and FACT need a judge model, --judge llm:MODEL_SPEC")
    check_endpoint(judge)
    from websailor.judge import judge_model

    return judge_model(load_model(judge[4:], check=True))


def _eval_reports(
    bench: str, out: Path, limit: Optional[int], language: Optional[str], model: str, rollouts: int,
    judge: str, concurrency: int, cfg: Any, env_spec: Any, engine: str = "auto",
) -> None:  # fmt: skip
    """``eval --task report``: run, score with RACE and FACT, write the summary."""
    from websailor.agent.runner import done_rollouts
    from websailor.agent.session import open_agent
    from websailor.config import websailor_home
    from websailor.eval.report_eval import evaluate_reports, to_markdown
    from websailor.eval.report_tasks import load_report_tasks

    if language is not None and language not in ("en", "zh"):
        fail(f"--language must be en or zh, got {language!r}")
    tasks = load_report_tasks(bench, language)[:limit]
    if not tasks:
        fail(f"{bench} has no report tasks" + (f" in language {language!r}" if language else ""))
    check_output_path(out)
    done = done_rollouts(out / "trajectories.jsonl", env_spec.trajectory_settings())
    judge_model = report_judge(judge)
    todo = max(0, len(tasks) * rollouts - len(done))
    session = open_agent(model, env_spec, cfg, engine=engine, rollouts=todo, check=True)
    out.mkdir(parents=True, exist_ok=True)
    logger.info("%d report tasks from %s, k = %d, judge %s", len(tasks), bench, rollouts, judge_model.name)
    try:
        summary = evaluate_reports(
            tasks, session.agent, judge_model, out, rollouts=rollouts, concurrency=concurrency, bench=bench,
            cache=websailor_home() / "cache" / "report_judge.sqlite",
        )  # fmt: skip
    finally:
        print_metrics(session.close(out / "tool_metrics.jsonl"))
        judge_model.close()
    print(to_markdown(summary), end="")
    print(f"\nwritten to {out}: trajectories.jsonl, race.jsonl, fact.jsonl, summary.json, report.md")
    exit_if_no_report_scored(summary)


def exit_if_no_report_scored(summary: dict) -> None:
    """Exit 3 with one line when no report could be scored (every rollout ended in a model
    error or an environment failure, or the judge never gave a usable score)."""
    race = summary["race"]
    scored = race["relative"]["n"] - race["relative"]["unscored"] + race["absolute"]["n"] - race["absolute"]["unscored"]
    if summary["rollouts"] and not scored:
        why = (
            ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in summary["unscored"].items()) or "the judge gave no score"
        )
        print(
            f"error: none of the {summary['rollouts']} reports could be scored ({why}); rerun once they answer",
            file=sys.stderr,
        )
        raise typer.Exit(3)


def exit_if_all_ungraded(summary: dict, rerun: str) -> None:
    """Exit 3 with one line when no rollout of the evaluation could be graded (model errors,
    environment failures, a judge that did not answer), naming the reasons from the summary's
    ``ungraded_for`` and what to rerun (``rerun``): a script must not read an outage as a
    score. Some rollouts ungraded exit 0; the report counts them; so does a question file
    without gold answers (every rollout ungraded for ``no_gold_answer``)."""
    total, ungraded = summary.get("trajectories") or 0, summary.get("ungraded") or 0
    if total and (summary.get("ungraded_for") or {}).get("no_gold_answer", 0) >= total:
        return  # a question file without answers: the rollouts are the result, and no outage
    if total and ungraded >= total:
        why = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in (summary.get("ungraded_for") or {}).items())
        print(
            f"error: none of the {total} rollouts could be graded ({why or 'ungraded'}); {rerun}",
            file=sys.stderr,
        )
        raise typer.Exit(3)


@handle_errors
@service_options()
@env_options()
def score(
    paths: Annotated[list[Path], typer.Argument(help="Trajectory JSONL files (one run, one k).")],
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    out: Annotated[
        Optional[Path], typer.Option(help="Also write scores.jsonl, summary.json, report.md, plots here.")
    ] = None,
    max_env_failures: MaxEnvFailuresOpt = 0,
    as_json: JsonOpt = False,
    task: TaskOpt = Task.qa,
    bench: Annotated[
        Optional[str],
        typer.Option(help="Report tasks: DeepResearch Bench's task file or folder (criteria, references)."),
    ] = None,
    env_spec: Any = None,
) -> None:
    """Grade existing trajectory files and print the report table (rollouts whose tool calls
    the environment failed beyond --max-env-failures are ungraded; a large value grades them
    all, to see what an outage would have cost). With --task report: RACE and FACT scores of
    report trajectories (--out needed; the environment options choose how cited pages are read)."""
    if task is Task.report:
        return _score_reports(paths, judge, out, bench, as_json, env_spec)
    if bench is not None:
        fail("--bench gives report tasks: use it with --task report")
    warn_unused_env(env_spec, "report scoring (--task report)")
    from websailor.config import websailor_home
    from websailor.eval.report import summarize, write_report
    from websailor.eval.scoring import read_trajectories, rollouts_per_question, score_trajectories
    from websailor.judge import load_judge
    from websailor.models import check_endpoint

    records = read_trajectories(paths)
    report = next((r for r in records if r.get("task") == "report"), None)
    if report is not None:
        reports = [p for p in paths if any(r.get("task") == "report" for r in read_trajectories([p]))]
        if len(reports) < len(paths):
            qa = [p for p in paths if p not in reports]
            fail(
                f"the files mix tasks: {', '.join(map(str, reports))} hold{'s' if len(reports) == 1 else ''} report "
                f"trajectories, {', '.join(map(str, qa))} QA ones: score them separately (the reports with --task "
                "report --judge llm:MODEL_SPEC --out DIR)"
            )
        fail(
            f"{', '.join(map(str, paths))} {'hold' if len(paths) > 1 else 'holds'} report trajectories (task "
            f"'report', e.g. {report['id']!r}), not QA: add --task report (with --judge llm:MODEL_SPEC --out DIR)"
        )
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


def _score_reports(
    paths: list[Path], judge: str, out: Optional[Path], bench: Optional[str], as_json: bool, env_spec: Any
) -> None:
    """``score --task report``: RACE and FACT of existing report trajectories."""
    from websailor.config import websailor_home
    from websailor.eval.report_eval import read_report_trajectories, score_reports, to_markdown, write_report_summary
    from websailor.eval.report_tasks import load_report_tasks
    from websailor.tools.environment import open_environment

    if out is None:
        fail("--task report needs --out DIR: race.jsonl and fact.jsonl are written there as they are scored")
    if out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; score writes a directory")
    records = read_report_trajectories(paths)
    tasks = load_report_tasks(bench) if bench is not None else []
    judge_model = report_judge(judge)
    environment = open_environment(env_spec)
    out.mkdir(parents=True, exist_ok=True)
    try:
        scored = score_reports(
            records, tasks, judge_model, environment.tools, out,
            cache=websailor_home() / "cache" / "report_judge.sqlite", progress=not as_json, env=environment.name,
        )  # fmt: skip
    finally:
        environment.close()
        judge_model.close()
    summary = write_report_summary(records, scored, out, ", ".join(p.name for p in paths))
    if as_json:
        print_json(summary)
    else:
        print(to_markdown(summary), end="")
    exit_if_no_report_scored(summary)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_cmd)
    app.command()(score)
