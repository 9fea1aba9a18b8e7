"""Document bytes -> markdown: PDF (pypdf), DOCX (python-docx), XLSX (openpyxl), CSV/TSV,
HTML (trafilatura) and text files, with the type found from magic bytes, the extension or the
content type. :func:`parse_bytes` is the entry point; the ``parse_file`` tool
(:mod:`websailor.tools.documents.parse_file`) and the web ``visit`` tool's direct fetch use it.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from websailor.errors import InputFormatError
from websailor.text import truncate
from websailor.tools.documents.charset import BOMS, charset_of, decode_text

#: Largest total uncompressed size of a DOCX/XLSX archive (bytes); guards against zip bombs.
MAX_UNZIPPED_BYTES = 200 * 1024 * 1024
#: Data rows shown per table (XLSX sheet, CSV, DOCX table); the rest are counted in a note.
MAX_TABLE_ROWS = 200
#: Columns shown per table; the rest are counted in a note.
MAX_TABLE_COLS = 30

#: File extension -> kind. A kind names one parser.
EXTENSION_KINDS: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".txt": "text",
    ".text": "text",
    ".md": "text",
    ".markdown": "text",
    ".rst": "text",
    ".json": "text",
    ".jsonl": "text",
    ".ndjson": "text",
    ".xml": "text",
    ".yaml": "text",
    ".yml": "text",
    ".log": "text",
}

#: MIME type (without parameters) -> kind.
CONTENT_TYPE_KINDS: dict[str, str] = {
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/csv": "csv",
    "application/csv": "csv",
    "text/tab-separated-values": "tsv",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/json": "text",
    "application/x-ndjson": "text",
    "application/xml": "text",
}

#: Kind -> how error messages name it.
KIND_LABELS: dict[str, str] = {
    "pdf": "PDF",
    "docx": "DOCX",
    "xlsx": "XLSX",
    "csv": "CSV",
    "tsv": "TSV",
    "html": "HTML",
    "text": "text",
}

#: Kinds whose magic bytes identify them for sure (so they win over a wrong extension).
BINARY_KINDS = frozenset({"pdf", "docx", "xlsx"})

_XML_DECL_RE = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)


class FileParseError(InputFormatError):
    """A file given to ``parse_file`` cannot be read: not found, outside the files directory,
    too large, empty, of an unsupported type, encrypted or corrupt. The message names the file."""


@dataclass(frozen=True)
class Extracted:
    """What a parser read: the ``text`` (markdown) and a ``note`` on what it left unread, which
    is shown after the text even when the text is truncated."""

    text: str
    note: str = ""


def supported_types() -> str:
    """The supported types with their extensions, for error messages and the tool description."""
    by_kind: dict[str, list[str]] = {}
    for ext, kind in EXTENSION_KINDS.items():
        by_kind.setdefault(kind, []).append(ext)
    return ", ".join(f"{KIND_LABELS[k]} ({' '.join(exts)})" for k, exts in by_kind.items())


# --- type detection ----------------------------------------------------------------------------


def _extension(name: str) -> str:
    """Lower-case extension of a file name or of a URL's path ('' if none)."""
    path = urlparse(name).path if "://" in name else name.replace("\\", "/")
    return PurePosixPath(unquote(path)).suffix.lower()


