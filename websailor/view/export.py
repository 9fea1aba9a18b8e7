"""``websailor view PATH --export DIR``: the viewer's pages as static HTML files that open from
``file://`` without a server.

The app is crawled in-process with :class:`fastapi.testclient.TestClient` from ``/``, following
every same-site link (``<a href>``, and the ``href``/``src`` of stylesheets, scripts and images);
each page is written to a file whose name comes from its URL, and its links are rewritten into
relative file paths:

- ``/`` -> ``index.html``; ``/eval/ev`` -> ``eval/ev.html``; ``/eval/ev/`` ->
  ``eval/ev/index.html``;
- a query string is encoded into the file name, deterministically and reversibly:
  ``/eval/ev?question=a`` -> ``eval/ev@question_3Da.html`` (every character other than
  ``A-Z a-z 0-9 . -`` becomes ``_`` and its UTF-8 bytes in hex), so question, step and item
  pages (all in the query string) never share a file;
- a page whose file is already another page's, or is a folder of other pages (or lies under
  another page's file), is written to ``_/<hash of its URL>.html`` instead: a run folder named
  ``ev@question_3Da`` next to a run ``ev``, or runs at ``x`` and ``x.html/y``, keep their own
  pages;
- ``/static/...`` is copied as it is.

Pages carry ``<body data-static="1">`` (the template global ``static_export``): the page
scripts do not poll ``/api/...``, and the forms that need the server (the table filters) are
left out, the "compare with..." form replaced by links to each comparison (which the crawl then
writes, with their questions). A folder that holds an export carries :data:`MARKER`; an export
refuses a folder inside the viewed one (the next crawl would list it) and a non-empty folder
without the marker (it would be overwritten).
"""

from __future__ import annotations

import hashlib
import html
import json
import posixpath
import shutil
from collections import deque
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, unquote, urljoin, urlsplit

from fastapi import FastAPI

from websailor.errors import InvalidArgumentError
from websailor.log import get_logger
from websailor.view.app import create_view_app
from websailor.view.context import HERE

logger = get_logger(__name__)

#: The file that marks a folder as an export (a later export may replace its contents).
MARKER = ".websailor-view-export"
#: Most pages written by default (a folder of many large runs must not fill the disk).
MAX_PAGES = 5000
#: Attributes holding a URL, by tag.
URL_ATTRS = {"a": "href", "link": "href", "script": "src", "img": "src", "area": "href", "image": "href"}
#: Longest file name written (bytes); longer ones keep a prefix and a hash.
MAX_NAME = 200
#: The folder of pages whose own file name is taken (named by a hash of their URL).
CLASH_FOLDER = "_"
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
_HOST = "testserver"


def _encode_query(query: str) -> str:
    """``outcome=wrong&page=2`` -> ``outcome_3Dwrong_26page_3D2`` (injective)."""
    return "".join(c if c in _SAFE else "".join(f"_{b:02X}" for b in c.encode("utf-8")) for c in query)


def _short(name: str) -> str:
    if len(name.encode("utf-8")) <= MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode("utf-8")).hexdigest()[:16]
    return name.encode("utf-8")[:120].decode("utf-8", "ignore") + "~" + digest


def page_file(path: str, query: str = "", is_html: bool = True) -> str:
    """The export's file (relative POSIX path) of the page at URL ``path`` (percent-encoded, as
    in a link) and ``query``.

    Raises:
        InvalidArgumentError: the path leaves the site (``..`` above ``/``).
    """
    raw = unquote(path)
    norm = posixpath.normpath("/" + raw.lstrip("/"))
    if raw.endswith("/") and norm != "/":
        norm += "/"
    if not norm.startswith("/") or "/../" in norm + "/":
        raise InvalidArgumentError(f"{path!r} leaves the site")
    rel = norm.lstrip("/")
    if rel == "" or rel.endswith("/"):
        rel += "index"
    folder, _, name = rel.rpartition("/")
    if query:
        name += "@" + _encode_query(query)
    name = _short(name) + (".html" if is_html else "")  # a long name keeps its suffix: browsers go by it
    return f"{folder}/{name}" if folder else name


