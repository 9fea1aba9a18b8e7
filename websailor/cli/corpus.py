"""``websailor corpus build`` and ``corpus info``: the offline Wikipedia."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from websailor.cli.common import JsonOpt, handle_errors, print_json

corpus_app = typer.Typer(help="Build and inspect corpora (the offline Wikipedia).", no_args_is_help=True)


class Format(str, Enum):
    vital = "vital"
    jsonl = "jsonl"
    wiki18 = "wiki18"
    kilt = "kilt"


class OnDuplicate(str, Enum):
    error = "error"
    first = "first"
    merge = "merge"


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

    c = Corpus.open(corpus, build=False)  # info on what is there: a missing corpus is not built
    info = {"path": str(c.path), **c.meta}
    if as_json:
        print_json(info)
        return
    for key in ("path", "name", "format", "source", "n_docs", "n_passages", "n_links", "built_at", "build_seconds"):
        print(f"{key:>14}: {info.get(key)}")


def register(app: typer.Typer) -> None:
    app.add_typer(corpus_app, name="corpus")
