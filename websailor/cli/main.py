"""The root ``websailor`` app: logging, SIGTERM and SIGHUP as Ctrl-C, and the command groups in the order
``--help`` lists them."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from websailor.cli import compare, corpus, evaluate, run, serve, synth, tools, train, traj, view
from websailor.errors import EXIT_SERVICE_DOWN
from websailor.log import setup_logging
from websailor.signals import interrupt_on_termination

EXIT_CODES = """Exit status: 0 done; 1 an unexpected error (a bug: the traceback is printed); 2 bad input or
settings, one line, before any work; 3 the work ran but gave no usable result (eval and score: no
rollout could be graded; run: a rollout ended in a model error); 4 a service went down during the
run (the model server, the judge or the tool server, after --service-failures failed requests in
a row spanning at least 10 s): one line names it, what finished is kept, rerunning the same command resumes; 130
interrupted (Ctrl-C, SIGTERM): what finished is kept, rerunning resumes."""

app = typer.Typer(
    help="WebSailor-V2 deep-research agents: corpus, tools, agent, synthesis, training, evaluation.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    setup_logging(verbose)
    interrupt_on_termination()  # a served model's server stops, temporary build directories go


for module in (corpus, tools, run, synth, evaluate, compare, traj, serve, train, view):
    module.register(app)


def main() -> None:
    """The ``websailor`` command (the console script and ``python -m websailor``): :data:`app`,
    except that a run stopped by a service declared down exits at once, without waiting for
    calls in flight to that service (a hanging one would hold the exit for a whole timeout):
    what finished is already on disk."""
    try:
        app()
    except SystemExit as e:
        if e.code == EXIT_SERVICE_DOWN:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_SERVICE_DOWN)
        raise