class _Links(HTMLParser):
    """The start tags of a page that carry a URL: ``(offset, tag text, tag, attrs)``."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self._lines = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self._lines.append(i + 1)
        self.tags: list[tuple[int, str, str, list[tuple[str, str | None]]]] = []

    def _record(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        key = URL_ATTRS.get(tag)
        if key and any(k == key and v for k, v in attrs):
            line, col = self.getpos()
            self.tags.append((self._lines[line - 1] + col, self.get_starttag_text() or "", tag, attrs))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record(tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._record(tag, attrs)


def _same_site(url: str) -> tuple[str, str, str] | None:
    """``(path, query, fragment)`` of an absolute URL on the crawled site, else ``None``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "") or parts.netloc not in (_HOST, ""):
        return None
    return parts.path or "/", parts.query, parts.fragment


def _tag(tag: str, attrs: list[tuple[str, str | None]], closed: bool) -> str:
    out = [tag] + [k if v is None else f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs]
    return "<" + " ".join(out) + (" />" if closed else ">")


class _Site:
    def __init__(self, app: FastAPI, max_pages: int) -> None:
        from fastapi.testclient import TestClient

        # a page that breaks is written as its error page (HTTP 500), never stops the export
        self.client = TestClient(app, base_url=f"http://{_HOST}", raise_server_exceptions=False)
        self.max_pages = max_pages
        self.files: dict[tuple[str, str], str] = {}  # (path, query) -> file
        self.taken: set[str] = {MARKER}  # files written (or to be)
        self.folders: set[str] = {"static", CLASH_FOLDER}  # folders they are in
        self.queue: deque[tuple[str, str]] = deque()
        self.pages = 0
        self.cut = 0
        self.failed: list[str] = []

    def _claim(self, key: tuple[str, str], file: str) -> str:
        """``file`` for the page ``key``, or a file of :data:`CLASH_FOLDER` when ``file`` is
        another page's, a folder of others, or under another page's file: no two URLs share a
        file."""
        parents = [posixpath.dirname(file)]
        while parents[-1]:
            parents.append(posixpath.dirname(parents[-1]))
        if file in self.taken or file in self.folders or any(p in self.taken for p in parents):
            url = key[0] + (f"?{key[1]}" if key[1] else "")
            suffix = posixpath.splitext(file)[1]  # .html for a page; a static file keeps its own
            file = f"{CLASH_FOLDER}/{hashlib.sha1(url.encode('utf-8')).hexdigest()}{suffix}"
            parents = [CLASH_FOLDER, ""]
        self.taken.add(file)
        self.folders.update(p for p in parents if p)
        return file

    def target(self, path: str, query: str) -> str:
        """The file of a linked page, queueing the page when it is new."""
        key = (path, query)
        if key not in self.files:
            if path.startswith("/static/"):
                self.files[key] = self._claim(key, page_file(path, query, is_html=False))
            else:
                self.files[key] = self._claim(key, page_file(path, query))
                if self.pages < self.max_pages:
                    self.pages += 1
                    self.queue.append(key)
                else:
                    self.cut += 1
        return self.files[key]

    def rewrite(self, text: str, url: str, own_file: str) -> str:
        """``text`` with every same-site URL made a relative file path from ``own_file``."""
        parser = _Links(text)
        parser.feed(text)
        parser.close()
        here = posixpath.dirname(own_file) or "."
        out, last = [], 0
        for offset, original, tag, attrs in parser.tags:
            if text[offset : offset + len(original)] != original:
                continue  # not where the parser said: leave the tag alone
            key = URL_ATTRS[tag]
            new_attrs = []
            for k, v in attrs:
                if k == key and v:
                    v = self._link(v, url, here)
                new_attrs.append((k, v))
            out += [text[last:offset], _tag(tag, new_attrs, original.rstrip().endswith("/>"))]
            last = offset + len(original)
        out.append(text[last:])
        return "".join(out)

    def _link(self, href: str, url: str, here: str) -> str:
        if href.startswith("#"):
            return href
        where = _same_site(urljoin(url, href))
        if where is None:
            return href
        path, query, fragment = where
        try:
            file = self.target(path, query)
        except InvalidArgumentError:
            return href
        rel = posixpath.relpath(file, here)
        return quote(rel, safe="/@~") + (f"#{fragment}" if fragment else "")


