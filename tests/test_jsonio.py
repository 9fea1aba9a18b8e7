"""Appended JSONL files: unfinished last lines, and files that are not ours are never changed."""

import pytest

from websailor.errors import InputFormatError
from websailor.jsonio import appending, read_appended_jsonl


def test_a_wrong_output_file_is_refused_and_left_as_it_was(tmp_path):
    for name, content in [
        ("settings.json", b'{\n  "batch_size": 2,\n  "max_steps": 80\n}'),
        ("notes.txt", b"first line\nsecond line without newline"),
        ("one.txt", b"hello"),
        ("bin.jsonl", bytes(range(256))),
    ]:
        f = tmp_path / name
        f.write_bytes(content)
        with pytest.raises(InputFormatError, match=f"{name} line 1 is not a trajectory record"):
            with appending(f, "a trajectory record"):
                pass
        assert f.read_bytes() == content


def test_unfinished_last_line_is_skipped_by_readers_and_cut_by_the_writer(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": 1}\n{"id": 2}\n{"id": 3, "mess')
    assert [(n, r["id"]) for n, r in read_appended_jsonl(f, "a record")] == [(1, 1), (2, 2)]
    assert f.read_bytes().endswith(b'"mess')  # readers never change the file
    with appending(f, "a record") as (fh, records):
        assert len(records) == 2
        fh.write('{"id": 4}\n')
    assert [r["id"] for _, r in read_appended_jsonl(f, "a record")] == [1, 2, 4]
    g = tmp_path / "whole.jsonl"
    g.write_bytes(b'{"id": 1}\n{"id": 2}')  # a whole last record without its newline is kept
    assert [(n, r["id"]) for n, r in read_appended_jsonl(g, "a record")] == [(1, 1), (2, 2)]
    with appending(g, "a record"):
        pass
    assert g.read_bytes() == b'{"id": 1}\n{"id": 2}\n'
