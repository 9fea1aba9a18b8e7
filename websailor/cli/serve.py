"""``websailor serve tools`` (an environment's tools over HTTP for many rollout workers) and
``websailor serve model`` (a vLLM rollout server for a model)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

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


@serve_app.command("model")
@handle_errors
def serve_model_cmd(
    model: Annotated[
        str, typer.Argument(help="smollm2 (the embedded model), hf:DIR or a model directory.")
    ] = "smollm2",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on (default loopback only).")] = "127.0.0.1",
    name: Annotated[str, typer.Option(help="Served model name (the spec is vllm:NAME@URL).")] = "policy",
    max_model_len: Annotated[
        Optional[int], typer.Option(min=256, help="Context length in tokens (default: the model's).")
    ] = None,
    vllm_python: Annotated[
        Optional[Path],
        typer.Option(help="Python with vLLM (default: this one if it has vLLM, else .venv-vllm from make vllm)."),
    ] = None,
    startup_timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the server to answer.")] = 600.0,
    log_file: Annotated[Optional[Path], typer.Option(help="Where the server's output goes.")] = None,
    dtype: Annotated[
        str,
        typer.Option(
            help="bfloat16, float32, or auto: bf16 where this machine computes it faster than fp32 (measured once)."
        ),
    ] = "auto",
) -> None:
    """Start a vLLM OpenAI-compatible server for MODEL (bf16 or fp32, whichever this machine
    computes faster; prefix caching, log-probabilities
    after the temperature, the weight-sync endpoints on) and print the model spec to pass to
    run, eval, traj build, synth --filter-with and train rl --rollout-server. Runs until Ctrl-C."""
    from websailor.models import local_model_dir
    from websailor.models.vllm_launch import VLLMServer

    path = local_model_dir(model) or local_model_dir(f"hf:{model}")
    server = VLLMServer(path, name, port, host, max_model_len, vllm_python, log_file, dtype=dtype)
    server.start()
    try:
        print(
            f"starting vLLM for {path} in {server.dtype} (log: {server.log_path}); first start compiles for a minute or two"
        )
        server.wait_ready(startup_timeout, progress=True)
        print(f"ready after {server.startup_s:.0f} s; model spec:\n{server.spec}", flush=True)
        code = server.proc.wait()
        if code:
            fail(f"the vLLM server exited with code {code}: {server.failure_reason()}")
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or a closed terminal: a server's normal end
        print("stopping the vLLM server (a second Ctrl-C kills it at once)", file=sys.stderr, flush=True)
    finally:
        server.stop()


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")
