"""``websailor serve tools``: an environment's tools over HTTP for many rollout workers."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from websailor.cli.common import env_options, fail, handle_errors, print_metrics

serve_app = typer.Typer(help="Serve the environment over HTTP.", no_args_is_help=True)


@serve_app.command("tools")
@handle_errors
@env_options(exclude=("tools_url",))
def serve_tools_cmd(
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port, printed at start).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on (default loopback only).")] = "127.0.0.1",
    max_workers: Annotated[int, typer.Option(min=1, help="Tool calls run at once.")] = 32,
    env_spec: Any = None,
) -> None:
    """Expose every tool of an environment over HTTP (FastAPI), so many rollout workers share
    one index and one cache: point run, eval and train rl at it with --tools-url."""
    from websailor.server.app import serve_tools
    from websailor.tools.environment import open_environment

    if env_spec.kind == "none":
        fail("--env none has no tools to serve")
    tool_env = open_environment(env_spec)
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
        tool_env.close()
        print_metrics(tool_env.metrics.summary())


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")
