"""``websailor synth``, ``synth show`` and ``synth stats``: SailorFog-QA-V2 items."""

from __future__ import annotations

import json
from contextlib import ExitStack
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import (
    Engine,
    EngineOpt,
    JsonOpt,
    env_options,
    fail,
    handle_errors,
    logger,
    print_json,
    warn_unused_env,
)

synth_app = typer.Typer(
    help="SailorFog-QA-V2: synthesize verified, high-uncertainty QA items.", invoke_without_command=True
)


class Keep(str, Enum):
    moderate = "moderate"
    hard = "hard"
    all = "all"


@synth_app.callback()
@handle_errors
@env_options(exclude=("corpus",))
def synth(
    ctx: typer.Context,
    n: Annotated[int, typer.Option("--n", min=1, help="Items wanted in --out (resumes up to n).")] = 500,
    out: Annotated[Optional[Path], typer.Option(help="QA items JSONL (appended; resumes).")] = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same items.")] = 0,
    level: Annotated[
        str,
        typer.Option(
            help="Difficulty: 1 (one-hop lookup) to 4 (multi-hop, obfuscated, cyclic); a range (1-2) or list "
            "(1,2,4) makes a ladder, item j at the j-th level in turn."
        ),
    ] = "4",
    test_fraction: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of items in the test split.")] = 0.1,
    described_share: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of items whose question states the answer's own description first, within the level's "
            "constraint budget (a lookup at any level), so that a search of the question's text lists the answer's page, "
            "as in most questions people write.",
        ),
    ] = 0.0,
    llm: Annotated[
        Optional[str],
        typer.Option(
            help="Model spec of the LLM writer: it writes each question from the item's facts, re-verified before it is kept."
        ),
    ] = None,
    filter_with: Annotated[
        Optional[str],
        typer.Option(help="Model spec of a reference agent: rate each item with --k rollouts and keep --keep ones."),
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Rollouts per item for --filter-with.")] = 8,
    keep: Annotated[
        Keep, typer.Option(help="moderate: 0 < correct < k; hard: none correct; all: record only.")
    ] = Keep.moderate,
    max_calls: Annotated[int, typer.Option(min=1, help="Model calls per rollout of the reference agent.")] = 100,
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts of the reference agent.")] = 8,
    engine: EngineOpt = Engine.auto,
    max_memory_gb: Annotated[
        Optional[float],
        typer.Option(
            min=0.0,
            help="Refuse a knowledge graph whose estimated memory is larger (checked from the corpus's page and "
            "link counts before the graph is built or loaded); default: no limit.",
        ),
    ] = None,
    corpus: Annotated[
        Optional[Path],
        typer.Option(
            help="Corpus to synthesize from, also the local tools' corpus of --filter-with "
            "(default: the embedded corpus in $WEBSAILOR_HOME)."
        ),
    ] = None,
    env_spec: Any = None,
) -> None:
    """Synthesize QA items (the graph is built once and cached in the corpus). With
    --filter-with, a reference agent rates each item in the environment the environment options
    choose (default: local tools over --corpus); its rollouts go to OUT's name with
    .rollouts.jsonl."""
    if ctx.invoked_subcommand is not None:
        return
    from websailor.agent import AgentConfig
    from websailor.corpus import Corpus
    from websailor.synth.dataset import SynthConfig, dataset_report, format_levels, parse_levels, read_items, synthesize
    from websailor.synth.difficulty import DifficultyConfig, open_difficulty_filter, rollouts_file
    from websailor.synth.graph import check_memory, load_or_build
    from websailor.tools.local import build_local_tools

    if out is None:
        fail("synth needs --out QA.jsonl")
    try:
        levels = parse_levels(level)
    except ValueError as e:
        fail(str(e))
    for name, spec in (("--llm", llm), ("--filter-with", filter_with)):
        if spec is not None and not spec.strip():
            fail(f"{name} is empty; give a model spec (smollm2, hf:PATH, openai:MODEL@BASE_URL or vllm:NAME@BASE_URL)")
    if not filter_with:
        unused = env_spec.model_copy(update=dict.fromkeys(env_spec.observations()))  # they set the replay
        warn_unused_env(unused, "--filter-with's reference agent")
    have = len(read_items(out))  # a wrong --out fails before the graph is built
    if have >= n:
        print(f"{out} already holds {have} items (--n {n}): nothing to do")
        return
    from websailor.synth.levels import ItemConfig

    item = ItemConfig(level=levels[0], described_p=described_share)
    cfg = SynthConfig(n=n, seed=seed, test_fraction=test_fraction, levels=levels, item=item)
    from websailor.models import load_model

    c = Corpus.open(corpus)
    # before any model is loaded: a graph too large for the limit is refused with its figure
    check_memory(int(c.meta.get("n_docs", 0)), int(c.meta.get("n_links", 0)), max_memory_gb)
    writer = load_model(llm, check=True) if llm else None  # a dead endpoint fails now, not item by item
    with ExitStack() as stack:
        rater = None
        if filter_with:
            env = env_spec
            if env.kind == "local" and env.tools_url is None:  # the reference agent searches the same corpus
                env = env.model_copy(update={"corpus": corpus})
            difficulty = DifficultyConfig(k=k, keep=keep.value, concurrency=concurrency)
            agent_cfg = AgentConfig(max_calls=max_calls, seed=seed)
            rater = stack.enter_context(
                open_difficulty_filter(
                    out, filter_with, env, difficulty, agent_cfg, engine=engine.value, rollouts=(n - have) * k
                )
            )
            logger.info(
                "difficulty filter: %d rollouts per item, keep %s; rollouts in %s", k, keep.value, rollouts_file(out)
            )
        kg = load_or_build(c, max_memory_gb=max_memory_gb)
        # every candidate's solution path is replayed through the local tools over the same corpus
        # the solution path is replayed with the observation settings given, so that a file made for
        # compact observations holds only items whose searches show the page the next step opens
        replay = build_local_tools(c, **env_spec.observations())
        reasons = synthesize(kg, out, cfg, llm=writer, difficulty=rater, tools=replay)
    report = dataset_report(read_items(out))
    print(f"{report['items']} items in {out}; candidates: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    if report["items"] < n:
        hint = "a larger corpus or another --seed" + (" or a looser --keep" if filter_with else "")
        stuck = cfg.level_of(report["items"])
        made = ", ".join(f"{v} at level {k}" for k, v in report["levels"].items()) if report["items"] else "none"
        print(
            f"only {report['items']} of the {n} items asked for ({made}): the last candidates, for an item at "
            f"level {stuck} (--level {format_levels(cfg.levels)}), were all rejected (see the reasons above); "
            f"{hint} gives more"
        )


@synth_app.command("show")
@handle_errors
def synth_show(
    path: Annotated[Path, typer.Argument(help="QA items JSONL.")],
    index: Annotated[int, typer.Option(min=0, help="Which item by position (0-based).")] = 0,
    item_id: Annotated[Optional[str], typer.Option("--id", help="Which item by id (sf-SEED-N).")] = None,
) -> None:
    """Show one item in full: question, answer, subgraph, operators, constraints, solution path."""
    from websailor.synth.dataset import read_items

    if not path.is_file():
        fail(f"{path} does not exist or is not a file")
    items = read_items(path)
    if item_id is not None:
        found = [it for it in items if it["id"] == item_id]
        if not found:
            fail(f"{path} has no item with id {item_id!r}")
        it = found[0]
    elif index >= len(items):
        fail(f"{path} has {len(items)} items; --index {index} is out of range")
    else:
        it = items[index]
    print(
        f"id: {it['id']} ({it.get('split')}, level {it.get('level', 4)})\nquestion: {it['question']}\nanswer: {it['answer']} <{it['target_url']}>"
    )
    print(
        f"subgraph: {len(it['subgraph']['nodes'])} nodes, {len(it['subgraph']['edges'])} edges, "
        f"cycle: {it['has_cycle']}, topology {it['topology_hash'][:8]}"
    )
    for e in it["subgraph"]["edges"]:
        print(f"  {e['src']} -> {e['dst']}")
    print(
        "uncertainty: "
        + "; ".join(f"{o['op']} {json.dumps(o['params'], ensure_ascii=False)}" for o in it["uncertainty"])
    )
    print("constraints:")
    for c in it["constraints"]:
        print(f"  [{c['kind']}] {c['phrase']}")
    print("solution path:")
    for s in it["procedure"]:
        print(
            f"  {s['action']} "
            + (repr(s["query"]) if s["action"] == "search" else s["url"])
            + (f"  -> {s['evidence'][:140]}" if s.get("evidence") else "")
        )
    print(f"verification: {it['verification']}")


@synth_app.command("stats")
@handle_errors
def synth_stats(path: Annotated[Path, typer.Argument(help="QA items JSONL.")], as_json: JsonOpt = False) -> None:
    """Print the dataset report of a QA file."""
    from websailor.synth.dataset import dataset_report, read_items

    if not path.is_file():
        fail(f"{path} does not exist or is not a file")
    report = dataset_report(read_items(path))
    if as_json:
        print_json(report)
        return
    by_level = report.pop("by_level", {})
    for key, value in report.items():
        print(f"{key:>24}: {value}")
    for lv, figures in by_level.items():
        print(f"level {lv}:")
        for key, value in figures.items():
            print(f"{key:>24}: {value}")


def register(app: typer.Typer) -> None:
    app.add_typer(synth_app, name="synth")
