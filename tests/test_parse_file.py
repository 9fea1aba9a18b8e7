"""parse_file on real files written by the tests (PDF via reportlab, DOCX, XLSX, CSV, text,
HTML), bad input of every kind, and one real shared data file read in place."""

from __future__ import annotations

import io
import json
from pathlib import Path

import docx
import openpyxl
import pytest
from fixtures import NQSample
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas

from websailor.errors import DownloadError, InputFormatError
from websailor.tools.documents.charset import charset_of, decode_text
from websailor.tools.documents.parse_file import ParseFileTool
from websailor.tools.documents.parsers import FileParseError, detect_kind, markdown_table, parse_bytes
from websailor.tools.search import BLOCK_SEPARATOR

PAGE_TEXTS = [
    "The first page talks about the Lighthouse of Alexandria.",
    "The second page mentions the Colossus of Rhodes.",
]

HTML_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Wonders</title><style>body {color: red}</style></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/shop">Shop gift cards</a></li>
<li><a href="/login">Sign in to your account</a></li></ul></nav>
<article>
<h1>The Lighthouse of Alexandria</h1>
<p>The Lighthouse of Alexandria was built by the Ptolemaic Kingdom during the reign of Ptolemy II
Philadelphus, on the island of Pharos at the harbour of Alexandria.</p>
<p>Its height was estimated at over one hundred metres, which made it one of the tallest man-made
structures in the world for many centuries after it was completed.</p>
</article>
<footer>Copyright 2024 Example Corp. All rights reserved.</footer>
<script>var tracking = "do not show";</script>
</body></html>
"""


def pdf_bytes(pages: list[str]) -> bytes:
    """A real PDF with one line of text per page."""
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    for text in pages:
        c.drawString(72, 750, text)
        c.showPage()
    c.save()
    return buf.getvalue()


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    d = tmp_path / "files"
    d.mkdir()
    return d


@pytest.fixture()
def tool(root: Path) -> ParseFileTool:
    return ParseFileTool(files_root=root)


def blocks(observation: str) -> list[str]:
    return observation.split(BLOCK_SEPARATOR)


# --- good files ---------------------------------------------------------------------------------


def test_pdf_two_pages(root: Path, tool: ParseFileTool):
    (root / "wonders.pdf").write_bytes(pdf_bytes(PAGE_TEXTS))
    obs = tool({"files": ["wonders.pdf"]})
    assert obs.startswith("# File: wonders.pdf\n\n## Page 1\n\n")
    assert PAGE_TEXTS[0] in obs and PAGE_TEXTS[1] in obs
    assert obs.index("## Page 1") < obs.index(PAGE_TEXTS[0]) < obs.index("## Page 2") < obs.index(PAGE_TEXTS[1])


def test_docx_heading_paragraphs_table(root: Path, tool: ParseFileTool):
    d = docx.Document()
    d.add_heading("Annual Report", level=1)
    d.add_paragraph("Revenue grew by twelve percent.")
    d.add_heading("Regions", level=2)
    table = d.add_table(rows=3, cols=2)
    for r, (a, b) in enumerate([("Region", "Sales"), ("North", "120"), ("South | East", "80")]):
        table.cell(r, 0).text, table.cell(r, 1).text = a, b
    d.add_paragraph("Closing remarks.")
    d.save(root / "report.docx")
    obs = tool('{"files": ["report.docx"]}')
    assert "# Annual Report" in obs and "## Regions" in obs
    assert "Revenue grew by twelve percent." in obs
    assert "| Region | Sales |\n|---|---|\n| North | 120 |\n| South \\| East | 80 |" in obs
    assert obs.index("Revenue") < obs.index("| Region") < obs.index("Closing remarks.")


def test_xlsx_two_sheets(root: Path, tool: ParseFileTool):
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Planets"
    for row in [("Planet", "Moons", "Radius km"), ("Earth", 1, 6371.0), ("Mars", 2, 3389.5)]:
        ws.append(row)
    ws2 = wb.create_sheet("Notes")
    ws2.append(["Source"])
    ws2.append(["NASA fact sheet"])
    wb.save(root / "planets.xlsx")
    obs = tool({"files": ["planets.xlsx"]})
    assert "## Sheet: Planets" in obs and "## Sheet: Notes" in obs
    assert "| Planet | Moons | Radius km |\n|---|---|---|\n| Earth | 1 | 6371 |\n| Mars | 2 | 3389.5 |" in obs
    assert "| NASA fact sheet |" in obs


def test_csv_quoted_commas(root: Path, tool: ParseFileTool):
    (root / "people.csv").write_text(
        'name,city,note\n"Smith, John",Paris,"likes a, b and c"\nLee,Rome,\n', encoding="utf-8"
    )
    obs = tool({"files": ["people.csv"]})
    assert "| name | city | note |\n|---|---|---|\n| Smith, John | Paris | likes a, b and c |\n| Lee | Rome |  |" in obs


def test_csv_rows_and_columns_are_capped():
    rows = [[f"c{j}" for j in range(40)]] + [[str(i * j) for j in range(40)] for i in range(300)]
    data = "\n".join(",".join(r) for r in rows).encode()
    text = parse_bytes(data, "big.csv")
    assert "showing the first 200 of 300 data rows and the first 30 of 40 columns" in text
    table_lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(table_lines) == 2 + 200
    assert table_lines[0].count("|") == 31


def test_text_utf8_and_latin1(root: Path, tool: ParseFileTool):
    (root / "utf8.txt").write_text("Grüße aus Köln — 東京\n", encoding="utf-8")
    (root / "latin1.txt").write_bytes("Café crème brûlée, naïve façade.".encode("latin-1"))
    obs = tool({"files": ["utf8.txt", "latin1.txt"]})
    first, second = blocks(obs)
    assert "Grüße aus Köln — 東京" in first
    assert "Café crème brûlée, naïve façade." in second


def test_decode_text_never_fails():
    assert decode_text("北京是中华人民共和国的首都，也是全国的政治中心。".encode("gbk")).startswith("北京")
    assert "\ufffd" in decode_text(b"\x81\x8d ok")  # undefined in cp1252: replaced, no exception
    assert decode_text("hé".encode("utf-16")) == "hé"
    assert decode_text("Köln".encode("latin-1"), "idna") == "Köln"  # a label that is no text codec
    assert decode_text("Привет".encode("koi8-r"), "KOI8-R") == "Привет"


def test_charset_of_reads_headers_and_meta_tags():
    assert charset_of('text/html; charset="ISO-8859-1"') == "ISO-8859-1"
    assert charset_of("application/json") is None and charset_of(None) is None
    assert charset_of('<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">') == "windows-1251"
    assert charset_of("<meta charset='shift_jis'>") == "shift_jis"
    assert charset_of("text/plain; xcharset=latin1") is None


def test_html_article_without_boilerplate(root: Path, tool: ParseFileTool):
    (root / "page.html").write_text(HTML_PAGE, encoding="utf-8")
    obs = tool({"files": ["page.html"]})
    assert "Lighthouse of Alexandria was built by the Ptolemaic Kingdom" in obs
    assert "one of the tallest man-made" in obs
    assert "Shop gift cards" not in obs and "do not show" not in obs and "color: red" not in obs


def test_html_fallback_when_no_main_content():
    text = parse_bytes(b"<html><body><div>Tiny</div><div>page</div><script>x=1</script></body></html>", "t.htm")
    assert "Tiny" in text and "page" in text and "x=1" not in text


def test_type_from_content_type_and_magic():
    pdf = pdf_bytes(["magic"])
    assert detect_kind(pdf, "download", None) == "pdf"
    assert detect_kind(pdf, "report.html", None) == "pdf"  # magic bytes win over a wrong extension
    assert detect_kind(b"<html><body>login</body></html>", "https://x.org/paper.pdf", "text/html") == "html"
    assert detect_kind(b"a,b\n1,2\n", "https://x.org/export?id=3", "text/csv; charset=utf-8") == "csv"
    assert detect_kind(b"just words", "README", None) == "text"
    assert detect_kind(b"\x00\x01\x02binary", "blob", None) is None


def test_markdown_table_drops_empty_rows_and_columns():
    table, note = markdown_table([["a", "b", None], [None, None, None], [1.0, "x\ny", ""]])
    assert table == "| a | b |\n|---|---|\n| 1 | x y |" and note == ""
    assert markdown_table([[None], []]) == ("", "")


def test_long_text_is_truncated_with_note(root: Path):
    (root / "long.txt").write_text("word " * 10_000, encoding="utf-8")
    obs = ParseFileTool(files_root=root, max_chars=1000)({"files": ["long.txt"]})
    assert "[Truncated: showing the first" in obs and "more characters were cut.]" in obs
    body = obs.split("\n\n", 1)[1]
    assert len(body) < 1200


def test_long_pdf_stops_reading_early():
    data = pdf_bytes([f"Page number {i} " + "filler text " * 20 for i in range(1, 11)])
    text = parse_bytes(data, "long.pdf", max_chars=600)
    assert "Page number 1 " in text and "Page number 10" not in text
    assert "of 10 were not read: the character limit was reached." in text
    assert "[Truncated:" in text


def test_single_string_is_coerced(root: Path, tool: ParseFileTool):
    (root / "a.md").write_text("# Title\n\nBody", encoding="utf-8")
    assert tool('{"files": "a.md"}') == "# File: a.md\n\n# Title\n\nBody"
    result = tool.execute('{"files": []}')
    assert result.error is not None and "Invalid arguments" in result.observation
    assert tool.schema()["parameters"]["properties"]["files"]["minItems"] == 1
    json.dumps(tool.schema())


# --- bad input ----------------------------------------------------------------------------------


def test_unsupported_extension(root: Path, tool: ParseFileTool):
    (root / "setup.exe").write_bytes(b"MZ\x90\x00\x03\x00\x00\x00\x04\x00")
    obs = tool({"files": ["setup.exe"]})
    assert "[parse_file] Error: setup.exe: unsupported file type (.exe)" in obs
    assert "PDF (.pdf)" in obs and "DOCX (.docx)" in obs and "XLSX (.xlsx" in obs


def test_corrupt_pdf(root: Path, tool: ParseFileTool):
    data = pdf_bytes(PAGE_TEXTS)
    (root / "broken.pdf").write_bytes(data[: len(data) // 3])
    obs = tool({"files": ["broken.pdf"]})
    assert obs.startswith("# File: broken.pdf\n\n[parse_file] Error: broken.pdf:")
    assert "corrupt" in obs or "no extractable text" in obs


def test_encrypted_pdf():
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(["secret"]))))
    writer.encrypt(user_password="hunter2", algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    with pytest.raises(FileParseError, match="locked.pdf: the PDF is encrypted"):
        parse_bytes(buf.getvalue(), "locked.pdf")


def test_corrupt_docx_and_empty_file():
    with pytest.raises(FileParseError, match="bad.docx: corrupt or unreadable DOCX"):
        parse_bytes(b"PK\x03\x04 not really a zip", "bad.docx")
    with pytest.raises(FileParseError, match="empty.txt: the file is empty"):
        parse_bytes(b"", "empty.txt")
    assert issubclass(FileParseError, InputFormatError)


def test_empty_file_via_tool(root: Path, tool: ParseFileTool):
    (root / "empty.csv").write_bytes(b"")
    assert "empty.csv: the file is empty (0 bytes)" in tool({"files": ["empty.csv"]})


def test_path_escaping_root(tmp_path: Path, root: Path, tool: ParseFileTool):
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    (root / "link.txt").symlink_to(secret)
    obs = tool({"files": ["../secret.txt", "link.txt", str(secret)]})
    parts = blocks(obs)
    assert len(parts) == 3
    for part in parts:
        assert "outside the available files" in part and "top secret" not in part


def test_symlink_inside_root_is_allowed(root: Path, tool: ParseFileTool):
    (root / "real.txt").write_text("inside", encoding="utf-8")
    (root / "alias.txt").symlink_to(root / "real.txt")
    assert tool({"files": ["alias.txt"]}).endswith("inside")


def test_missing_file_lists_available(root: Path, tool: ParseFileTool):
    (root / "present.txt").write_text("here", encoding="utf-8")
    obs = tool({"files": ["absent.pdf"]})
    assert "absent.pdf: file not found. Available files: present.txt" in obs


def test_too_large_file(root: Path):
    (root / "big.txt").write_bytes(b"x" * 2000)
    obs = ParseFileTool(files_root=root, max_bytes=1000)({"files": ["big.txt"]})
    assert "big.txt: the file is 0.0 MB, larger than the limit of 0.0 MB" in obs


def test_too_many_files_and_one_bad_file(root: Path):
    for name in "abc":
        (root / f"{name}.txt").write_text(f"content {name}", encoding="utf-8")
    obs = ParseFileTool(files_root=root, max_files=3)({"files": ["a.txt", "nope.txt", "b.txt", "c.txt"]})
    assert obs.startswith("Note: only the first 3 of 4 files were parsed.\n")
    parts = blocks(obs)
    assert len(parts) == 3
    assert parts[0].endswith("content a") and "file not found" in parts[1] and parts[2].endswith("content b")


def test_no_files_root_refuses_local_paths():
    obs = ParseFileTool()({"files": ["notes.txt"]})
    assert "no local files are available in this environment" in obs


def test_url_without_fetcher(tool: ParseFileTool):
    obs = tool({"files": ["https://example.org/paper.pdf"]})
    assert "https://example.org/paper.pdf: URLs cannot be downloaded in this environment" in obs


def test_url_with_stub_fetcher():
    seen: list[str] = []
    pdf = pdf_bytes(PAGE_TEXTS)

    def fetch(url: str) -> tuple[bytes, str | None]:
        seen.append(url)
        if "missing" in url:
            raise DownloadError(f"HTTP 404 for {url}")
        return pdf, "application/pdf"

    tool = ParseFileTool(fetch=fetch)
    obs = tool({"files": ["https://arxiv.org/pdf/2509.13305", "https://x.org/missing.pdf", "ftp://x.org/a.pdf"]})
    first, second, third = blocks(obs)
    assert first.startswith("# File: https://arxiv.org/pdf/2509.13305\n\n## Page 1") and PAGE_TEXTS[1] in first
    assert "the download failed (HTTP 404 for https://x.org/missing.pdf)" in second
    assert "only http:// and https:// URLs" in third
    assert seen == ["https://arxiv.org/pdf/2509.13305", "https://x.org/missing.pdf"]
    big = ParseFileTool(fetch=fetch, max_bytes=100)({"files": ["https://arxiv.org/pdf/1"]})
    assert "larger than the limit" in big


# --- a real data file, read in place -----------------------------------------------------------


def test_data_file_read_in_place(nq_sample: NQSample):
    tool = ParseFileTool(files_root=nq_sample.path.parent, max_chars=5000)
    name = nq_sample.path.name
    obs = tool({"files": [name]})
    assert obs.startswith(f"# File: {name}\n\n{{")
    assert nq_sample.first_question in obs
    assert nq_sample.first_answer_escaped in obs
    first_line = obs.split("\n\n", 1)[1].splitlines()[0]
    assert json.loads(first_line)["id"] == nq_sample.first_id


def test_a_hostile_spreadsheet_is_stopped_at_the_time_limit(tmp_path):
    """Cells at A1 and XFD1048576 make the parser walk 17 billion empty cells: the parse runs
    in a child process that is killed at the limit."""
    import time

    from openpyxl import Workbook

    wb = Workbook()
    wb.active["A1"] = "a"
    wb.active["XFD1048576"] = "b"
    wb.save(tmp_path / "wide.xlsx")
    tool = ParseFileTool(files_root=tmp_path, parse_timeout_s=2)
    t0 = time.perf_counter()
    out = tool.execute({"files": ["wide.xlsx"]}).observation
    assert time.perf_counter() - t0 < 10
    assert "# File: wide.xlsx" in out and "took longer than 2 s and was stopped" in out


def test_isolated_calls_are_limited():
    import time

    from websailor.tools.documents.isolated import IsolatedCallError, call_isolated

    assert call_isolated(sorted, [3, 1, 2]) == [1, 2, 3]
    with pytest.raises(IsolatedCallError, match="took longer than 1 s"):
        call_isolated(time.sleep, 30, timeout_s=1)
    with pytest.raises(IsolatedCallError, match="ran out of memory"):
        call_isolated(bytearray, 3 << 30, memory_mb=256)
    with pytest.raises(IsolatedCallError, match="ValueError"):
        call_isolated(int, "not a number")
