"""``websailor traj build``: SFT trajectories, constructive, expert or imported."""

from __future__ import annotations

from collections import Counter
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import (
    Engine,
    EngineOpt,
    SeedOpt,
    Split,
    TemperatureOpt,
    agent_config,
    env_options,
    fail,
    handle_errors,
    warn_unused_env,
)

traj_app = typer.Typer(
    help="Training trajectories for SFT: constructive, expert (rejection sampling) or imported.", no_args_is_help=True
)

#: The verdicts ``traj build --source expert`` prints, in order.
VERDICTS = ("kept", "wrong", "no_answer", "few_tool_calls", "ungrounded", "too_long", "ungraded", "model_error")


class TrajSource(str, Enum):
    constructive = "constructive"
    expert = "expert"
    import_ = "import"


@traj_app.command("build")
@handle_errors
@env_options(exclude=("corpus",))
def traj_build(
    out: Annotated[Path, typer.Option(help="Trajectories JSONL (appended; resumes).")],
    qa: Annotated[
        Optional[Path], typer.Option(help="QA items JSONL (websailor synth), for constructive and expert.")
    ] = None,
    source: Annotated[
        TrajSource,
        typer.Option(
            help="constructive: replay each item's solution path through the tools; "
            "expert: keep the correct rollouts of a strong model; "
            "import: convert ChatML (Tongyi / WebDancer) trajectories."
        ),
    ] = TrajSource.constructive,
    from_: Annotated[Optional[Path], typer.Option("--from", help="ChatML JSONL to import.")] = None,
    split: Annotated[
        Optional[Split],
        typer.Option(help="Which items of a synth file (default train; never train on test); other files have none."),
    ] = None,
    expert: Annotated[
        Optional[str],
        typer.Option(help="Expert model for --source expert: openai:MODEL@URL, vllm:NAME@URL, hf:DIR or smollm2."),
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Expert rollouts per item.")] = 4,
    judge: Annotated[str, typer.Option(help="Judge of the expert's answers: em, f1[:T] or llm:SPEC.")] = "em",
    max_tokens: Annotated[
        int, typer.Option(min=16, help="Token budget of a kept expert trajectory (student's tokenizer).")
    ] = 32768,
    min_tool_calls: Annotated[int, typer.Option(min=0, help="Fewest tool calls of a kept expert trajectory.")] = 2,
    grounded: Annotated[
        bool,
        typer.Option(
            help="Expert: keep only rollouts whose visits have their reason in what was read and whose answer "
            "was read before it was given (--no-grounded keeps right guesses too)."
        ),
    ] = True,
    tokenizer: Annotated[
        str, typer.Option(help="Student model whose tokenizer counts the budget: smollm2 or hf:DIR.")
    ] = "smollm2",
    max_calls: Annotated[int, typer.Option(min=1, help="Expert: model calls per question.")] = 100,
    max_turn_tokens: Annotated[
        Optional[int], typer.Option(min=1, help="Expert: completion tokens per model call (default: the model's).")
    ] = None,
    temperature: TemperatureOpt = 0.85,
    seed: SeedOpt = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="Expert rollouts in flight.")] = 4,
    engine: EngineOpt = Engine.auto,
    rewrite_thoughts: Annotated[
        Optional[str],
        typer.Option(
            help="Model that rewrites every step's thought concisely "
            "(short-CoT reconstruction): smollm2, hf:DIR or openai:MODEL@URL."
        ),
    ] = None,
    corpus: Annotated[
        Optional[Path],
        typer.Option(
            help="Corpus of the local tools: constructive replays, and expert rollouts in the local environment "
            "(default: the embedded corpus in $WEBSAILOR_HOME)."
        ),
    ] = None,
    distractor_share: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Constructive: share of the items whose trajectory first visits and rejects a wrong candidate "
            "(drawn from each item's id).",
        ),
    ] = 0.3,  # websailor.train.constructive.DEFAULT_DISTRACTOR_SHARE (imported lazily, as the command's code is)
    question_query: Annotated[
        bool,
        typer.Option(
            help="Constructive: the first search also queries the question's own text, beside the path's first "
            "clue, so the opening move carries over to questions that name no entity.",
        ),
    ] = True,
    env_spec: Any = None,
) -> None:
    """Build SFT trajectories. Expert rollouts run in the environment the environment options
    choose (default: local tools over --corpus); constructive replays use the local tools with
    the observation settings (--observations, --search-results, --snippet-chars,
    --evidence-chars), recorded in each trajectory (env_settings)."""
    if source != TrajSource.expert:
        why = (
            "imported trajectories run no tools"
            if source == TrajSource.import_
            else ("constructive trajectories replay through the local tools over --corpus")
        )
        from websailor.tools.environment import OBSERVATION_FIELDS

        unused = env_spec
        if source == TrajSource.constructive:  # the observation settings apply to the replay
            unused = env_spec.model_copy(update=dict.fromkeys(OBSERVATION_FIELDS))
        warn_unused_env(unused, f"--source expert ({why})")
    transform = None
    if rewrite_thoughts:
        from websailor.models import load_model
        from websailor.train.thoughts import ThoughtRewriter

        transform = ThoughtRewriter(load_model(rewrite_thoughts))

    def source_name(source: str) -> str:
        return transform.source(source) if transform else source

    if source == TrajSource.import_:
        from websailor.train.importer import import_chatml_file

        if from_ is None:
            fail("--source import needs --from CHATML.jsonl")
        written, skipped = import_chatml_file(from_, out, transform=transform, source=source_name("imported"))
        print(f"{written} imported trajectories written to {out} ({skipped} already there)")
        from websailor.train.traj_stats import trajectory_stats

        stats = trajectory_stats(out)  # kept whatever they teach, but counted (traj stats shows the rest)
        ungrounded = stats["visits"] - stats["visits_grounded"]
        print(
            f"{ungrounded} of {stats['visits']} visits in {out} open a page with no reason in what was read before"
            + (" (train sft warns about them)" if ungrounded else "")
        )
        return
    if qa is None:
        fail(f"--source {source.value} needs --qa QA.jsonl")
    if source == TrajSource.expert:
        from websailor.questions import resolve_split
        from websailor.train.expert import ExpertFilter, ExpertRun, build_expert_file, side_files

        if not expert:
            fail("--source expert needs --expert MODEL (the strong model that answers)")
        items_split = resolve_split(qa, split.value if split else None, "train")
        run = ExpertRun(
            expert, k, judge, ExpertFilter(max_tokens, min_tool_calls, grounded), tokenizer, concurrency, engine.value
        )
        cfg = agent_config(max_calls, max_turn_tokens, None, temperature, seed)
        env = env_spec if corpus is None else env_spec.model_copy(update={"corpus": corpus})
        counts: Counter = Counter()
        try:
            build_expert_file(qa, out, run, cfg, env, split=items_split, rewrite=transform, counts=counts)
        finally:
            if counts:
                rollouts_file, _ = side_files(out)
                verdicts = ", ".join(f"{v} {counts[v]}" for v in VERDICTS)  # one verdict per rollout of every item
                print(f"{sum(counts[v] for v in VERDICTS)} expert rollouts ({rollouts_file}): {verdicts}")
        print(f"{counts['written']} expert trajectories written to {out}")
        return
    from websailor.agent.runner import check_env_settings
    from websailor.corpus import Corpus
    from websailor.jsonio import read_appended_jsonl
    from websailor.synth.dataset import read_items
    from websailor.tools.local import build_local_tools
    from websailor.train.constructive import build_constructive
    from websailor.train.traj_stats import construction_counts, format_construction_counts

    if not qa.is_file():
        fail(f"--source constructive needs --qa QA.jsonl (an existing file), got {qa}")
    settings = env_spec.observations()
    check_env_settings(out, read_appended_jsonl(out, "a trajectory record"), settings)
    items = read_items(qa)
    opened = Corpus.open(corpus)
    kg = None
    if distractor_share > 0:  # distractors are pages of the corpus's graph (cached in the corpus)
        from websailor.synth.graph import load_or_build

        kg = load_or_build(opened)
    written, skipped = build_constructive(
        items,
        build_local_tools(opened, **settings),
        out,
        split=split.value if split else "train",
        transform=with_env_settings(transform, settings),
        source=source_name("constructive"),
        distractor_share=distractor_share,
        kg=kg,
        question_query=question_query,
    )
    print(f"{written} constructive trajectories written to {out} ({skipped} already there)")
    print(format_construction_counts(construction_counts(out)))


