"""What every viewer page shares: the :class:`ViewContext` (viewed root, templates), run URLs,
query-parameter parsing, a run's folder and JSON files, data for the charts, and the small
formatting helpers. The app (:mod:`websailor.view.app`) and each kind of run's views
(:mod:`websailor.view.eval_views`, :mod:`websailor.view.rl_views`,
:mod:`websailor.view.sft_views`, :mod:`websailor.view.synth_views`) import it; it imports none
of them."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.jsonio import loads_object
from websailor.packed import named_sources
from websailor.view.discover import folder_kind, resolve

HERE = Path(__file__).parent
#: Largest file a page reads for a run's figures (its summary, its step log; a bigger one gets a
#: note, not a read).
HEADLINE_MAX_BYTES = 32 << 20


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


def environment() -> jinja2.Environment:
    """The viewer's template environment: autoescaping, with the ``pct``, ``size``, ``when``,
    ``tojson_attr`` and ``plural`` filters and ``run_url`` as a global."""
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


def relative(message: str, root: Path) -> str:
    """``message`` with the viewed path's absolute location left out of the file names in it
    (a page shows ``runs/a/scores.jsonl line 3``, not where the folder lives on this machine).
    Only whole paths are replaced: the location must start a path (not follow a letter, a dot or
    a slash, as inside a URL) and end at a path boundary (``/data`` is not replaced in ``/database``)."""
    message = named_sources(message)  # a packed run file's copy in the cache: the packed file
    real = root.resolve()
    if real == Path(real.anchor):  # viewing "/": every path is already absolute
        return message
    here = re.escape(str(real))
    lead, end = r"(?<![\w./:%-])", r"(?![\w.-])"
    if real.is_file():
        return re.sub(lead + here + end, lambda m: real.name, message)
    message = re.sub(lead + here + "/", "", message)
    return re.sub(lead + here + end, ".", message)


def script_json(value: Any) -> Markup:
    """``value`` as JSON to put inside ``<script type="application/json">``: ASCII only, with
    ``<``, ``>`` and ``&`` written as ``\\u003c``... so no ``</script>`` or ``<!--`` in the data
    can end the element (``JSON.parse`` reads them back unchanged)."""
    text = json.dumps(finite(value), ensure_ascii=True, allow_nan=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return Markup(text)  # noqa: S704 - every character that HTML would read is escaped above


def number(v: Any) -> float | None:
    """``v`` as a float when it is a number (not a bool), else ``None``."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def run_folder(ctx: ViewContext, rel: str, kind: str = "rl") -> Path:
    """The folder of the ``kind`` run (``rl`` or ``sft``) at ``rel``.

    Raises:
        InvalidArgumentError: not such a run (the 404 page).
    """
    path = ctx.path(rel)
    if not path.is_dir() or folder_kind(path) != kind:
        raise InvalidArgumentError(f"{rel!r} is not {'an RL' if kind == 'rl' else 'an SFT'} run folder")
    return path


def json_file(path: Path) -> dict | None:
    """A run's JSON file (settings, summary), ``None`` when absent.

    Raises:
        InputFormatError: the file is not a JSON object.
    """
    if not path.is_file():
        return None
    try:
        return loads_object(path.read_text(encoding="utf-8-sig"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputFormatError(f"{path}: {e}") from None
