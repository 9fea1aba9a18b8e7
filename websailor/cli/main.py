"""The root ``websailor`` app: logging, SIGTERM and SIGHUP as Ctrl-C, and the command groups in the order
``--help`` lists them."""

from __future__ import annotations

from typing import Annotated

import typer

from websailor.cli import compare, corpus, evaluate, run, serve, synth, tools, train, traj, view
from websailor.log import setup_logging
from websailor.signals import interrupt_on_termination

app = typer.Typer(
    help="WebSailor-V2 deep-research agents: corpus, tools, agent, synthesis, training, evaluation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    setup_logging(verbose)
    interrupt_on_termination()  # a served model's server stops, temporary build directories go


for module in (corpus, tools, run, synth, evaluate, compare, traj, serve, train, view):
    module.register(app)
