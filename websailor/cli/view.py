"""``websailor view``: the local web app over run files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from websailor.cli.common import fail, handle_errors, logger


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
    synthesized items (docs/viewer.md); prints the URL."""
    import uvicorn

    from websailor.server.app import bind_socket
    from websailor.view import create_view_app

    if not path.exists():
        fail(f"{path} does not exist")
    if export is not None:
        from websailor.view.export import export_site

        written = export_site(path, export)
        print(f"{written} pages written to {export}; open {export / 'index.html'}")
        return
    app = create_view_app(path)
    sock = bind_socket(host, port)
    bound = sock.getsockname()[1]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{bound}/"
    if host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning(
            "serving on %s: anyone who can reach this address can read the runs under %s", host, path.resolve()
        )
    print(f"websailor view: {url} (Ctrl-C to stop)", flush=True)
    if not no_browser:
        import webbrowser

        try:
            webbrowser.open(url)
        except webbrowser.Error:
            pass
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=bound, log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def register(app: typer.Typer) -> None:
    app.command()(view)