def _mime(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _kind_from_content_type(content_type: str | None) -> str | None:
    mime = _mime(content_type)
    if mime in CONTENT_TYPE_KINDS:
        return CONTENT_TYPE_KINDS[mime]
    if mime.startswith("text/"):
        return "text"
    return None


def _zip_kind(data: bytes) -> str | None:
    """'docx' or 'xlsx' for an Office Open XML archive, else None (also for a broken zip)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    if any(n.startswith("word/") for n in names):
        return "docx"
    if any(n.startswith("xl/") for n in names):
        return "xlsx"
    return None


def _looks_like_utf8_text(sample: bytes) -> bool:
    """No NUL bytes and valid UTF-8 (a character cut at the end of the sample is allowed)."""
    if b"\x00" in sample:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return False
    return True


def sniff_kind(data: bytes) -> str | None:
    """The kind that the content shows: ``%PDF`` -> pdf, a zip holding ``word/`` or ``xl/`` ->
    docx or xlsx, an ``<html`` or doctype near the start -> html, UTF-8 without NUL bytes ->
    text; None when the bytes say nothing."""
    head = data[:1024]
    if b"%PDF-" in head:
        return "pdf"
    if data.startswith(b"PK\x03\x04"):
        return _zip_kind(data)
    lowered = head.lstrip(codecs.BOM_UTF8 + b" \t\r\n").lower()
    if lowered.startswith(b"<!doctype html") or b"<html" in lowered:
        return "html"
    if any(data.startswith(bom) for bom, _ in BOMS if bom != codecs.BOM_UTF8):
        return "text"
    if _looks_like_utf8_text(data[:4096]):
        return "text"
    return None


def detect_kind(data: bytes, name: str, content_type: str | None = None) -> str | None:
    """The parser kind for a file ('pdf', 'docx', 'xlsx', 'csv', 'tsv', 'html', 'text') or None.

    The extension of ``name`` decides, then ``content_type``, then the magic bytes
    (:func:`sniff_kind`). Magic bytes that identify PDF, DOCX or XLSX always win, and an HTML
    page served where a PDF/DOCX/XLSX was announced (a login or error page) is read as HTML.
    """
    declared = EXTENSION_KINDS.get(_extension(name)) or _kind_from_content_type(content_type)
    sniffed = sniff_kind(data)
    if sniffed in BINARY_KINDS:
        return sniffed
    if declared in BINARY_KINDS and sniffed == "html":
        return "html"
    return declared or sniffed


# --- text ---------------------------------------------------------------------------------------


def _parse_text(data: bytes, name: str, content_type: str | None) -> Extracted:
    return Extracted(decode_text(data, charset_of(content_type)))


# --- tables -------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    """One table cell as markdown: numbers without a spurious '.0', dates in ISO form, pipes
    escaped, whitespace (newlines included) collapsed."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, datetime):
        return value.isoformat(sep=" ") if value.time() != time() else value.date().isoformat()
    if isinstance(value, date | time):
        return value.isoformat()
    return " ".join(str(value).split()).replace("|", "\\|")


def markdown_table(
    rows: Iterable[Sequence[Any]], max_rows: int = MAX_TABLE_ROWS, max_cols: int = MAX_TABLE_COLS
) -> tuple[str, str]:
    """Rows (the first one is the header) -> (markdown table, note on what was cut).

    Empty rows are skipped and empty trailing columns dropped. At most ``max_rows`` data rows
    and ``max_cols`` columns are shown; the note (empty if nothing was cut) counts the rest.
    The whole of ``rows`` is consumed, to count it. The table is '' when every row is empty.
    """
    kept: list[list[str]] = []
    n_rows = n_cols = 0
    for row in rows:
        cells = [_cell(v) for v in row]
        while cells and not cells[-1]:
            cells.pop()
        if not cells:
            continue
        n_rows += 1
        n_cols = max(n_cols, len(cells))
        if len(kept) <= max_rows:  # header plus max_rows data rows
            kept.append(cells[:max_cols])
    if not kept:
        return "", ""
    width = max(len(r) for r in kept)
    kept = [r + [""] * (width - len(r)) for r in kept]
    lines = ["| " + " | ".join(kept[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in kept[1:]]
    cut: list[str] = []
    if n_rows - 1 > max_rows:
        cut.append(f"the first {max_rows:,} of {n_rows - 1:,} data rows")
    if n_cols > max_cols:
        cut.append(f"the first {max_cols} of {n_cols} columns")
    note = f"(Table cut: showing {' and '.join(cut)}.)" if cut else ""
    return "\n".join(lines), note


def _table_block(rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table with its cut note (if any) above it, so truncation never hides the note."""
    table, note = markdown_table(rows)
    return f"{note}\n\n{table}" if note else table


def _parse_delimited(data: bytes, name: str, content_type: str | None, delimiter: str | None) -> Extracted:
    """CSV/TSV -> a markdown table; the delimiter of a CSV is sniffed among , ; tab |."""
    text = decode_text(data, charset_of(content_type))
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    try:
        table = _table_block(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter))
    except csv.Error as e:
        raise FileParseError(f"{name}: malformed {'TSV' if delimiter == chr(9) else 'CSV'} ({e})") from None
    return Extracted(table)


# --- office documents ---------------------------------------------------------------------------


def _check_zip_size(data: bytes, name: str) -> None:
    """Refuse archives whose content would expand past :data:`MAX_UNZIPPED_BYTES`."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        total = sum(info.file_size for info in zf.infolist())
    if total > MAX_UNZIPPED_BYTES:
        raise FileParseError(
            f"{name}: the archive would expand to {total / 2**20:,.0f} MB, "
            f"more than the limit of {MAX_UNZIPPED_BYTES / 2**20:,.0f} MB"
        )


def _heading_level(style_name: str) -> int:
    """1-6 for 'Title' and 'Heading N' paragraph styles, else 0."""
    if style_name == "Title":
        return 1
    match = re.fullmatch(r"Heading ([1-9])", style_name)
    return min(int(match.group(1)), 6) if match else 0


def _parse_docx(data: bytes, name: str, content_type: str | None) -> Extracted:
    """DOCX -> markdown: headings as '#' lines, list paragraphs as '- ' items, tables as
    markdown tables, in document order (headers, footers and comments are left out)."""
    import docx
    from docx.table import Table

    _check_zip_size(data, name)
    document = docx.Document(io.BytesIO(data))
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Table):
            table = _table_block([cell.text for cell in row.cells] for row in item.rows)
            if table:
                blocks.append(table)
            continue
        text = item.text.strip()
        if not text:
            continue
        style = item.style.name if item.style is not None else ""
        level = _heading_level(style or "")
        if level:
            blocks.append("#" * level + " " + " ".join(text.split()))
        elif "List" in (style or ""):
            blocks.append("- " + text)
        else:
            blocks.append(text)
    return Extracted("\n\n".join(blocks))


def _parse_xlsx(data: bytes, name: str, content_type: str | None) -> Extracted:
    """XLSX -> one '## Sheet: NAME' section per worksheet, each a markdown table of the cell
    values (formulas show their last saved result)."""
    import openpyxl

    _check_zip_size(data, name)
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sections = []
        for sheet in workbook.worksheets:
            table = _table_block(sheet.iter_rows(values_only=True))
            sections.append(f"## Sheet: {sheet.title}\n\n{table or '(empty sheet)'}")
    finally:
        workbook.close()
    return Extracted("\n\n".join(sections))


# --- PDF ----------------------------------------------------------------------------------------


def _parse_pdf(data: bytes, name: str, content_type: str | None, budget: int | None = None) -> Extracted:
    """PDF -> the text of each page under '## Page N'.

    Reading stops once the text passes ``budget`` characters (None: read all pages); the note
    says which pages were left unread. A page whose text cannot be extracted gets a marker.

    Raises:
        FileParseError: password-protected, corrupt, or no page has any text (scanned images).
    """
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, PyPdfError

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")  # many PDFs only have an owner password
        except (DependencyError, NotImplementedError, PyPdfError):
            opened = 0
        if not opened:
            raise FileParseError(f"{name}: the PDF is encrypted (password-protected) and cannot be read")
    n_pages = len(reader.pages)
    pages: list[str] = []
    failures: list[str] = []
    total = 0
    for number, page in enumerate(reader.pages, 1):
        try:
            text = (page.extract_text() or "").strip()
        except Exception as e:  # noqa: BLE001 - a damaged page must not hide the others
            failures.append(f"{type(e).__name__}: {e}")
            pages.append(f"## Page {number}\n\n[The text of this page could not be extracted.]")
            continue
        pages.append(f"## Page {number}\n\n{text or '[No text on this page.]'}")
        total += len(text)
        if budget is not None and total > budget and number < n_pages:
            note = f"[Pages {number + 1}-{n_pages} of {n_pages} were not read: the character limit was reached.]"
            return Extracted("\n\n".join(pages), note)
    if n_pages and len(failures) == n_pages:
        raise FileParseError(f"{name}: corrupt PDF: no page could be read ({truncate(failures[0], 200)})")
    if total == 0:
        raise FileParseError(f"{name}: the PDF has no extractable text ({n_pages} page(s); it may be scanned images)")
    return Extracted("\n\n".join(pages))


# --- HTML ---------------------------------------------------------------------------------------

_BLOCK_TAGS = (
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "section",
    "article",
    "header",
    "footer",
    "table",
    "ul",
    "ol",
    "pre",
    "blockquote",
    "dd",
    "dt",
)


def _html_text_fallback(html: str) -> str:
    """Plain text of an HTML page with lxml (scripts and styles dropped, one line per block)."""
    import lxml.html

    root = lxml.html.document_fromstring(html)
    for element in root.xpath("//script | //style | //noscript | //template | //head"):
        element.drop_tree()
    for element in root.iter(*_BLOCK_TAGS):
        element.tail = "\n" + (element.tail or "")
    lines = (" ".join(line.split()) for line in root.text_content().splitlines())
    return "\n".join(line for line in lines if line)


def html_markdown(
    data: bytes, content_type: str | None = None, url: str | None = None, favor_recall: bool = False
) -> tuple[str, str]:
    """``(title, markdown)`` of an HTML page: the main content by trafilatura (navigation, ads
    and footers left out, tables kept), or the whole visible text when trafilatura finds no main
    content. The charset comes from ``content_type``, else the page's own meta tag.
    ``favor_recall`` keeps more of a page whose main content is hard to find (``visit`` on the
    web wants the evidence more than a clean page)."""
    import trafilatura

    declared = charset_of(content_type) or charset_of(data[:2048].decode("latin-1"))
    html = _XML_DECL_RE.sub("", decode_text(data, declared), count=1)
    if not html.strip():
        return "", ""
    text = trafilatura.extract(
        html,
        url=url,
        output_format="markdown",
        include_tables=True,
        include_comments=False,
        include_links=False,
        favor_recall=favor_recall,
    )
    if not text or not text.strip():
        text = _html_text_fallback(html)
    return _html_title(html), text


def _html_title(html: str) -> str:
    import lxml.html

    try:
        return " ".join((lxml.html.document_fromstring(html).findtext(".//title") or "").split())
    except (ValueError, lxml.etree.ParserError):
        return ""


def _parse_html(data: bytes, name: str, content_type: str | None) -> Extracted:
    """HTML -> markdown of the main content (see :func:`html_markdown`)."""
    return Extracted(html_markdown(data, content_type)[1])


# --- entry point --------------------------------------------------------------------------------

_PARSERS: dict[str, Callable[[bytes, str, str | None], Extracted]] = {
    "docx": _parse_docx,
    "xlsx": _parse_xlsx,
    "csv": lambda data, name, ctype: _parse_delimited(data, name, ctype, None),
    "tsv": lambda data, name, ctype: _parse_delimited(data, name, ctype, "\t"),
    "html": _parse_html,
    "text": _parse_text,
}


def parse_bytes(data: bytes, name: str, content_type: str | None = None, *, max_chars: int | None = None) -> str:
    """The content of one file as text/markdown.

    Args:
        data: the file's bytes.
        name: its file name, path or URL; the extension picks the parser (see :func:`detect_kind`)
            and error messages name it.
        content_type: the MIME type a server gave (``charset`` is honoured for text), if any.
        max_chars: longest text returned (characters, not counting the note that says how much
            was cut); None for no limit. A long PDF stops being read once past the limit.

    Returns:
        Markdown: PDF pages under '## Page N'; DOCX headings, paragraphs and tables; one
        markdown table per XLSX sheet ('## Sheet: NAME') or CSV (rows and columns capped at
        :data:`MAX_TABLE_ROWS` and :data:`MAX_TABLE_COLS`, with a note); HTML main content;
        text files as they are.

    Raises:
        FileParseError: the file is empty, of an unsupported type (the message lists the
            supported ones), encrypted, corrupt, or holds no text.
    """
    if not data:
        raise FileParseError(f"{name}: the file is empty (0 bytes)")
    kind = detect_kind(data, name, content_type)
    if kind is None:
        shown = _extension(name) or _mime(content_type) or "no extension"
        raise FileParseError(f"{name}: unsupported file type ({shown}); supported types: {supported_types()}")
    try:
        if kind == "pdf":
            found = _parse_pdf(data, name, content_type, budget=max_chars)
        else:
            found = _PARSERS[kind](data, name, content_type)
    except FileParseError:
        raise
    except Exception as e:  # noqa: BLE001 - third-party parsers raise many types on damaged input
        detail = truncate(" ".join(f"{type(e).__name__}: {e}".split()), 200)
        raise FileParseError(f"{name}: corrupt or unreadable {KIND_LABELS[kind]} file ({detail})") from e
    text = found.text.strip()
    if not text:
        raise FileParseError(f"{name}: the {KIND_LABELS[kind]} file contains no text")
    notes = [found.note] if found.note else []
    if max_chars is not None and len(text) > max_chars:
        kept = truncate(text, max_chars).removesuffix("...")
        notes.insert(
            0,
            f"[Truncated: showing the first {len(kept):,} characters; "
            f"{len(text) - len(kept):,} more characters were cut.]",
        )
        text = kept.rstrip() + " ..."
    return "\n\n".join([text, *notes])
