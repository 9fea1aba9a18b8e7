"""A local HTTP server that imitates the web providers and injects faults, for tests and
benchmarks of the execution layer (loopback only; no real internet is needed).

Routes (``{url}`` is the server's base address):

- ``POST /search``, ``POST /scholar``: Serper (``X-API-KEY`` required, else 403
  ``{"message": "Unauthorized.", "statusCode": 403}``), ``{"organic": [...]}``;
- ``GET /searxng/search?q=...&format=json``: SearXNG, ``{"results": [...], "unresponsive_engines":
  [...]}``; with :attr:`FaultPlan.limiter` on, requests whose headers fail SearXNG's bot
  detection get 429 (:func:`bot_refusal`);
- ``GET /jina/<page url>``: the Jina Reader, markdown after ``Markdown Content:``; a target it
  cannot fetch (not a ``/page/`` URL) gets 200 with ``Warning: Target URL returned error 404:
  Not Found``, as the real reader answers;
- ``GET /page/<name>``: an HTML page (navigation boilerplate around an article);
- ``GET /file/<name>``: bytes registered with :meth:`FaultServer.add_file`;
- ``GET /_served``: requests served so far, by ``route/fault``.

Results echo the request (the query, the page name), so a caller can check that every
answer belongs to its own request.

Faults (:data:`FAULTS`) come from a per-route script (consumed one per request), a per-route
permanent fault, or at random with ``rate`` (drawn from the transient faults by default). The
account faults answer in each service's own shape: ``nocredit`` (Serper: 400 ``"Not enough
credits"``; Jina: 402 ``InsufficientBalanceError``), ``badkey`` (Serper: 403 ``Unauthorized.``;
Jina: 401 ``AuthenticationRequiredError``; a page: 403, a site refusing the reader). The
SearXNG faults: ``noengines`` (200, no results, ``unresponsive_engines`` filled),
``fewengines`` (results, and some engines unresponsive), ``jsonoff`` (403: ``json`` not in
``search.formats``). A fault without a shape for a route answers 500 there.

The server is a small asyncio HTTP/1.1 implementation rather than a framework because several
faults (a body shorter than its ``Content-Length``, a slow drip, a hang) are malformed on
purpose.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

#: Faults a service shows now and then (the random draw's default).
TRANSIENT_FAULTS = ("429", "500", "hang", "drip", "truncated", "badjson", "huge", "latin1", "redirect")
#: Every fault the server can inject: the transient ones, then answers that say the account or
#: the instance cannot serve, and SearXNG's engines failing upstream.
FAULTS = TRANSIENT_FAULTS + ("nocredit", "badkey", "noengines", "fewengines", "jsonoff")
#: SearXNG's ``unresponsive_engines`` in the engine-fault answers (``[engine, reason]`` pairs,
#: reasons as ``searx/webutils.py`` words them).
UNRESPONSIVE = [["bing", "Suspended: CAPTCHA"], ["google", "Suspended: too many requests"]]
#: Route names for scripts and permanent faults.
ROUTES = ("serper", "searxng", "jina", "page", "file")


@dataclass
class FaultPlan:
    """Which requests fail, and how.

    Attributes:
        scripts: per route, faults for its next requests in order (``"ok"`` for none).
        always: per route, a fault injected into every request.
        rate: probability of a random fault from ``kinds`` when no script or permanent fault applies.
        kinds: the random faults (default: :data:`TRANSIENT_FAULTS`).
        limiter: the SearXNG route refuses (429) requests that its bot detection would
            (:func:`bot_refusal`), as an instance with ``server.limiter: true``.
        serper_extras: Serper's fields that only some real hits carry: web hits 2 and 4 get a
            ``date`` and hit 2 a ``source``; scholar hit 3 has a ``pdfUrl`` and no ``link``.
        seed: seed of the random faults.
        retry_after: the ``Retry-After`` header of 429 answers (seconds, as text).
        hang_s: how long a hang holds the connection (seconds).
        drip_interval_s: pause between the bytes of a slow drip (seconds).
        huge_bytes: size of a ``huge`` body (default 50 MB).
    """

    scripts: dict[str, deque] = field(default_factory=dict)
    always: dict[str, str] = field(default_factory=dict)
    rate: float = 0.0
    kinds: tuple[str, ...] = TRANSIENT_FAULTS
    limiter: bool = False
    serper_extras: bool = False
    seed: int = 0
    retry_after: str = "1"
    hang_s: float = 3600.0
    drip_interval_s: float = 0.5
    huge_bytes: int = 50_000_000

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.scripts = {k: deque(v) for k, v in self.scripts.items()}

    def script(self, route: str, *faults: str) -> None:
        """Queue ``faults`` for the next requests of ``route``."""
        self.scripts.setdefault(route, deque()).extend(faults)

    def next_fault(self, route: str) -> str:
        queue = self.scripts.get(route)
        if queue:
            return queue.popleft()
        if route in self.always:
            return self.always[route]
        if self.rate > 0 and self._rng.random() < self.rate:
            return self._rng.choice(self.kinds)
        return "ok"


#: Faults of an account (no credit, a bad key) or of SearXNG's engines: each has a real answer
#: on some routes only (:func:`applies`); elsewhere the request is served as usual.
ACCOUNT_FAULTS = ("nocredit", "badkey", "noengines", "fewengines", "jsonoff")
_APPLIES = {
    "nocredit": ("serper", "jina"),
    "badkey": ("serper", "jina", "page"),
    "noengines": ("searxng",),
    "fewengines": ("searxng",),
    "jsonoff": ("searxng",),
}


def applies(fault: str, route: str) -> bool:
    """Whether ``fault`` has an answer on ``route`` (an account fault on a provider that has
    accounts, an engine fault on SearXNG); every other fault applies everywhere."""
    return route in _APPLIES.get(fault, (route,))


class FaultServer:
    """The provider imitation, in a background thread.

    Use as a context manager (``with FaultServer(plan) as server: server.url``).

    Attributes:
        served: requests by ``(route, fault)``.
        received: the last 200 requests as ``(route, headers, body)`` (headers lower-cased).
        api_key: the key Serper routes require.
    """

    def __init__(
        self, plan: FaultPlan | None = None, api_key: str = "test-key", host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.plan = plan or FaultPlan()
        self.api_key = api_key
        self.host = host
        self.port = port
        self.served: Counter = Counter()
        self.received: deque[tuple[str, dict[str, str], bytes]] = deque(maxlen=200)
        self.files: dict[str, tuple[bytes, str]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add_file(self, name: str, data: bytes, content_type: str) -> str:
        """Serve ``data`` at ``/file/<name>``; returns its URL."""
        self.files[name] = (data, content_type)
        return f"{self.url}/file/{name}"

    def start(self) -> FaultServer:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(
                asyncio.start_server(self._handle, self.host, self.port, limit=2**20)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="fault-server", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP ------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                keep = await self._respond(method, target, headers, body, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    async def _respond(
        self, method: str, target: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        route, status, ctype, payload = self._route(method, target, headers, body)
        if route != "stats":
            with self._lock:
                self.received.append((route, headers, body))
        if route == "searxng" and self.plan.limiter and bot_refusal(headers) is not None:
            with self._lock:
                self.served[(route, "limited")] += 1
            return await self._send(writer, 429, "text/plain", b"Too Many Requests")
        fault = self.plan.next_fault(route) if status == 200 and route != "stats" else "ok"
        if fault in ACCOUNT_FAULTS and not applies(fault, route):
            fault = "ok"  # the route has no such answer (no credit on a page, no engines at Serper): served as usual
        if route != "stats":
            with self._lock:
                self.served[(route, fault)] += 1
        if fault in ACCOUNT_FAULTS:
            status, ctype, payload = self._account_or_engine_fault(fault, route, target, payload)
            return await self._send(writer, status, ctype, payload)
        if fault == "429":
            return await self._send(writer, 429, "text/plain", b"rate limited", {"Retry-After": self.plan.retry_after})
        if fault == "500":
            return await self._send(writer, 500, "text/plain", b"internal error")
        if fault == "redirect":
            return await self._send(writer, 302, "text/plain", b"", {"Location": target})
        if fault == "hang":
            await asyncio.sleep(self.plan.hang_s)
            return False
        if fault == "drip":
            writer.write(self._head(200, ctype, len(payload)))
            for i in range(len(payload)):
                writer.write(payload[i : i + 1])
                await writer.drain()
                await asyncio.sleep(self.plan.drip_interval_s)
            return False
        if fault == "truncated":
            writer.write(self._head(200, ctype, len(payload) + 1000) + payload[: len(payload) // 2])
            await writer.drain()
            return False
        if fault == "badjson":
            payload = payload[: max(1, len(payload) // 3)] if "json" in ctype else b""
        elif fault == "latin1":
            payload = self._latin1(route, payload)
            ctype = ctype.split(";")[0]
        elif fault == "huge":
            return await self._send_huge(writer, route, ctype)
        return await self._send(writer, status, ctype, payload)

    def _route(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[str, int, str, bytes]:
        parts = urlsplit(target)
        path = unquote(parts.path)
        if method == "GET" and path == "/_served":
            with self._lock:
                counts = {f"{route}/{fault}": n for (route, fault), n in sorted(self.served.items())}
            return "stats", 200, "application/json", json.dumps(counts).encode()
        if method == "POST" and path in ("/search", "/scholar"):
            if headers.get("x-api-key") != self.api_key:
                return "serper", 403, "application/json", SERPER_UNAUTHORIZED
            try:
                q = str(json.loads(body or b"{}").get("q", ""))
            except ValueError:
                return "serper", 400, "application/json", b'{"message": "bad request"}'
            hits = [
                {
                    "title": f"Result {i} for {q}",
                    "link": f"{self.url}/page/{i}-{q.replace(' ', '_')}",
                    "snippet": f"Snippet {i} about {q}.",
                    "position": i,
                    **(
                        {"publicationInfo": f"J Doe - Journal {i}", "year": 2020 + i % 5, "citedBy": 10 * i}
                        if path == "/scholar"
                        else {}
                    ),
                }
                for i in range(1, 11)
            ]
            if self.plan.serper_extras:
                if path == "/scholar":
                    hits[2]["pdfUrl"] = f"{self.url}/file/paper-3.pdf"
                    del hits[2]["link"]
                else:
                    hits[1].update(date="Mar 5, 2024", source="Example News")
                    hits[3]["date"] = "2 days ago"
            return "serper", 200, "application/json", json.dumps({"organic": hits}).encode()
        if method == "GET" and path == "/searxng/search":
            q = parse_qs(parts.query).get("q", [""])[0]
            hits = [
                {
                    "title": f"Result {i} for {q}",
                    "url": f"{self.url}/page/{i}-{q.replace(' ', '_')}",
                    "content": f"Snippet {i} about {q}.",
                }
                for i in range(1, 11)
            ]
            return "searxng", 200, "application/json", json.dumps(_searxng_answer(q, hits, [])).encode()
        if method == "GET" and path.startswith("/jina/"):
            page = path[len("/jina/") :]
            if "/page/" not in page:  # the target answered 404: the reader says so in a 200 answer
                text = (
                    f"Title: \n\nURL Source: {page}\n\nWarning: Target URL returned error 404: Not Found\n\n"
                    "Markdown Content:\nnot found\n"
                )
                return "jina", 200, "text/plain; charset=utf-8", text.encode()
            name = page.rstrip("/").rsplit("/", 1)[-1]
            text = f"Title: Page {name}\nURL Source: {page}\n\nMarkdown Content:\n# Page {name}\n\n{_article(name)}"
            return "jina", 200, "text/plain; charset=utf-8", text.encode()
        if method == "GET" and path.startswith("/page/"):
            name = path[len("/page/") :]
            html = (
                f"<!doctype html><html><head><title>Page {name}</title></head><body>"
                "<nav><a href='/'>Home</a> | <a href='/about'>About us</a> | Sign in</nav>"
                f"<article><h1>Page {name}</h1>"
                + "".join(f"<p>{p}</p>" for p in _article(name).split("\n\n"))
                + "</article><footer>Copyright footer text</footer></body></html>"
            )
            return "page", 200, "text/html; charset=utf-8", html.encode()
        if method == "GET" and path.startswith("/file/") and path[len("/file/") :] in self.files:
            data, ctype = self.files[path[len("/file/") :]]
            return "file", 200, ctype, data
        return "page", 404, "text/plain", b"not found"

    @staticmethod
    def _account_or_engine_fault(fault: str, route: str, target: str, payload: bytes) -> tuple[int, str, bytes]:
        """``(status, content type, body)`` of an account or SearXNG-engine fault on ``route``."""
        shapes: dict[tuple[str, str], tuple[int, str, bytes]] = {
            ("nocredit", "serper"): (400, "application/json", SERPER_NO_CREDIT),
            ("nocredit", "jina"): (
                402,
                "application/json",
                _jina_error(
                    402,
                    "InsufficientBalanceError",
                    40203,
                    ("Account balance not enough to run this query, please recharge."),
                ),
            ),
            ("badkey", "serper"): (403, "application/json", SERPER_UNAUTHORIZED),
            ("badkey", "jina"): (
                401,
                "application/json",
                _jina_error(401, "AuthenticationRequiredError", 40101, ("Authentication failed")),
            ),
            ("badkey", "page"): (403, "text/html; charset=utf-8", b"<h1>Forbidden</h1><p>Sign in to read.</p>"),
            ("jsonoff", "searxng"): (403, "text/html; charset=utf-8", SEARXNG_FORBIDDEN),
        }
        if (fault, route) in shapes:
            return shapes[(fault, route)]
        if route == "searxng" and fault in ("noengines", "fewengines"):
            data = json.loads(payload)
            if fault == "noengines":
                data["results"] = []
            data["unresponsive_engines"] = UNRESPONSIVE
            return 200, "application/json", json.dumps(data).encode()
        raise ValueError(f"no {fault} answer for the {route} route")  # applies() keeps these out

    @staticmethod
    def _latin1(route: str, payload: bytes) -> bytes:
        text = payload.decode("utf-8")
        if route in ("serper", "searxng"):
            text = text.replace("Snippet", "Caf\u00e9 snippet")
        else:
            text = text.replace("Page ", "P\u00e2ge ", 2)
        return text.encode("latin-1", errors="replace")

    async def _send_huge(self, writer: asyncio.StreamWriter, route: str, ctype: str) -> bool:
        size = self.plan.huge_bytes
        chunk = (b"<p>" + b"filler text of a very long page. " * 30 + b"</p>\n") if "html" in ctype else b"x" * 1024
        writer.write(self._head(200, ctype, size))
        sent = 0
        try:
            while sent < size:
                piece = chunk[: size - sent]
                writer.write(piece)
                sent += len(piece)
                if sent % (1 << 20) < len(chunk):
                    await writer.drain()
            await writer.drain()
        except ConnectionError:
            return False
        return True

    @staticmethod
    def _head(status: int, ctype: str, length: int, extra: dict[str, str] | None = None) -> bytes:
        reason = {
            200: "OK",
            302: "Found",
            400: "Bad Request",
            401: "Unauthorized",
            402: "Payment Required",
            403: "Forbidden",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
        }.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {ctype}", f"Content-Length: {length}"]
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _send(
        self, writer: asyncio.StreamWriter, status: int, ctype: str, payload: bytes, extra: dict[str, str] | None = None
    ) -> bool:
        writer.write(self._head(status, ctype, len(payload), extra) + payload)
        await writer.drain()
        return True


#: Serper's answer to a refused key (``{'message': 'Unauthorized.', 'statusCode': 403}``, as users
#: report it) and to an exhausted account (users report HTTP 400 with this body; not confirmed
#: from Serper's documentation).
SERPER_UNAUTHORIZED = b'{"message": "Unauthorized.", "statusCode": 403}'
SERPER_NO_CREDIT = b'{"message": "Not enough credits", "statusCode": 400}'
#: What Flask's ``abort(403)`` sends when ``json`` is not in the instance's ``search.formats``.
SEARXNG_FORBIDDEN = (
    b"<!doctype html>\n<html lang=en>\n<title>403 Forbidden</title>\n<h1>Forbidden</h1>\n"
    b"<p>You don't have the permission to access the requested resource. It is either read-protected "
    b"or not readable by the server.</p>\n"
)


def _jina_error(code: int, name: str, status: int, message: str) -> bytes:
    """A Jina Reader error envelope (civkit's ``ApplicationError`` as JSON)."""
    return json.dumps(
        {
            "data": None,
            "code": code,
            "name": name,
            "status": status,
            "message": message,
            "readableMessage": f"{name}: {message}",
        }
    ).encode()


def _searxng_answer(q: str, results: list[dict], unresponsive: list[list[str]]) -> dict:
    """SearXNG's JSON answer (``searx/webutils.py::get_json_response``)."""
    return {
        "query": q,
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": unresponsive,
    }


#: User agents SearXNG's bot detection refuses (a part of ``searx/botdetection/http_user_agent.py``,
#: matched at the start; a request without the header counts as ``unknown``).
_BOT_AGENTS = re.compile(
    r"(unknown|[Cc][Uu][Rr][Ll]|[wW]get|Scrapy|python-requests|Go-http-client|Java|okhttp|HttpClient|Python"
    r"|libwww-perl|Ruby|Googlebot|bingbot|HeadlessChrome)"
)


def _accepts_html(accept: str) -> bool:
    """Whether an ``Accept`` header accepts ``text/html`` as werkzeug's ``MIMEAccept`` judges it
    (``text/html``, ``text/*`` or ``*/*``, with a quality above 0)."""
    for item in accept.split(","):
        mime, *params = [p.strip() for p in item.split(";")]
        quality = next((p.split("=", 1)[1] for p in params if p.replace(" ", "").startswith("q=")), "1")
        try:
            if float(quality) <= 0:
                continue
        except ValueError:
            continue
        if mime.lower() in ("text/html", "text/*", "*/*"):
            return True
    return False


def bot_refusal(headers: dict[str, str]) -> str | None:
    """Why SearXNG's limiter would refuse a ``/search`` request with these (lower-cased)
    headers, or ``None``: the checks of ``searx/botdetection`` (``http_accept``,
    ``http_accept_encoding``, ``http_accept_language``, ``http_connection``,
    ``http_user_agent``; the IP rate limit and the Sec-Fetch checks of HTTPS browser requests
    are left out)."""
    if not _accepts_html(headers.get("accept", "")):
        return "HTTP header Accept did not contain text/html"
    encodings = [e.strip() for e in headers.get("accept-encoding", "").split(",")]
    if "gzip" not in encodings and "deflate" not in encodings:
        return "HTTP header Accept-Encoding did not contain gzip nor deflate"
    if not headers.get("accept-language", "").strip():
        return "missing HTTP header Accept-Language"
    if headers.get("connection", "").strip() == "close":
        return "HTTP header Connection=close"
    agent = headers.get("user-agent", "unknown")
    if _BOT_AGENTS.match(agent):
        return f"bot detected, HTTP header User-Agent: {agent}"
    return None


def _article(name: str) -> str:
    topic = name.replace("_", " ")
    return (
        f"{topic} is the subject of this page. It was founded in 1901 by Ada Example.\n\n"
        f"The population of {topic} was 12,345 in the 2020 census.\n\n"
        f"{topic} is known for its river, its bridges and a yearly festival in May."
    )


def main(argv: list[str] | None = None) -> None:
    """Run the imitation in the foreground: ``python -m websailor.tools.web.fault_server
    --port 8790 --rate 0.1``; prints its base URL (alone, on stdout), then serves until
    interrupted."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description="Local imitation of the web providers, with injected faults.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="TCP port (default 0: a free one)")
    ap.add_argument("--rate", type=float, default=0.0, help="share of requests faulted at random")
    ap.add_argument(
        "--kinds",
        default=",".join(TRANSIENT_FAULTS),
        help=f"comma-separated faults to draw from (default: the transient ones; all: {','.join(FAULTS)})",
    )
    ap.add_argument(
        "--searxng-limiter", action="store_true", help="refuse SearXNG requests that its bot detection would (429)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--retry-after", default="1")
    ap.add_argument("--drip-interval", type=float, default=0.5)
    ap.add_argument("--api-key", default="test-key")
    args = ap.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = sorted(set(kinds) - set(FAULTS))
    if unknown:
        ap.error(f"unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}")
    plan = FaultPlan(
        rate=args.rate,
        kinds=kinds,
        seed=args.seed,
        retry_after=args.retry_after,
        drip_interval_s=args.drip_interval,
        limiter=args.searxng_limiter,
    )
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # clients dropping faulted connections is the point
    with FaultServer(plan, api_key=args.api_key, host=args.host, port=args.port) as server:
        print(server.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
