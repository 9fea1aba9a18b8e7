"""Documents: bytes to text the way browsers decode them (:mod:`.charset`), PDF, DOCX, XLSX,
CSV, HTML and text to markdown (:mod:`.parsers`), parsing in a child process with time and
memory limits (:mod:`.isolated`), and the ``parse_file`` tool (:mod:`.parse_file`)."""

from websailor.tools.documents.charset import charset_of, decode_text
from websailor.tools.documents.parse_file import ParseFileTool
from websailor.tools.documents.parsers import FileParseError, detect_kind, html_markdown, parse_bytes

__all__ = [
    "FileParseError",
    "ParseFileTool",
    "charset_of",
    "decode_text",
    "detect_kind",
    "html_markdown",
    "parse_bytes",
]
