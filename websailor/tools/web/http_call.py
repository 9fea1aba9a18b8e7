"""One HTTP request of a web provider, its body read up to a size cap, and its error answers
classified as :class:`~websailor.tools.web.failures.ProviderFailure` kinds (``Retry-After``
honoured, the reason read from the start of an error body)."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from websailor.tools.documents.charset import charset_of, decode_text
from websailor.tools.web.failures import ProviderFailure


@dataclass
class HttpReply:
    """A response read with a size cap: ``body`` holds at most ``max_bytes`` bytes."""

    status: int
    headers: httpx.Headers
    body: bytes
    truncated: bool
    url: str

    def text(self) -> str:
        """The body as text (:func:`~websailor.tools.documents.charset.decode_text`: a byte-order mark,
        valid UTF-8, the declared charset, a detected CJK encoding, else Windows-1252)."""
        return decode_text(self.body, charset_of(self.headers.get("content-type")))

    def json(self) -> Any:
        """The body as JSON.

        Raises:
            ProviderFailure: ``truncated`` when the body was cut, ``bad_response`` when it is
                not JSON.
        """
        if self.truncated:
            raise ProviderFailure("truncated", f"JSON body longer than the {len(self.body)}-byte limit")
        try:
            return json.loads(self.text())  # JSON is UTF-8, but a BOM or Latin-1 bytes are read too
        except (ValueError, RecursionError) as e:
            raise ProviderFailure("bad_response", f"invalid JSON ({str(e)[:80]})") from None


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; ``None`` if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


#: Most bytes of an error answer read for its reason (Serper and Jina say it in the body).
ERROR_BODY_BYTES = 4096


async def _error_message(resp: httpx.Response) -> str:
    """The start of an error answer's body as text (at most :data:`ERROR_BODY_BYTES`); empty
    when it cannot be read."""
    body = bytearray()
    try:
        async for chunk in resp.aiter_bytes():
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                break
    except httpx.HTTPError:
        pass
    return decode_text(bytes(body[:ERROR_BODY_BYTES]), charset_of(resp.headers.get("content-type")))[:2000]


async def http_request(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    max_bytes: int,
    check_peer: Callable[[tuple | None], None] | None = None,
    target: bool = False,
    **kwargs: Any,
) -> HttpReply:
    """Send one request and read at most ``max_bytes`` of the body. ``check_peer``, if given,
    sees the server's ``(address, port)`` before the body is read, and may raise
    :class:`ProviderFailure` to refuse it. ``target``: the URL is a page the agent asked for
    (a direct fetch), so 401, 402 and 403 are the site refusing access (``client_error``), not
    a provider's key.

    Error answers carry their status and the start of their body
    (:attr:`ProviderFailure.status`, :attr:`ProviderFailure.message`), so that a provider can
    read the reason and classify it again.

    Raises:
        ProviderFailure: ``rate_limited`` (429, with ``Retry-After``), ``server_error`` (5xx),
            ``auth`` (401, 403), ``client_error`` (other 4xx), ``redirect_loop`` (too many
            redirects), ``timeout``, ``truncated`` (the connection closed mid-body),
            ``connection`` (any other transport error).
    """
    try:
        async with client.stream(method, url, **kwargs) as resp:
            if check_peer is not None:
                stream = resp.extensions.get("network_stream")
                check_peer(stream.get_extra_info("server_addr") if stream is not None else None)
            code = resp.status_code
            if code >= 400:
                message = await _error_message(resp)
                if code == 429:
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                    raise ProviderFailure("rate_limited", "HTTP 429", retry_after, code, message)
                if code >= 500:
                    raise ProviderFailure("server_error", f"HTTP {code}", status=code, message=message)
                if code in (401, 402, 403) and target:
                    raise ProviderFailure(
                        "client_error", f"HTTP {code} (the site refuses access)", status=code, message=message
                    )
                if code in (401, 403):
                    raise ProviderFailure("auth", f"HTTP {code} (check the API key)", status=code, message=message)
                gone = " (not found)" if code in (404, 410) else ""
                raise ProviderFailure("client_error", f"HTTP {code}{gone}", status=code, message=message)
            body = bytearray()
            truncated = False
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    del body[max_bytes:]
                    truncated = True
                    break
            return HttpReply(code, resp.headers, bytes(body), truncated, str(resp.url))
    except httpx.TooManyRedirects:
        raise ProviderFailure("redirect_loop", "too many redirects") from None
    except httpx.TimeoutException as e:
        raise ProviderFailure("timeout", type(e).__name__) from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as e:
        raise ProviderFailure("truncated", f"connection closed mid-response ({type(e).__name__})") from None
    except httpx.HTTPError as e:
        raise ProviderFailure("connection", f"{type(e).__name__}: {str(e)[:120]}") from None
