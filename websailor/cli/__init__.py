"""The ``websailor`` command: a thin layer over the library, one module per command group.

Every command maps its options onto library calls; errors raised on purpose
(:class:`websailor.errors.WebsailorError`) are printed as one clear line and exit with 2
(:mod:`websailor.cli.common`). The commands that run the agent (``run``, ``eval``,
``synth --filter-with``, ``traj build --source expert``, ``train rl``) and ``tool`` and
``serve tools`` take the same environment options, gathered into one
:class:`~websailor.tools.environment.EnvSpec`.
"""

from websailor.cli.main import app

__all__ = ["app"]
