"""The ``websailor`` command: a thin layer over the library.

Every command maps its options onto library calls; errors raised on purpose
(:class:`websailor.errors.WebsailorError`) are printed as one clear line and exit with 2.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.errors import WebsailorError
from websailor.log import get_logger, setup_logging
from websailor.text import clean_strings

logger = get_logger(__name__)

app = typer.Typer(
    help="WebSailor-V2 deep-research agents: corpus, tools, agent, synthesis, training, evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
corpus_app = typer.Typer(help="Build and inspect corpora (the offline Wikipedia).", no_args_is_help=True)
app.add_typer(corpus_app, name="corpus")


class Format(str, Enum):
    vital = "vital"
    jsonl = "jsonl"
    wiki18 = "wiki18"
    kilt = "kilt"


class Env(str, Enum):
    local = "local"
    web = "web"
    none = "none"


class OnDuplicate(str, Enum):
    error = "error"
    first = "first"
    merge = "merge"


CorpusOpt = Annotated[
    Optional[Path],
    typer.Option("--corpus", help="Corpus directory (default: the embedded corpus in $WEBSAILOR_HOME)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
# agent options shared by run and eval
ModelOpt = Annotated[str, typer.Option(help="smollm2, hf:PATH or openai:MODEL@BASE_URL.")]
MaxCallsOpt = Annotated[int, typer.Option(min=1, help="Model calls per question.")]
MaxTokensOpt = Annotated[int, typer.Option(min=1, help="Completion tokens per model call.")]
TimeoutOpt = Annotated[float, typer.Option(min=1, help="Wall-clock seconds per question.")]
TemperatureOpt = Annotated[float, typer.Option(min=0, help="Sampling temperature.")]
SeedOpt = Annotated[int, typer.Option(help="Sampling seed (with the question id and rollout index).")]
# tool-environment options shared by run, eval, tool, serve tools and train rl
ToolsUrlOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Use the tools of a `websailor serve tools` server at this URL (shared index and cache) instead of --env."
    ),
]
WebConfigOpt = Annotated[
    Optional[Path],
    typer.Option(
        help="YAML/JSON web settings (keys, base URLs, per-tool limits); default $WEBSAILOR_WEB_CONFIG. "
        "Environment variables (SERPER_API_KEY, SEARXNG_BASE_URL, JINA_API_KEY, ...) override it."
    ),
]
ToolsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tools",
        help="Comma-separated tools to offer (default: the environment's; local also has "
        "PythonInterpreter and parse_file on request).",
    ),
]
FilesDirOpt = Annotated[
    Optional[Path],
    typer.Option("--files-dir", help="Folder parse_file may read local files from (with --tools ...,parse_file)."),
]
UnsafePythonOpt = Annotated[
    bool,
    typer.Option(
        "--unsafe-python", help="Run PythonInterpreter without isolation where bubblewrap cannot run (unsafe)."
    ),
]


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(2)


def handle_errors(fn: Callable) -> Callable:
    """Turn websailor's own errors into a one-line message and exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # undecodable command-line bytes arrive as lone surrogates: make them printable
        kwargs = {k: clean_strings(v) for k, v in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except WebsailorError as e:
            _fail(str(e))
        except BrokenPipeError:  # `websailor search ... | head`: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as e:  # permissions, full disk: name the file and the reason
            if e.filename:
                _fail(f"{e.filename}: {e.strerror}")
            _fail(f"{e.strerror or e} (while writing an output file: is the disk full?)" if e.errno == 28 else str(e))
        except KeyboardInterrupt:
            # clean-up (temporary build directories) has run in the finally blocks and every
            # finished trajectory is on disk; exit now rather than wait for calls in flight
            print("interrupted: what finished is saved; rerun the same command to resume", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)

    return wrapper


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2))


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # run the same clean-up as Ctrl-C (temporary build directories)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    setup_logging(verbose)
    signal.signal(signal.SIGTERM, _terminate)


@corpus_app.command("build")
@handle_errors
def corpus_build(
    source: Annotated[
        Optional[Path], typer.Option(help="Input file; default: the embedded vital-articles corpus.")
    ] = None,
    format: Annotated[Format, typer.Option("--format", help="Layout of --source.")] = Format.vital,
    out: Annotated[
        Optional[Path], typer.Option(help="Target directory (default under $WEBSAILOR_HOME/corpora).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild even if a complete corpus exists.")] = False,
    links: Annotated[bool, typer.Option(help="Derive the link graph by entity linking.")] = True,
    on_duplicate: Annotated[
        OnDuplicate, typer.Option(help="Pages sharing a title: error, keep first, or merge.")
    ] = OnDuplicate.error,
) -> None:
    """Build a corpus (store, BM25 index, link graph); reuses a complete one unless --force."""
    from websailor.corpus import CorpusBuildConfig, build_corpus

    cfg = CorpusBuildConfig(
        source=source, format=format.value, out=out, force=force, links=links, on_duplicate=on_duplicate.value
    )
    path = build_corpus(cfg)
    print(path)


