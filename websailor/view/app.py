"""The viewer's FastAPI app: the runs index (``GET /``, and ``GET /api/runs`` as JSON), shared
page chrome and error pages; each kind of run has its views in its own module
(:mod:`websailor.view.eval_views`, :mod:`websailor.view.rl_views`,
:mod:`websailor.view.synth_views`).

URLs (:func:`run_url`): a run's page is ``/KIND/PATH`` (``/KIND`` for the viewed path itself),
PATH being all of the URL path after the kind; a question, step, rollout or item of the run is
a query parameter (``?question=``, ``?step=``, ``?step=&group=&rollout=``, ``?item=``), so no
run path or id can be read as another. A query value a view cannot use gets the error page
naming the parameter (:func:`query_int`, :func:`bad_query`; JSON under ``/api/``)."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from fastapi import FastAPI, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.view.discover import RunEntry, find_runs, not_a_run, resolve

HERE = Path(__file__).parent


@dataclass
class ViewContext:
    """What every view needs: the viewed ``root``, the template environment (autoescaping
    every string) and whether pages wait for whole files (:attr:`whole_files`)."""

    root: Path
    templates: jinja2.Environment
    #: wait for a large file to be read whole before a page shows it (the static export), instead
    #: of showing the part read so far
    whole_files: bool = False

    def path(self, rel: str) -> Path:
        """:func:`~websailor.view.discover.resolve` under :attr:`root`."""
        return resolve(self.root, rel)

    def page(self, name: str, request: Request | None = None, status_code: int = 200, **values: Any) -> HTMLResponse:
        """Render template ``name`` with ``values`` (and ``root``, the viewed folder's name); the
        viewed path's absolute location is left out of the page (:func:`relative`), so an error
        message or a problem list names files as the user sees them under the root."""
        html = self.templates.get_template(name).render(root=self.root.name or str(self.root), **values)
        # a file name that is not UTF-8 (kept by Python as lone surrogates), or a lone surrogate a record holds, shows as U+FFFD
        html = relative(html, self.root).encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        return HTMLResponse(html, status_code=status_code)


def context(request: Request) -> ViewContext:
    """The :class:`ViewContext` of the app serving ``request``."""
    return request.app.state.view


def run_url(kind: str, rel: str, **query: Any) -> str:
    """The URL of a run's page, ``/{kind}/{rel}`` (``/{kind}`` for the root itself), with the
    ``query`` parameters whose value is not ``None``. The run's path is the whole URL path after
    the kind and everything that picks a part of the run (a question, a step, an item, a filter)
    is a query parameter, so no run path, question id or item id can be read as another."""
    url = f"/{kind}" if rel in ("", ".") else f"/{kind}/{quote(rel, safe='/')}"
    kept = {k: v for k, v in query.items() if v is not None}
    return url + (f"?{urlencode(kept)}" if kept else "")


def plural(n: int, word: str) -> str:
    """``1, "step"`` -> ``1 step``; ``2, "step"`` -> ``2 steps``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def query_int(request: Request, name: str, minimum: int | None = None) -> int | None:
    """The whole number in query parameter ``name`` of ``request``; ``None`` when it is absent
    or empty (an empty field of a form).

    Raises:
        RequestValidationError: the value is not a whole number, or is below ``minimum`` (the
            error page names the parameter and its value).
    """
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    if not raw.lstrip("-").isascii() or not raw.lstrip("-").isdigit():  # int() would also take "１" and "1_0"
        raise bad_query(name, raw, "not a whole number")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise bad_query(name, raw, f"must be at least {minimum}")
    return value


def bad_query(name: str, value: str | None, why: str) -> RequestValidationError:
    """The error (to raise) refusing query parameter ``name``, given as ``value`` (``None`` when
    missing), for ``why``: FastAPI's own error, so that it gets the same error page (or JSON
    under ``/api/``) as a parameter FastAPI itself refuses."""
    return RequestValidationError([{"type": "value_error", "loc": ("query", name), "msg": why, "input": value}])


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


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.filters["pct"] = lambda x: "n/a" if x is None else f"{100 * x:.1f}"
    env.filters["size"] = human_size
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else ""
    env.filters["tojson_attr"] = lambda v: json.dumps(v, ensure_ascii=True)
    env.filters["plural"] = plural
    env.globals["run_url"] = run_url
    return env


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by ``None`` (JSON has neither; a
    hand-written summary or step log may hold them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def human_size(n: int) -> str:
    """``1536`` -> ``1.5 KB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


#: Largest file the index reads for a run's figures (a bigger one gets a note, not a read).
HEADLINE_MAX_BYTES = 32 << 20


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


def relative(message: str, root: Path) -> str:
    """``message`` with the viewed path's absolute location left out of the file names in it
    (a page shows ``runs/a/scores.jsonl line 3``, not where the folder lives on this machine).
    Only whole paths are replaced: the location must start a path (not follow a letter, a dot or
    a slash, as inside a URL) and end at a path boundary (``/data`` is not replaced in ``/database``)."""
    real = root.resolve()
    if real == Path(real.anchor):  # viewing "/": every path is already absolute
        return message
    here = re.escape(str(real))
    lead, end = r"(?<![\w./:%-])", r"(?![\w.-])"
    if real.is_file():
        return re.sub(lead + here + end, lambda m: real.name, message)
    message = re.sub(lead + here + "/", "", message)
    return re.sub(lead + here + end, ".", message)


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
        from websailor.view.report_views import report_headline

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
    ctx = ViewContext(root, _environment())
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

    from websailor.view import eval_views, rl_views, synth_views

    for module in (eval_views, rl_views, synth_views):
        app.include_router(module.router)
    return app
