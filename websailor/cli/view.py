"""``websailor view``: the local web app over run files."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from websailor.cli.common import fail, handle_errors


@handle_errors
def view(
    path: Annotated[
        Path, typer.Argument(help="An eval output, an RL or SFT run, a trajectories or QA file, or a folder of them.")
    ],
    host: Annotated[str, typer.Option(help="Address to listen on (default loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port).")] = 8765,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Do not open a browser.")] = False,
    export: Annotated[
        Optional[Path], typer.Option(help="Write the pages as static HTML files to this folder instead of serving.")
    ] = None,
) -> None:
    """Serve a local web app to read trajectories, compare runs, follow RL and inspect
    synthesized items (docs/viewer.md); prints the URL. It listens on 127.0.0.1 only unless
    --host says otherwise."""
    if not path.exists():
        fail(f"{path} does not exist")
    if not path.is_file() and not path.is_dir():
        fail(f"{path} is neither a file nor a folder (a device or a named pipe?): give a run or a folder of runs")
    if path.is_file():
        from websailor.view.discover import not_a_run

        if why := not_a_run(path):
            fail(why)
    if export is not None:
        from websailor.view.export import export_site

        written = export_site(path, export)
        print(f"{written} pages written to {export}; open {export / 'index.html'} in a browser (no server needed)")
        return
    serve(path, host, port, open_browser=not no_browser)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(path: Path, host: str, port: int, open_browser: bool = True) -> None:
    """Bind ``host:port`` (a busy port is a one-line error), print the URL, open a browser when
    asked and one is available, and serve until Ctrl-C."""
    import uvicorn

    from websailor.server.app import bind_socket
    from websailor.view import create_view_app

    # on loopback, only requests that name a loopback host (no DNS rebinding from a page elsewhere)
    hosts = ["127.0.0.1", "localhost", "::1", host.strip("[]")] if is_loopback(host) else None
    app = create_view_app(path, allowed_hosts=hosts)
    sock = bind_socket(host, port)
    sock.listen(128)  # connections made as soon as the URL is printed wait for the server, not fail
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}/"
    if not is_loopback(host):
        print(
            f"WARNING: websailor view is listening on {host}, not on 127.0.0.1: anyone who can reach this "
            f"address can read every run under {path.resolve()} (trajectories, questions, model outputs).",
            file=sys.stderr,
            flush=True,
        )
    print(f"websailor view: {url} (Ctrl-C to stop)", flush=True)
    if open_browser:
        import webbrowser

        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            print(f"no browser found here: open {url} yourself", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=bound, log_level="warning"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on: nothing to resume
        print("websailor view: stopped", flush=True)
    finally:
        sock.close()


def register(app: typer.Typer) -> None:
    app.command()(view)
