"""``websailor search``, ``visit``, ``links`` (the offline corpus as a person reads it) and
``tool`` (any tool exactly as the agent calls it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import CorpusOpt, JsonOpt, env_options, fail, handle_errors, print_json


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
        print_json([{"query": q, "results": [h.to_dict() for h in hits]} for q, hits in zip(queries, results)])
    else:
        print(BLOCK_SEPARATOR.join(format_search_results(q, hits) for q, hits in zip(queries, results)))


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
        print_json([v.record for v in views])
    else:
        print(BLOCK_SEPARATOR.join(v.block for v in views))


@handle_errors
@env_options(exclude=("tools",))
def tool(
    name: Annotated[
        str, typer.Argument(help="Tool name: search, visit, PythonInterpreter, parse_file (web also google_scholar).")
    ],
    arguments: Annotated[str, typer.Argument(help="Arguments as a JSON object.")] = "{}",
    env_spec: Any = None,
) -> None:
    """Call a tool exactly as the agent would and print its observation. PythonInterpreter
    runs the code in the sandbox; parse_file reads files under --files-dir (default: the
    current directory). A call whose result is an error (bad arguments, an unknown tool, a
    failed provider) or that the environment degraded prints its observation, then exits 1 with
    the reason on one line of stderr; what the tool answers about the world is not an error
    (exit 0): a page not in the corpus, a dead link on the web, a file parse_file cannot read,
    Python code that raises."""
    from websailor.tools import execute_tool
    from websailor.tools.environment import DEFAULT_TOOLS, EXTRA_TOOLS, open_environment

    if env_spec.kind == "none" and env_spec.tools_url is None:
        fail("--env none has no tools")
    kind = "local" if env_spec.tools_url is not None else env_spec.kind
    known = DEFAULT_TOOLS[kind] + EXTRA_TOOLS[kind]
    if env_spec.tools_url is None and name not in known and name in DEFAULT_TOOLS["web"]:
        fail(f"{name} is a tool of the web environment: add --env web")
    update: dict[str, Any] = {"tools": None if env_spec.tools_url or name not in known else (name,)}
    if env_spec.files_dir is None and env_spec.tools_url is None and name == "parse_file":
        update["files_dir"] = Path.cwd()
    tool_env = open_environment(env_spec.model_copy(update=update))
    try:
        result = execute_tool(tool_env.tools, name, arguments)
    finally:
        tool_env.close()
    why = None
    if result.error is not None:
        why = f"the {_shown(name, 60)} call failed ({_shown(result.error, 300)})"
    elif result.env_failures:
        why = f"the environment degraded the {_shown(name, 60)} call ({_shown(', '.join(result.env_failures), 300)})"
    try:
        print(result.observation)
    except BrokenPipeError:  # a closed pipe (`| head`) does not turn a failed call into a success
        if why is None:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if why is not None:
        print(f"error: {why}; its observation is on stdout", file=sys.stderr)
        raise typer.Exit(1)


def _shown(text: str, limit: int) -> str:
    """``text`` on one short line for stderr: whitespace collapsed, control characters (terminal
    escape codes among them) dropped, cut at ``limit`` characters."""
    from websailor.text import normalize_space, truncate

    return truncate("".join(c for c in normalize_space(str(text)) if c.isprintable()), limit)


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
        fail(f"no page {page!r} in {c.path}; closest: {', '.join(c.closest_titles(page)) or 'none'}")
    mentions = c.backlinks(page) if incoming else c.links(page)
    if as_json:
        print_json([m.__dict__ for m in mentions])
        return
    print(f"{len(mentions)} {'incoming' if incoming else 'outgoing'} links of {doc.title}")
    for m in mentions:
        other = m.source if incoming else m.target
        print(f"- {other} ({m.surface!r}): {m.sentence}")


def register(app: typer.Typer) -> None:
    app.command()(search)
    app.command()(visit)
    app.command()(tool)
    app.command()(links)