@traj_app.command("select")
@handle_errors
def traj_select(
    from_: Annotated[Path, typer.Option("--from", help="The pool: a trajectories JSONL (traj build).")],
    out: Annotated[Path, typer.Option(help="The training set to write (JSONL).")],
    n: Annotated[
        int, typer.Option("--n", help="Trajectories to keep (0, or more than the pool holds: all of them).")
    ] = 100,
    lookup_share: Annotated[
        float,
        typer.Option(
            help="Share of lookups, in [0, 1]: trajectories whose search of the question lists the answer (where a "
            "kind runs short, the other fills in, with a warning).",
        ),
    ] = 0.5,
    seed: Annotated[int, typer.Option(help="Seed of the draw.")] = 0,
) -> None:
    """Draw a training set of --n trajectories with --lookup-share lookups from a pool (the
    grounded recipe: 100, half lookups). A rerun with the same pool and arguments writes the
    same file and leaves it; an --out holding another selection is refused."""
    from websailor.train.traj_select import select_trajectories
    from websailor.train.traj_stats import format_stats, trajectory_stats

    c = select_trajectories(from_, out, n, lookup_share, seed)
    print(
        f"{c['kept']} of {c['pool']} trajectories {'written to' if c['written'] else 'already in'} {out}: "
        f"{c['lookups']} lookups (of {c['pool_lookups']}), {c['clue']} following a clue"
    )
    print(format_stats(trajectory_stats(out)))


@traj_app.command("stats")
@handle_errors
def traj_stats(
    path: Annotated[Path, typer.Argument(help="Trajectories JSONL (traj build, run or eval output).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """What a trajectory file teaches: the share of visits whose choice is grounded in what was
    read, the checks and how many reject, trajectories with a rejected candidate, grounded
    answers, and lookups (the question's own search lists the answer's page)."""
    import json

    from websailor.train.traj_stats import format_stats, trajectory_stats

    stats = trajectory_stats(path)
    print(json.dumps(stats, indent=2) if as_json else format_stats(stats))


def with_env_settings(transform: Any, settings: dict[str, int]) -> Any:
    """``transform`` (or nothing), then the observation settings recorded in the trajectory's
    ``env_settings`` (nothing to do for the paper's)."""
    if not settings:
        return transform

    def apply(traj: Any) -> Any:
        traj = transform(traj) if transform else traj
        traj.env_settings = dict(settings)
        return traj

    return apply


def register(app: typer.Typer) -> None:
    app.add_typer(traj_app, name="traj")