@corpus_app.command("info")
@handle_errors
def corpus_info(
    corpus: Annotated[Optional[Path], typer.Argument(help="Corpus directory.")] = None, as_json: JsonOpt = False
) -> None:
    """Show what a corpus holds."""
    from websailor.corpus import Corpus

    c = Corpus.open(corpus)
    info = {"path": str(c.path), **c.meta}
    if as_json:
        _print_json(info)
        return
    for key in ("path", "name", "format", "source", "n_docs", "n_passages", "n_links", "built_at", "build_seconds"):
        print(f"{key:>14}: {info.get(key)}")


@app.command()
@handle_errors
def search(
    queries: Annotated[list[str], typer.Argument(help="One or more queries.")],
    k: Annotated[int, typer.Option("-k", "--top-k", help="Results per query.")] = 10,
    corpus: CorpusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search the corpus (BM25): top k pages per query with URL and snippet."""
    from websailor.corpus import Corpus
    from websailor.corpus.corpus import validate_queries
    from websailor.tools.search import BLOCK_SEPARATOR, format_search_results

    validate_queries(queries, k)  # before the (slower) corpus load
    c = Corpus.open(corpus)
    results = c.search(queries, k=k)
    if as_json:
        _print_json([{"query": q, "results": [h.to_dict() for h in hits]} for q, hits in zip(queries, results)])
    else:
        print(BLOCK_SEPARATOR.join(format_search_results(q, hits) for q, hits in zip(queries, results)))


@app.command()
@handle_errors
def visit(
    urls: Annotated[list[str], typer.Argument(help="Wikipedia URLs or titles.")],
    goal: Annotated[
        Optional[str], typer.Option(help="What to look for: relevant passages first, then a summary.")
    ] = None,
    corpus: CorpusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print pages; with --goal, what the agent's visit tool returns: the passages most relevant
    to the goal first, then a short summary."""
    from websailor.corpus import Corpus
    from websailor.tools.local import VisitTool
    from websailor.tools.search import BLOCK_SEPARATOR

    tool = VisitTool(Corpus.open(corpus))
    views = [tool.view(url, goal) for url in urls]
    if as_json:
        _print_json([v.record for v in views])
    else:
        print(BLOCK_SEPARATOR.join(v.block for v in views))


@app.command()
@handle_errors
def tool(
    name: Annotated[
        str, typer.Argument(help="Tool name: search, visit, PythonInterpreter, parse_file (web also google_scholar).")
    ],
    arguments: Annotated[str, typer.Argument(help="Arguments as a JSON object.")] = "{}",
    env: Annotated[Env, typer.Option(help="local (offline Wikipedia) or web.")] = Env.local,
    corpus: CorpusOpt = None,
    tools_url: ToolsUrlOpt = None,
    web_config: WebConfigOpt = None,
    unsafe_python: UnsafePythonOpt = False,
) -> None:
    """Call a tool exactly as the agent would and print its observation. PythonInterpreter
    runs the code in the sandbox; parse_file reads files under the current directory."""
    from websailor.tools import call_tool
    from websailor.tools.environment import DEFAULT_TOOLS, EXTRA_TOOLS

    if env == Env.none:
        _fail("--env none has no tools")
    known = DEFAULT_TOOLS[env.value] + EXTRA_TOOLS[env.value]
    if not tools_url and name not in known and name in DEFAULT_TOOLS["web"]:
        _fail(f"{name} is a tool of the web environment: add --env web")
    wanted = None if tools_url or name not in known else name
    tool_env = _open_tools(
        env,
        corpus,
        tools_url=tools_url,
        web_config=web_config,
        tools=wanted,
        unsafe_python=unsafe_python,
        files_root=Path.cwd(),
    )
    try:
        print(call_tool(tool_env.tools, name, arguments))
    finally:
        tool_env.close()


@app.command()
@handle_errors
def links(
    page: Annotated[str, typer.Argument(help="Wikipedia URL or title.")],
    incoming: Annotated[bool, typer.Option(help="Show links that point to the page instead.")] = False,
    corpus: CorpusOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a page's links in the link graph, each with its evidence sentence."""
    from websailor.corpus import Corpus

    c = Corpus.open(corpus)
    doc = c.get(page)
    if doc is None:
        _fail(f"no page {page!r} in {c.path}; closest: {', '.join(c.closest_titles(page)) or 'none'}")
    mentions = c.backlinks(page) if incoming else c.links(page)
    if as_json:
        _print_json([m.__dict__ for m in mentions])
        return
    print(f"{len(mentions)} {'incoming' if incoming else 'outgoing'} links of {doc.title}")
    for m in mentions:
        other = m.source if incoming else m.target
        print(f"- {other} ({m.surface!r}): {m.sentence}")


class Split(str, Enum):
    train = "train"
    test = "test"
    all = "all"


def _tool_names(tools: Optional[str]) -> Optional[list[str]]:
    if tools is None:
        return None
    names = [n.strip() for n in tools.split(",") if n.strip()]
    if not names:
        _fail("--tools is empty: give comma-separated tool names")
    return names


def _open_tools(
    env: Env,
    corpus: Optional[Path] = None,
    summary_model: Any = None,
    tools_url: Optional[str] = None,
    web_config: Optional[Path] = None,
    tools: Optional[str] = None,
    unsafe_python: bool = False,
    files_root: Optional[Path] = None,
) -> Any:
    """The run's :class:`~websailor.tools.environment.ToolEnvironment` (local, web, none or a tool server)."""
    from websailor.tools.environment import open_environment

    if web_config is not None and (env != Env.web or tools_url):
        logger.warning(
            "--web-config is ignored: it configures --env web%s", " (the tool server has its own)" if tools_url else ""
        )
    if tools_url and env != Env.local:
        logger.warning("--env %s is ignored: the tools are the tool server's at %s", env.value, tools_url)
    return open_environment(
        env.value,
        corpus=corpus,
        summary_model=summary_model,
        web_config=web_config,
        tools_url=tools_url,
        tools=_tool_names(tools),
        files_root=files_root,
        allow_unsafe_python=unsafe_python,
    )


def _build_agent(
    model: str,
    env: Env,
    corpus: Optional[Path],
    max_calls: int = 100,
    max_tokens: int = 8192,
    timeout: float = 9000,
    temperature: float = 0.85,
    seed: int = 0,
    summary_model: Optional[str] = None,
    tools_url: Optional[str] = None,
    web_config: Optional[Path] = None,
    tools: Optional[str] = None,
    unsafe_python: bool = False,
    files_dir: Optional[Path] = None,
) -> Any:
    """An agent and its tool environment: the local tools, the web tools, a tool server's, or
    none (``env none``: the direct-answer baseline). Close the environment when done."""
    from websailor.agent import Agent, AgentConfig
    from websailor.models import SamplingParams, load_model

    if not math.isfinite(temperature) or not math.isfinite(timeout):
        _fail("--temperature and --timeout must be finite numbers")
    extractor = load_model(summary_model) if summary_model else None
    tool_env = _open_tools(env, corpus, extractor, tools_url, web_config, tools, unsafe_python, files_dir)
    cfg = AgentConfig(
        max_calls=max_calls,
        max_tokens_per_turn=max_tokens,
        timeout_s=timeout,
        seed=seed,
        sampling=SamplingParams(temperature=temperature),
    )
    try:
        agent = Agent(load_model(model), tool_env.tools, cfg, env=tool_env.name)
    except BaseException:
        tool_env.close()
        raise
    return agent, tool_env


def _finish_tools(tool_env: Any, metrics_file: Optional[Path]) -> None:
    """Close the tool environment; print its metrics table and append them to ``metrics_file``."""
    from rich.console import Console

    from websailor.tools.metrics import metrics_table

    tool_env.close()
    summary = tool_env.record_metrics(metrics_file) if metrics_file is not None else tool_env.metrics.summary()
    if not summary:
        return
    console = Console(stderr=True)
    if not console.is_terminal:  # a log file: no 80-column wrapping of the table
        console = Console(stderr=True, width=200)
    console.print(metrics_table(summary))


def _print_step(turn: int, action: Any, result: Any) -> None:
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


@app.command()
@handle_errors
def run(
    question: Annotated[Optional[str], typer.Argument(help="One question (or use --questions).")] = None,
    questions: Annotated[Optional[Path], typer.Option(help="JSONL with question, optional answer and id.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Trajectories JSONL (appended; resumes).")] = None,
    rollouts: Annotated[int, typer.Option(min=1, help="Rollouts per question.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts.")] = 4,
    max_calls: MaxCallsOpt = 100,
    max_tokens: MaxTokensOpt = 8192,
    timeout: TimeoutOpt = 9000,
    temperature: TemperatureOpt = 0.85,
    seed: SeedOpt = 0,
    model: ModelOpt = "smollm2",
    summary_model: Annotated[Optional[str], typer.Option(help="Model for the LLM page extractor of visit.")] = None,
    env: Annotated[
        Env, typer.Option(help="Environment (local: offline Wikipedia; web: real search and pages; none: no tools).")
    ] = Env.local,
    corpus: CorpusOpt = None,
    tools_url: ToolsUrlOpt = None,
    web_config: WebConfigOpt = None,
    tools: ToolsOpt = None,
    files_dir: FilesDirOpt = None,
    unsafe_python: UnsafePythonOpt = False,
) -> None:
    """Run the ReAct agent on one question (steps shown live) or on a questions file. Tool
    metrics are printed at the end and appended to OUT.tool_metrics.jsonl."""
    from websailor.agent.runner import done_rollouts
    from websailor.questions import load_questions, resolve_split

    if (question is None) == (questions is None):
        _fail("give either a QUESTION or --questions FILE")
    if question is not None and not question.strip():
        _fail("the question is empty")
    if questions is not None and out is None:
        _fail("--questions needs --out TRAJ.jsonl")
    if not math.isfinite(temperature) or not math.isfinite(timeout):
        _fail("--temperature and --timeout must be finite numbers")
    items = None
    if questions is not None:  # every layout eval reads; all items of a synth file
        items = load_questions(questions, resolve_split(questions, None, "all"), require_answer=False)
    if out is not None:  # check the output before spending any model time
        out.parent.mkdir(parents=True, exist_ok=True)
        done_rollouts(out)
    agent, tool_env = _build_agent(
        model,
        env,
        corpus,
        max_calls,
        max_tokens,
        timeout,
        temperature,
        seed,
        summary_model,
        tools_url,
        web_config,
        tools,
        unsafe_python,
        files_dir,
    )
    metrics_file = out.with_name(out.name + ".tool_metrics.jsonl") if out is not None else None
    try:
        _run_agent(agent, question, items, out, rollouts, concurrency)
    finally:
        _finish_tools(tool_env, metrics_file)


def _run_agent(
    agent: Any, question: Optional[str], items: Any, out: Optional[Path], rollouts: int, concurrency: int
) -> None:
    from websailor.agent.runner import append_trajectory, run_questions

    if items is None:
        traj = agent.run(question, id="cli", on_step=_print_step)
        if out is not None:
            append_trajectory(out, traj)
        print(f"\nprediction: {traj.prediction}")
        print(f"termination: {traj.termination}" + (f" ({traj.error})" if traj.error else ""))
        print(
            f"model calls {traj.num_model_calls}, tool calls {traj.num_tool_calls}, "
            f"tokens {traj.tokens['prompt']} prompt / {traj.tokens['completion']} completion, "
            f"time {traj.timings['total_s']:.1f} s (model {traj.timings['model_s']:.1f} s, tools {traj.timings['tools_s']:.2f} s)"
        )
        return
    summary = run_questions(agent, items, out, rollouts=rollouts, concurrency=concurrency)
    terms = ", ".join(f"{k} {v}" for k, v in summary.terminations.most_common()) or "none"
    print(
        f"{summary.finished} trajectories written to {out} ({summary.skipped} already there) in {summary.seconds:.1f} s"
    )
    print(f"terminations: {terms}; tool calls {summary.tool_calls}, model calls {summary.model_calls}")


synth_app = typer.Typer(
    help="SailorFog-QA-V2: synthesize verified, high-uncertainty QA items.", invoke_without_command=True
)
app.add_typer(synth_app, name="synth")


class Keep(str, Enum):
    moderate = "moderate"
    hard = "hard"
    all = "all"


@synth_app.callback()
@handle_errors
def synth(
    ctx: typer.Context,
    n: Annotated[int, typer.Option("--n", min=1, help="Items wanted in --out (resumes up to n).")] = 500,
    out: Annotated[Optional[Path], typer.Option(help="QA items JSONL (appended; resumes).")] = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same items.")] = 0,
    test_fraction: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share of items in the test split.")] = 0.1,
    llm: Annotated[Optional[str], typer.Option(help="Model spec for the optional fluent rewrite.")] = None,
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
    corpus: CorpusOpt = None,
) -> None:
    """Synthesize QA items (the graph is built once and cached in the corpus). With
    --filter-with, the reference agent's rollouts go to OUT's name with .rollouts.jsonl."""
    if ctx.invoked_subcommand is not None:
        return
    from websailor.corpus import Corpus
    from websailor.synth.dataset import SynthConfig, dataset_report, read_items, synthesize
    from websailor.synth.graph import load_or_build

    if out is None:
        _fail("synth needs --out QA.jsonl")
    for name, spec in (("--llm", llm), ("--filter-with", filter_with)):
        if spec is not None and not spec.strip():
            _fail(f"{name} is empty; give a model spec (smollm2, hf:PATH or openai:MODEL@BASE_URL)")
    have = len(read_items(out))  # a wrong --out fails before the graph is built
    if have >= n:
        print(f"{out} already holds {have} items (--n {n}): nothing to do")
        return
    cfg = SynthConfig(n=n, seed=seed, test_fraction=test_fraction)
    from websailor.models import load_model

    c = Corpus.open(corpus)
    rewriter = load_model(llm) if llm else None
    with ExitStack() as stack:
        rater = None
        if filter_with:
            from websailor.agent import Agent, AgentConfig
            from websailor.synth.difficulty import DifficultyConfig, DifficultyFilter
            from websailor.tools.local import build_local_tools

            rollouts = out.with_name(out.stem + ".rollouts.jsonl")
            agent = Agent(load_model(filter_with), build_local_tools(c), AgentConfig(max_calls=max_calls, seed=seed))
            rater = stack.enter_context(
                DifficultyFilter(agent, rollouts, DifficultyConfig(k=k, keep=keep.value, concurrency=concurrency))
            )
            logger.info("difficulty filter: %d rollouts per item, keep %s; rollouts in %s", k, keep.value, rollouts)
        kg = load_or_build(c)
        reasons = synthesize(kg, out, cfg, llm=rewriter, difficulty=rater)
    report = dataset_report(read_items(out))
    print(f"{report['items']} items in {out}; candidates: " + ", ".join(f"{k} {v}" for k, v in reasons.most_common()))
    if report["items"] < n:
        hint = "a larger corpus or another --seed" + (" or a looser --keep" if filter_with else "")
        print(
            f"only {report['items']} of the {n} items asked for: the last candidates were all rejected "
            f"(see the reasons above); {hint} gives more"
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
        _fail(f"{path} does not exist or is not a file")
    items = read_items(path)
    if item_id is not None:
        found = [it for it in items if it["id"] == item_id]
        if not found:
            _fail(f"{path} has no item with id {item_id!r}")
        it = found[0]
    elif index >= len(items):
        _fail(f"{path} has {len(items)} items; --index {index} is out of range")
    else:
        it = items[index]
    print(
        f"id: {it['id']} ({it.get('split')})\nquestion: {it['question']}\nanswer: {it['answer']} <{it['target_url']}>"
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
        _fail(f"{path} does not exist or is not a file")
    report = dataset_report(read_items(path))
    if as_json:
        _print_json(report)
        return
    for key, value in report.items():
        print(f"{key:>24}: {value}")


def _print_summary(summary: dict) -> None:
    from websailor.eval.report import to_markdown

    print(to_markdown(summary), end="")


@app.command("eval")
@handle_errors
def eval_cmd(
    bench: Annotated[
        str, typer.Option(help="Benchmark: a file (layout detected), FORMAT:PATH or a name (fanoutqa-dev).")
    ],
    out: Annotated[Path, typer.Option(help="Output directory (trajectories, scores, report; resumes).")],
    split: Annotated[Optional[Split], typer.Option(help="Split of synthesized QA items (default test).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the first N questions.")] = None,
    model: ModelOpt = "smollm2",
    env: Annotated[
        Env,
        typer.Option(
            help="local: offline Wikipedia tools; web: real search and pages; none: no tools (direct answer)."
        ),
    ] = Env.local,
    rollouts: Annotated[int, typer.Option(min=1, help="k: rollouts per question.")] = 3,
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    concurrency: Annotated[int, typer.Option(min=1, help="Concurrent rollouts.")] = 8,
    max_calls: MaxCallsOpt = 100,
    max_tokens: MaxTokensOpt = 8192,
    timeout: TimeoutOpt = 9000,
    temperature: TemperatureOpt = 0.85,
    seed: SeedOpt = 0,
    corpus: CorpusOpt = None,
    tools_url: ToolsUrlOpt = None,
    web_config: WebConfigOpt = None,
    tools: ToolsOpt = None,
    files_dir: FilesDirOpt = None,
    unsafe_python: UnsafePythonOpt = False,
) -> None:
    """Run the agent k times on a benchmark, grade every rollout and write the report (tool
    metrics go to OUT/tool_metrics.jsonl)."""
    from websailor.agent.runner import done_rollouts
    from websailor.config import websailor_home
    from websailor.eval.harness import EvalConfig, evaluate
    from websailor.judge import load_judge
    from websailor.questions import load_questions

    items = load_questions(bench, split=split.value if split else None, limit=limit)
    out.mkdir(parents=True, exist_ok=True)
    done_rollouts(out / "trajectories.jsonl")  # a wrong --out fails before any model time
    grader = load_judge(judge, cache=websailor_home() / "cache" / "judge.sqlite")
    agent, tool_env = _build_agent(
        model,
        env,
        corpus,
        max_calls,
        max_tokens,
        timeout,
        temperature,
        seed,
        tools_url=tools_url,
        web_config=web_config,
        tools=tools,
        unsafe_python=unsafe_python,
        files_dir=files_dir,
    )
    logger.info("%d questions from %s, k = %d, judge %s", len(items), bench, rollouts, grader.name)
    try:
        summary = evaluate(
            items, agent, grader, out, EvalConfig(rollouts=rollouts, concurrency=concurrency), bench=bench
        )
    finally:
        _finish_tools(tool_env, out / "tool_metrics.jsonl")
    _print_summary(summary)
    print(f"\nwritten to {out}: trajectories.jsonl, scores.jsonl, summary.json, report.md, *.png")


@app.command()
@handle_errors
def score(
    paths: Annotated[list[Path], typer.Argument(help="Trajectory JSONL files (one run, one k).")],
    judge: Annotated[str, typer.Option(help="em, f1[:THRESHOLD] or llm:MODEL_SPEC.")] = "em",
    out: Annotated[
        Optional[Path], typer.Option(help="Also write scores.jsonl, summary.json, report.md, plots here.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Grade existing trajectory files and print the report table."""
    from websailor.config import websailor_home
    from websailor.eval.report import summarize, write_report
    from websailor.eval.scoring import read_trajectories, rollouts_per_question, score_trajectories
    from websailor.judge import load_judge

    records = read_trajectories(paths)
    rollouts_per_question(records)
    for field in ("model", "env"):
        seen = sorted({str(r.get(field)) for r in records})
        if len(seen) > 1:
            logger.warning(
                "these trajectories come from different %ss (%s): the figures pool them", field, ", ".join(seen)
            )
    grader = load_judge(judge, cache=websailor_home() / "cache" / "judge.sqlite")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    scores = score_trajectories(records, grader, out / "scores.jsonl" if out else None, progress=not as_json)
    bench = ", ".join(p.name for p in paths)
    summary = write_report(scores, out, bench) if out else summarize(scores, bench)
    if as_json:
        _print_json(summary)
    else:
        _print_summary(summary)


traj_app = typer.Typer(
    help="Training trajectories for SFT: constructive, expert (rejection sampling) or imported.", no_args_is_help=True
)
app.add_typer(traj_app, name="traj")


class TrajSource(str, Enum):
    constructive = "constructive"
    expert = "expert"
    import_ = "import"


@traj_app.command("build")
@handle_errors
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
    split: Annotated[Split, typer.Option(help="Which items (never train on test).")] = Split.train,
    expert: Annotated[
        Optional[str], typer.Option(help="Expert model for --source expert: openai:MODEL@URL, hf:DIR or smollm2.")
    ] = None,
    k: Annotated[int, typer.Option("--k", min=1, help="Expert rollouts per item.")] = 4,
    judge: Annotated[str, typer.Option(help="Judge of the expert's answers: em, f1[:T] or llm:SPEC.")] = "em",
    max_tokens: Annotated[
        int, typer.Option(min=16, help="Token budget of a kept expert trajectory (student's tokenizer).")
    ] = 32768,
    min_tool_calls: Annotated[int, typer.Option(min=0, help="Fewest tool calls of a kept expert trajectory.")] = 2,
    tokenizer: Annotated[
        str, typer.Option(help="Student model whose tokenizer counts the budget: smollm2 or hf:DIR.")
    ] = "smollm2",
    max_calls: Annotated[int, typer.Option(min=1, help="Expert: model calls per question.")] = 100,
    max_turn_tokens: Annotated[int, typer.Option(min=1, help="Expert: completion tokens per model call.")] = 8192,
    temperature: TemperatureOpt = 0.85,
    seed: SeedOpt = 0,
    concurrency: Annotated[int, typer.Option(min=1, help="Expert rollouts in flight.")] = 4,
    rewrite_thoughts: Annotated[
        Optional[str],
        typer.Option(
            help="Model that rewrites every step's thought concisely "
            "(short-CoT reconstruction): smollm2, hf:DIR or openai:MODEL@URL."
        ),
    ] = None,
    corpus: CorpusOpt = None,
) -> None:
    """Build SFT trajectories."""
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
            _fail("--source import needs --from CHATML.jsonl")
        written, skipped = import_chatml_file(from_, out, transform=transform, source=source_name("imported"))
        print(f"{written} imported trajectories written to {out} ({skipped} already there)")
        return
    if qa is None or not qa.is_file():
        _fail(f"--source {source.value} needs --qa QA.jsonl (an existing file), got {qa}")
    if source == TrajSource.expert:
        from collections import Counter

        from websailor.judge import load_judge
        from websailor.questions import load_questions
        from websailor.train.expert import ExpertFilter, build_expert, side_files
        from websailor.train.sft import load_tokenizer, resolve_model_dir

        if not expert:
            _fail("--source expert needs --expert MODEL (the strong model that answers)")
        items = load_questions(qa, split=split.value)
        student = load_tokenizer(resolve_model_dir(tokenizer))
        agent, tool_env = _build_agent(
            expert,
            Env.local,
            corpus,
            max_calls=max_calls,
            max_tokens=max_turn_tokens,
            temperature=temperature,
            seed=seed,
        )
        counts: Counter = Counter()
        try:
            counts = build_expert(
                items,
                agent,
                load_judge(judge),
                out,
                student,
                k=k,
                flt=ExpertFilter(max_tokens=max_tokens, min_tool_calls=min_tool_calls),
                concurrency=concurrency,
                rewrite=transform,
                counts=counts,
            )
        finally:
            tool_env.close()
            if counts:
                rollouts_file, _ = side_files(out)
                verdicts = ", ".join(
                    f"{v} {counts[v]}"
                    for v in ("kept", "wrong", "no_answer", "few_tool_calls", "too_long", "ungraded", "model_error")
                )
                print(f"{len(items) * k} expert rollouts ({rollouts_file}): {verdicts}")
        print(f"{counts['written']} expert trajectories written to {out}")
        return
    from websailor.corpus import Corpus
    from websailor.synth.dataset import read_items
    from websailor.tools.local import build_local_tools
    from websailor.train.constructive import build_constructive

    items = read_items(qa)
    written, skipped = build_constructive(
        items,
        build_local_tools(Corpus.open(corpus)),
        out,
        split=split.value,
        transform=transform,
        source=source_name("constructive"),
    )
    print(f"{written} constructive trajectories written to {out} ({skipped} already there)")


serve_app = typer.Typer(help="Serve the environment over HTTP.", no_args_is_help=True)
app.add_typer(serve_app, name="serve")


@serve_app.command("tools")
@handle_errors
def serve_tools_cmd(
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port, printed at start).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on (default loopback only).")] = "127.0.0.1",
    env: Annotated[Env, typer.Option(help="local (offline Wikipedia) or web.")] = Env.local,
    corpus: CorpusOpt = None,
    web_config: WebConfigOpt = None,
    summary_model: Annotated[Optional[str], typer.Option(help="Model for the LLM page extractor of visit.")] = None,
    tools: ToolsOpt = None,
    files_dir: FilesDirOpt = None,
    unsafe_python: UnsafePythonOpt = False,
    max_workers: Annotated[int, typer.Option(min=1, help="Tool calls run at once.")] = 32,
) -> None:
    """Expose every tool of an environment over HTTP (FastAPI), so many rollout workers share
    one index and one cache: point run, eval and train rl at it with --tools-url."""
    from websailor.models import load_model
    from websailor.server.app import serve_tools

    if env == Env.none:
        _fail("--env none has no tools to serve")
    extractor = load_model(summary_model) if summary_model else None
    tool_env = _open_tools(
        env, corpus, extractor, web_config=web_config, tools=tools, unsafe_python=unsafe_python, files_root=files_dir
    )
    try:
        serve_tools(
            tool_env.tools,
            tool_env.name,
            host=host,
            port=port,
            metrics=tool_env.metrics.summary,
            max_workers=max_workers,
        )
    except KeyboardInterrupt:
        pass  # a server's normal end
    finally:
        _finish_tools(tool_env, None)


train_app = typer.Typer(
    help="Train models: SFT on trajectories, RL (v2, dupo) in the environment.", no_args_is_help=True
)
app.add_typer(train_app, name="train")


@train_app.command("sft")
@handle_errors
def train_sft_cmd(
    data: Annotated[
        list[Path], typer.Option(help="Trajectories JSONL (websailor traj build); repeat to pool several files.")
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Output directory: the fine-tuned model (use as --model hf:DIR); "
            "rerun the same command to resume from its checkpoints."
        ),
    ],
    model: Annotated[str, typer.Option(help="Model to fine-tune: smollm2 or hf:DIR.")] = "smollm2",
    config: Annotated[
        Optional[Path], typer.Option(help="YAML or JSON file of SFT settings (options below override it).")
    ] = None,
    lora: Annotated[
        Optional[bool], typer.Option("--lora/--full", help="LoRA adapters (merged on save) or all weights.")
    ] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(min=1, help="Optimizer steps (default: --epochs over the data).")
    ] = None,
    epochs: Annotated[Optional[float], typer.Option(min=0.0, help="Passes over the data (default 3).")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", min=0.0, help="Peak learning rate (paper: 5e-6).")] = None,
    warmup_ratio: Annotated[
        Optional[float], typer.Option(min=0.0, max=0.99, help="Share of steps warming up from 0 (default 0.1).")
    ] = None,
    batch_size: Annotated[
        Optional[int], typer.Option(min=1, help="Trajectories per optimizer step (paper: 32).")
    ] = None,
    max_length: Annotated[
        Optional[int],
        typer.Option(min=16, help="Longest trajectory in tokens; longer ones are dropped (default 32768)."),
    ] = None,
    precision: Annotated[Optional[str], typer.Option(help="auto, bf16 or fp32.")] = None,
    save_steps: Annotated[Optional[int], typer.Option(min=1, help="Steps between checkpoints (default 50).")] = None,
    seed: Annotated[Optional[int], typer.Option(min=0, help="Seed of data order and initialization.")] = None,
) -> None:
    """Cold-start SFT with TRL: the loss covers the assistant's tokens only."""
    from websailor.train.sft import load_settings, train_sft

    settings = load_settings(
        config,
        lora=lora,
        max_steps=max_steps,
        epochs=epochs,
        learning_rate=lr,
        batch_size=batch_size,
        max_length=max_length,
        precision=precision,
        seed=seed,
        warmup_ratio=warmup_ratio,
        save_steps=save_steps,
    )
    s = train_sft(data, model, out, settings)
    counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
    print(f"trajectories: {counts}; {s['tokens']['total']} tokens, {s['tokens']['loss']} with loss")
    last = s["loss_history"][-1]["loss"] if s["loss_history"] else float("nan")
    print(
        f"{s['steps']} steps ({s['train_seconds']} s in this run); loss at the last step {last:.4f}, "
        f"mean over this run's steps {s['train_loss']:.4f}"
    )
    print(f"model saved to {out}: use --model hf:{out}")


class Algo(str, Enum):
    v2 = "v2"
    dupo = "dupo"


@train_app.command("rl")
@handle_errors
def train_rl_cmd(
    data: Annotated[Path, typer.Option(help="QA JSONL (websailor synth) or any benchmark file eval reads.")],
    out: Annotated[
        Path,
        typer.Option(
            help="Output directory: the trained model (use as --model hf:DIR), rollouts, "
            "step log; rerun the same command to resume from its checkpoints."
        ),
    ],
    model: Annotated[str, typer.Option(help="Starting model: smollm2 or hf:DIR (usually the SFT model).")] = "smollm2",
    algo: Annotated[Optional[Algo], typer.Option(help="v2 (leave-one-out, 0/1 reward) or dupo (default v2).")] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="YAML or JSON file of RL settings (options below override it).")
    ] = None,
    split: Annotated[
        Optional[str], typer.Option(help="Split of a synth file to train on: train (default), test or all.")
    ] = None,
    group_size: Annotated[Optional[int], typer.Option(help="Rollouts per question (default 8).")] = None,
    batch: Annotated[
        Optional[int], typer.Option(help="Rollouts per optimizer step, whole groups (default 128).")
    ] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Learning rate (paper V2: 1e-6).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(help="Model calls per rollout (default 100).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Tokens per model call (default 8192).")] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(help="Optimizer steps (default: one pass over the questions).")
    ] = None,
    reward: Annotated[Optional[str], typer.Option(help="Judge: em, f1[:T] or llm:MODEL_SPEC (default em).")] = None,
    prefilter: Annotated[
        Optional[int],
        typer.Option(
            help="Rollouts per item of the starting model before training; "
            "keeps items solved sometimes but not always (0: off)."
        ),
    ] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Rollouts run at once (default 8).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of sampling and data order.")] = None,
    corpus: Annotated[
        Optional[Path], typer.Option(help="Corpus directory of the local tools (default: embedded).")
    ] = None,
    env: Annotated[
        Env, typer.Option(help="Environment of the rollouts: local (offline Wikipedia) or web.")
    ] = Env.local,
    tools_url: ToolsUrlOpt = None,
    web_config: WebConfigOpt = None,
    tools: ToolsOpt = None,
) -> None:
    """Agentic RL with TRL's GRPOTrainer: multi-turn rollouts of the agent in the local
    environment (or the real web, or a tool server's), V2's on-policy leave-one-out variant or DUPO."""
    from websailor.train.rl import load_settings, train_rl

    settings = load_settings(
        config,
        algo=algo.value if algo else None,
        group_size=group_size,
        batch_size=batch,
        learning_rate=lr,
        max_calls=max_calls,
        max_tokens_per_turn=max_tokens,
        max_steps=max_steps,
        reward=reward,
        prefilter=prefilter,
        concurrency=concurrency,
        seed=seed,
    )
    if env == Env.none:
        _fail("--env none has no tools to train with; use local or web")
    s = train_rl(
        data,
        model,
        out,
        settings,
        split=split,
        corpus=corpus,
        env=env.value,
        tools_url=tools_url,
        web_config=web_config,
        tools=_tool_names(tools),
    )
    if s.get("prefilter"):
        p = s["prefilter"]
        print(
            f"prefilter: {p['kept']} kept, {p['too_easy']} too easy, {p['too_hard']} too hard, {p['ungraded']} ungraded"
        )
    from websailor.train.rl_log import window_means

    n = min(10, len(s["log"]))
    first, last = window_means(s["log"], "reward/mean", n)
    if first is not None:
        print(
            f"{s['steps']} steps on {s['questions']} questions (training took {s['train_seconds']} s); mean reward "
            f"{first:.3f} over the first {n} steps, {last:.3f} over the last {n}"
        )
    print(f"model saved to {out}: use --model hf:{out}; curves: websailor train plot {out}")


@train_app.command("plot")
@handle_errors
def train_plot_cmd(
    run_dir: Annotated[Path, typer.Argument(help="RL output directory (or its rl_log.jsonl).")],
    png: Annotated[
        Optional[Path], typer.Option("--out", help="Image to write (default RUN_DIR/rl_curves.png).")
    ] = None,
    smooth: Annotated[int, typer.Option(min=1, help="Steps in the moving average.")] = 5,
) -> None:
    """Draw an RL run's curves: reward, accuracy, zero-spread groups, tool calls, response
    length, entropy, clip fraction, seconds per step."""
    from websailor.train.rl_log import plot_log

    print(f"wrote {plot_log(run_dir, png, smooth)}")


if __name__ == "__main__":
    app()