def _check_folders(root: Path, out: Path) -> None:
    if out.is_symlink():
        raise InvalidArgumentError(f"--export {out} is a symbolic link: give the folder it points to, or a new one")
    real_root, real_out = root.resolve(), out.resolve()
    folder = real_root if real_root.is_dir() else real_root.parent
    if real_root.is_dir() and (real_out == folder or folder in real_out.parents):
        raise InvalidArgumentError(f"--export {out} is inside the viewed folder {root}: choose a folder outside it")
    if real_out == real_root or real_out in real_root.parents:
        raise InvalidArgumentError(f"--export {out} holds the viewed path {root}: choose another folder")
    if real_out.exists() and not real_out.is_dir():
        raise InvalidArgumentError(f"--export {out} is a file, not a folder")
    if real_out.is_dir() and any(real_out.iterdir()) and not (real_out / MARKER).is_file():
        raise InvalidArgumentError(
            f"--export {out} is not empty and holds no earlier export ({MARKER}): choose an empty or new folder"
        )


def export_site(
    root: str | Path, out_dir: str | Path, *, max_pages: int = MAX_PAGES, app: FastAPI | None = None
) -> int:
    """Write the viewer's pages over ``root`` to ``out_dir`` as static HTML; returns the number
    of pages written (error pages included: a file that cannot be read gets the page that says
    why). An earlier export in ``out_dir`` is replaced. ``app`` replaces the viewer's app (tests).

    Raises:
        InvalidArgumentError: ``root`` does not exist; ``out_dir`` is inside ``root``, holds it, is
            a file or a symbolic link, or is a non-empty folder without :data:`MARKER`.
    """
    root, out = Path(root), Path(out_dir)
    if not root.exists():
        raise InvalidArgumentError(f"{root} does not exist")
    _check_folders(root, out)
    if app is None:
        app = create_view_app(root)
    app.state.view.templates.globals["static_export"] = True
    app.state.view.whole_files = True  # a page of a large file waits for all of it: no partial table is written
    if out.is_dir():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text(
        json.dumps({"root": root.resolve().name}) + "\n", encoding="utf-8"
    )  # no path of this machine
    shutil.copytree(HERE / "static", out / "static")

    site = _Site(app, max_pages)
    site.target("/", "")
    written = 0
    while site.queue:
        path, query = site.queue.popleft()
        file = site.files[(path, query)]
        url = f"http://{_HOST}{path}" + (f"?{query}" if query else "")
        response = site.client.get(url, follow_redirects=True)
        if response.status_code >= 400:
            site.failed.append(f"{path}{'?' + query if query else ''} ({response.status_code})")
        dest = out / file
        dest.parent.mkdir(parents=True, exist_ok=True)
        if response.headers.get("content-type", "").startswith("text/html"):
            dest.write_text(site.rewrite(response.text, str(response.url), file), encoding="utf-8")
        else:
            dest.write_bytes(response.content)
        written += 1
    if site.cut:
        logger.warning("export cut at %d pages: %d linked pages were not written", max_pages, site.cut)
    if site.failed:
        logger.warning("%d pages are error pages: %s", len(site.failed), ", ".join(site.failed[:5]))
    return written
