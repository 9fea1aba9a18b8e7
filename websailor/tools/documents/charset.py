"""Bytes fetched or read from a file -> text, the way browsers do it; never fails.

One place for every tool that turns bytes into text: the executor's HTTP replies (provider
JSON, Jina Reader markdown), ``visit``'s direct fetch and ``parse_file``'s text, CSV and
HTML parsers.
"""

from __future__ import annotations

import codecs
import re

#: Legacy multi-byte encodings accepted from charset detection; other non-UTF-8 text is read as
#: Windows-1252 (what browsers do), because detection is unreliable on short Western text.
CJK_ENCODINGS = frozenset(
    {
        "gb18030",
        "gbk",
        "gb2312",
        "big5",
        "big5hkscs",
        "cp932",
        "shift_jis",
        "euc_jp",
        "iso2022_jp",
        "cp949",
        "euc_kr",
        "cp950",
    }
)
#: Fewest non-ASCII bytes for which a detected CJK encoding is trusted (three characters).
MIN_CJK_BYTES = 6
#: Byte-order marks and the codec each announces (UTF-32 before UTF-16: they share a prefix).
BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_CHARSET_RE = re.compile(r"""\bcharset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def charset_of(text: str | None) -> str | None:
    """The charset label declared in ``text``: a ``Content-Type`` value
    (``text/html; charset="ISO-8859-1"``) or the head of an HTML page (``<meta charset=...>``
    or ``<meta http-equiv ... content="text/html; charset=...">``); None if there is none.
    The label is returned as written; :func:`codec_name` maps it to Python's codec."""
    match = _CHARSET_RE.search(text or "")
    return match.group(1) if match else None


def codec_name(label: str | None) -> str | None:
    """Python's name for an encoding label (``latin1`` -> ``iso8859-1``), or None if unknown."""
    if not label:
        return None
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def decode_text(data: bytes, declared: str | None = None) -> str:
    """Bytes -> text; never fails.

    Order: a byte-order mark; UTF-8 if the bytes are valid UTF-8; the ``declared`` charset
    (HTTP header or HTML meta) if Python knows it; a CJK multi-byte encoding if charset
    detection (charset-normalizer) finds one in text with at least :data:`MIN_CJK_BYTES`
    non-ASCII bytes; else Windows-1252, whose undefined bytes become U+FFFD.
    """
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    codec = codec_name(declared)
    if codec and codec != "utf-8":
        try:
            return data.decode(codec, errors="replace")
        except (UnicodeError, ValueError):  # codecs that are not text encodings (idna, ...)
            pass
    sample = data[:65536]
    if sum(b >= 0x80 for b in sample) >= MIN_CJK_BYTES:  # too few bytes make the guess noise
        import charset_normalizer

        best = charset_normalizer.from_bytes(sample).best()
        if best is not None and best.encoding in CJK_ENCODINGS:
            return data.decode(best.encoding, errors="replace")
    return data.decode("cp1252", errors="replace")
