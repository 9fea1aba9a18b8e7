"""``websailor compare``: two evaluations of the same questions side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from websailor.cli.common import JsonOpt, fail, handle_errors, print_json


@handle_errors
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first `websailor eval` output directory (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="The second one (the model expected to be better).")],
    name: Annotated[
        Optional[list[str]], typer.Option("--name", help="Labels of the two runs (give it twice; default: the paths).")
    ] = None,
    out: Annotated[Optional[Path], typer.Option(help="Also write the table to this Markdown file.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare two evaluations of the same questions: format validity, Avg@k with intervals,
    Pass@k, tool calls and terminations of each on the questions both graded, the paired
    difference in Avg@k with its bootstrap interval, and which questions flipped."""
    from websailor.eval.compare import check_same_questions, compare_runs, load_scores, to_dict, to_markdown

    if name is not None and len(name) != 2:
        fail(f"--name takes two labels, one per run; got {len(name)}")
    labels = (name[0], name[1]) if name else (str(run_a), str(run_b))
    if labels[0] == labels[1] or not all(x.strip() for x in labels):
        fail(f"--name: give two different, non-empty labels, got {labels[0]!r} and {labels[1]!r}")
    if out is not None:
        for run in (run_a, run_b):
            if run.is_dir() and out.resolve().is_relative_to(run.resolve()):
                fail(
                    f"--out {out} is inside the run directory {run}: write the table elsewhere (it would replace a file "
                    "of the run)"
                )
    check_same_questions(run_a, run_b)
    c = compare_runs(load_scores(run_a), load_scores(run_b), labels)
    text = to_markdown(c)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    if as_json:
        print_json(to_dict(c))
    else:
        print(text, end="")


def register(app: typer.Typer) -> None:
    app.command()(compare)
