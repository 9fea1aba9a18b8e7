"""The viewer's FastAPI app: the runs index (``GET /``, and ``GET /api/runs`` as JSON), shared
page chrome and error pages; each kind of run has its views in its own module
(:mod:`websailor.view.eval_views`, :mod:`websailor.view.rl_views`, :mod:`websailor.view.sft_views`,
:mod:`websailor.view.synth_views`).

URLs (:func:`websailor.view.context.run_url`): a run's page is ``/KIND/PATH`` (``/KIND`` for the viewed path itself),
PATH being all of the URL path after the kind; a question, step, rollout or item of the run is
a query parameter (``?question=``, ``?step=``, ``?step=&group=&rollout=``, ``?item=``), so no
run path or id can be read as another. A query value a view cannot use gets the error page
naming the parameter (:mod:`websailor.view.context`; JSON under ``/api/``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.view import eval_views, rl_views, sft_views, synth_views
from websailor.view.context import (
    HEADLINE_MAX_BYTES,
    HERE,
    ViewContext,
    environment,
    finite,
    human_size,
    relative,
    run_url,
)
from websailor.view.discover import RunEntry, find_runs, not_a_run
from websailor.view.report_views import report_headline


def _validation_message(exc: RequestValidationError) -> str:
    """``page=abc in the address: input should be a valid integer ...``, one sentence per error."""
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x not in ("query", "path")]
        name = ".".join(loc) or "the address"
        given = err.get("input")
        shown = f"{name}={given}" if isinstance(given, str) else f"{name} (missing)" if given is None else name
        msg = str(err.get("msg", "not valid"))
        parts.append(f"{shown} in the address: {msg[:1].lower() + msg[1:]}.")
    return " ".join(parts) or "The address has a parameter the page cannot use."


def headline(ctx: ViewContext, run: RunEntry) -> dict[str, Any]:
    """The index's figures of one run: for ``eval`` its summary (model, environment, Avg@k with
    its interval, Pass@k, format validity), for ``rl`` its last step and reward; ``error``
    (naming the file, relative to the root, and the line) when a file cannot be read, so the
    index keeps listing the others. Only ``summary.json`` and ``rl_log.jsonl`` are read, and
    neither when it is larger than :data:`HEADLINE_MAX_BYTES`: the index never reads a whole
    large file."""
    path = ctx.path(run.rel)
    prefix = run.rel + "/" if run.rel != "." else ""
    try:
        if run.kind == "eval":
            return _eval_headline(path / "summary.json", prefix + "summary.json")
        if run.kind == "rl":
            from websailor.train.rl_log import LOG_FILE, read_step_log

            log_path = path / LOG_FILE
            if not log_path.is_file():
                return {"steps": 0, "reward": None, "accuracy": None}
            if log_path.stat().st_size > HEADLINE_MAX_BYTES:
                return {"error": f"{prefix}{LOG_FILE}: {human_size(log_path.stat().st_size)}, too large for the index"}
            log = read_step_log(log_path).records  # an unfinished last line is left out
            last = log[-1] if log else {}
            reward = last.get("reward/mean")
            return {
                "steps": len(log),
                "reward": reward if isinstance(reward, (int, float)) else None,
                "accuracy": last.get("reward/accuracy"),
            }
    except (InputFormatError, OSError, ValueError) as e:
        return {"error": relative(str(e), ctx.root)[:300]}
    return {}


class HostCheck:
    """ASGI middleware refusing (HTTP 400) a request whose ``Host`` header names a host not in
    ``hosts`` (``websailor view`` on loopback: a page elsewhere cannot read the runs by rebinding
    its own name to 127.0.0.1). IPv6 literals (``[::1]:8765``) are parsed as such."""

    def __init__(self, app: Any, hosts: list[str]) -> None:
        self.app = app
        self.hosts = {h.strip("[]").lower() for h in hosts}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            header = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            try:
                name = urlsplit("//" + header).hostname or ""
            except ValueError:
                name = ""
            if name.lower() not in self.hosts:
                await PlainTextResponse("Invalid host header", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _eval_headline(summary: Path, name: str) -> dict[str, Any]:
    if not summary.is_file():
        return {"note": "running: no summary yet"}
    size = summary.stat().st_size
    if size > HEADLINE_MAX_BYTES:
        return {"error": f"{name}: {human_size(size)}, too large for a summary"}
    try:
        s = json.loads(summary.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as e:
        return {"error": f"{name} is not JSON ({e})"}

    def names(v: Any) -> str:
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v or "")

    if isinstance(s, dict) and s.get("task") == "report":
        return {"model": names(s.get("model")), "env": names(s.get("env")), "note": report_headline(s)}
    if not isinstance(s, dict) or not isinstance(s.get("k"), int) or isinstance(s.get("k"), bool):
        return {"error": f"{name} is not an eval summary (no integer 'k')"}

    def number(key: str) -> float | None:
        v = s.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    ci = s.get("avg_at_k_ci95")
    ok_ci = isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)
    return {
        "model": names(s.get("model")),
        "env": names(s.get("env")),
        "avg_at_k": number("avg_at_k"),
        "ci": ci if ok_ci else None,
        "pass_at_k": number("pass_at_k"),
        "k": s["k"],
        "format_validity": number("format_validity"),
    }


def create_view_app(root: str | Path, allowed_hosts: list[str] | None = None) -> FastAPI:
    """The viewer over ``root`` (a folder of runs, or one run's folder or file). With
    ``allowed_hosts`` (``websailor view`` on loopback: ``127.0.0.1``, ``localhost``, ``::1``), a
    request whose ``Host`` header names another host is refused (HTTP 400), so that a web page
    the user visits cannot read the runs by rebinding its own name to 127.0.0.1.

    Raises:
        InvalidArgumentError: ``root`` does not exist.
    """
    root = Path(root)
    if not root.exists():
        raise InvalidArgumentError(f"{root} does not exist")
    app = FastAPI(title="websailor view", docs_url=None, redoc_url=None, openapi_url=None)
    if allowed_hosts is not None:  # a page elsewhere cannot read the runs through DNS rebinding
        app.add_middleware(HostCheck, hosts=list(allowed_hosts))
    ctx = ViewContext(root, environment())
    app.state.view = ctx
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    def api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    @app.exception_handler(InvalidArgumentError)
    async def refused(request: Request, exc: InvalidArgumentError) -> Response:
        if api(request):
            return JSONResponse({"error": relative(str(exc), root)}, status_code=404)
        return ctx.page("error.html", title="Not here", message=relative(str(exc), root), status_code=404)

    @app.exception_handler(Exception)
    async def broken(request: Request, exc: Exception) -> Response:  # a bug, or a file shaped as no reader expects
        what = relative(f"{type(exc).__name__}: {exc}", root)[:500]
        if api(request):
            return JSONResponse({"error": what}, status_code=500)
        message = f"This page cannot be shown ({what}). The other pages still work; please report it with the file that caused it."
        return ctx.page("error.html", title="This page broke", message=message, status_code=500)

    @app.exception_handler(RequestValidationError)
    async def refused_query(request: Request, exc: RequestValidationError) -> Response:  # ?page=abc, ?step=x
        if request.url.path.startswith("/api/"):
            return await request_validation_exception_handler(request, exc)
        return ctx.page("error.html", title="A bad address", message=_validation_message(exc), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        message = (
            f"No page at {request.url.path}: the runs are listed on the first page."
            if exc.status_code == 404
            else str(exc.detail)
        )
        return ctx.page("error.html", title="Not here", message=message, status_code=exc.status_code)

    @app.exception_handler(OSError)
    async def unopenable(request: Request, exc: OSError) -> Response:  # unreadable, a link loop, ...
        what = f"{exc.strerror or type(exc).__name__}" + (f": {Path(exc.filename).name}" if exc.filename else "")
        return ctx.page("error.html", title="A file cannot be opened", message=what, status_code=404)

    @app.exception_handler(InputFormatError)
    async def unreadable(request: Request, exc: InputFormatError) -> Response:
        message = relative(str(exc), root)
        if api(request):
            return JSONResponse({"error": message}, status_code=422)
        return ctx.page("error.html", title="A file cannot be read", message=message, status_code=422)

    def runs() -> list[dict[str, Any]]:
        env = ctx.templates
        return [
            {
                **vars(r),
                "url": run_url(r.kind, r.rel),
                "figures": finite(headline(ctx, r)),
                "modified": env.filters["when"](r.mtime),
                "size": env.filters["size"](r.bytes),
            }
            for r in find_runs(root)
        ]

    @app.get("/", response_class=HTMLResponse)
    def index() -> Response:
        found = runs()
        notice = not_a_run(root) if root.is_file() and not found else None
        return ctx.page("index.html", title="Runs", runs=found, notice=notice)

    @app.get("/api/runs")
    def api_runs() -> Response:
        return JSONResponse(finite(runs()))

    for module in (eval_views, rl_views, sft_views, synth_views):
        app.include_router(module.router)
    return app
