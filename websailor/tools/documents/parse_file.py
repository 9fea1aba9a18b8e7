"""``parse_file``: read documents (PDF, DOCX, XLSX, CSV, HTML, text) as text or markdown.

The Tongyi DeepResearch ``parse_file`` tool takes ``files``, an array of local paths or URLs,
and returns each file's content as text. Here :class:`ParseFileTool` fetches the bytes (local
paths are confined to a files directory, URLs go through a fetcher the caller supplies) and
:func:`~websailor.tools.documents.parsers.parse_bytes` turns them into markdown (tables become
markdown tables). Every problem with one file becomes an error block in the observation; the other files still
come back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websailor.errors import WebsailorError
from websailor.tools.base import Tool
from websailor.tools.documents.isolated import IsolatedCallError, call_isolated
from websailor.tools.documents.parsers import FileParseError, parse_bytes
from websailor.tools.search import BLOCK_SEPARATOR

#: Largest file read, local or downloaded (bytes).
MAX_FILE_BYTES = 20 * 1024 * 1024
#: Files listed when a local path is not found (to help the model pick the right name).
MAX_LISTED_FILES = 20


def _is_url(spec: str) -> bool:
    return "://" in spec and not spec.lower().startswith("file://")


def _parse_limited(data: bytes, name: str, content_type: str | None, max_chars: int) -> str:
    """:func:`parse_bytes` as run in the parser process (picklable, positional)."""
    return parse_bytes(data, name, content_type, max_chars=max_chars)


class ParseFileTool(Tool):
    """Parse files (local paths or URLs) into text/markdown, as Tongyi DeepResearch's
    ``parse_file`` tool does.

    Each file gives a block ``# File: NAME`` followed by its content or an error; blocks are
    joined by :data:`~websailor.tools.search.BLOCK_SEPARATOR`.

    Args:
        files_root: directory local paths are resolved against; a path must stay inside it
            after ``..`` and symlinks are resolved. None: no local files are available.
        fetch: downloads a URL, returning its bytes and content type (or None); it should raise
            a :class:`~websailor.errors.WebsailorError` or ``OSError`` on failure. None: URLs
            are refused.
        max_bytes: largest file read (bytes).
        max_files: files per call; extra ones are dropped with a note.
        max_chars: longest content returned per file (characters); longer text is cut with a note.
    """

    name = "parse_file"
    description = (
        "Parse files and return their content as text/markdown. Give the files to read in the array "
        "'files': local file names or URLs. Supported: PDF, DOCX, XLSX, CSV/TSV, HTML, and text files "
        "(TXT, MD, JSON, ...)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "files": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "The files to parse: local file names (paths) or URLs.",
            }
        },
        "required": ["files"],
    }

    def __init__(
        self,
        files_root: Path | None = None,
        fetch: Callable[[str], tuple[bytes, str | None]] | None = None,
        max_bytes: int = MAX_FILE_BYTES,
        max_files: int = 5,
        max_chars: int = 20_000,
        parse_timeout_s: float = 30.0,
    ) -> None:
        self.files_root = Path(files_root).resolve() if files_root is not None else None
        self.parse_timeout_s = parse_timeout_s
        self.fetch = fetch
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_chars = max_chars

    def _too_large(self, spec: str, size: int) -> FileParseError:
        return FileParseError(
            f"{spec}: the file is {size / 2**20:,.1f} MB, larger than the limit of {self.max_bytes / 2**20:,.1f} MB"
        )

    def _available(self) -> str:
        """A short list of the files under the files directory, for 'not found' messages."""
        assert self.files_root is not None
        try:
            found = itertools.islice((p for p in self.files_root.rglob("*") if p.is_file()), MAX_LISTED_FILES + 1)
            names = sorted(p.relative_to(self.files_root).as_posix() for p in found)
        except OSError:
            return ""
        if not names:
            return " No local files are available."
        more = ", ..." if len(names) > MAX_LISTED_FILES else ""
        return " Available files: " + ", ".join(names[:MAX_LISTED_FILES]) + more

    def read_local(self, spec: str) -> bytes:
        """The bytes of a local file named relative to ``files_root`` (or absolute inside it).

        Raises:
            FileParseError: no files directory, a path leaving it, not found, a directory,
                unreadable, or larger than ``max_bytes``.
        """
        if self.files_root is None:
            raise FileParseError(
                f"{spec}: no local files are available in this environment; give the URL of the file instead"
            )
        raw = spec[len("file://") :] if spec.lower().startswith("file://") else spec
        try:
            target = (self.files_root / raw).resolve()
        except (OSError, RuntimeError, ValueError) as e:  # RuntimeError: symlink loop; ValueError: NUL byte
            raise FileParseError(f"{spec[:300]}: the path cannot be resolved ({e})") from None
        if not target.is_relative_to(self.files_root):
            raise FileParseError(
                f"{spec}: the path is outside the available files; only files in the files directory can be read"
            )
        try:
            exists, is_file = target.exists(), target.is_file()
        except OSError as e:  # a name too long for the file system
            raise FileParseError(f"{spec[:300]}: the path cannot be used ({e.strerror or e})") from None
        if not exists:
            raise FileParseError(f"{spec}: file not found.{self._available()}")
        if not is_file:
            raise FileParseError(f"{spec}: not a file (a directory?).{self._available()}")
        try:
            size = target.stat().st_size
            if size > self.max_bytes:
                raise self._too_large(spec, size)
            with target.open("rb") as f:
                data = f.read(self.max_bytes + 1)
        except OSError as e:
            raise FileParseError(f"{spec}: the file cannot be read ({e.strerror or e})") from None
        if len(data) > self.max_bytes:
            raise self._too_large(spec, len(data))
        return data

    def download(self, url: str) -> tuple[bytes, str | None]:
        """The bytes and content type of a URL, through ``fetch``.

        Raises:
            FileParseError: no fetcher, not an http(s) URL, the download failed, or the file is
                larger than ``max_bytes``.
        """
        try:
            scheme = urlparse(url).scheme.lower()
        except ValueError as e:  # e.g. "http://[::1": an unclosed IPv6 host
            raise FileParseError(f"{url[:300]}: not a valid URL ({e})") from None
        if scheme not in ("http", "https"):
            raise FileParseError(f"{url}: only http:// and https:// URLs can be downloaded")
        if self.fetch is None:
            raise FileParseError(
                f"{url}: URLs cannot be downloaded in this environment; only local files can be parsed here"
            )
        try:
            data, content_type = self.fetch(url)
        except (WebsailorError, OSError) as e:
            raise FileParseError(f"{url}: the download failed ({e})") from None
        if len(data) > self.max_bytes:
            raise self._too_large(url, len(data))
        return data, content_type

    def parse_one(self, spec: str) -> str:
        """The observation block of one file: its content, or the error that stopped it."""
        spec = spec.strip()
        try:
            if not spec:
                raise FileParseError("empty file name: give a file name or URL")
            data, content_type = self.download(spec) if _is_url(spec) else (self.read_local(spec), None)
            body = call_isolated(
                _parse_limited, data, spec, content_type, self.max_chars, timeout_s=self.parse_timeout_s
            )
        except FileParseError as e:
            body = f"[{self.name}] Error: {e}"
        except IsolatedCallError as e:  # the parser's own message, or why it was stopped
            body = f"[{self.name}] Error: {e}"
        return f"# File: {spec}\n\n{body}"

    def forward(self, files: list[str]) -> str:
        note = ""
        if len(files) > self.max_files:
            note = f"Note: only the first {self.max_files} of {len(files)} files were parsed.\n"
            files = files[: self.max_files]
        return note + BLOCK_SEPARATOR.join(self.parse_one(f) for f in files)
