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


def test_the_stream_gives_offsets_and_line_numbers_and_continues_where_it_stopped(tmp_path):
    from websailor.jsonio import JsonlStream

    f = tmp_path / "t.jsonl"
    data = b'\xef\xbb\xbf{"id": 1}\n\n{"id": 2}\n{"id": 3, "mess'
    f.write_bytes(data)
    stream = JsonlStream(f, "a record")
    lines = list(stream.lines())
    assert [(o, n) for o, n, _ in lines] == [(3, 1), (13, 2), (14, 3)]
    assert all(data[o : o + len(raw)] == raw for o, _, raw in lines)
    assert (stream.end, stream.lineno, stream.open_line) == (24, 3, False)
    assert (stream.unfinished.lineno, stream.unfinished.offset, stream.unfinished.size) == (4, 24, 15)
    assert "line 4 is unfinished" in str(stream.unfinished)
    f.write_bytes(data[:24] + b'{"id": 3}\n{"id": 4}')  # the run went on: line 4 finished, line 5 whole without newline
    more = JsonlStream(f, "a record", stream.end, stream.lineno)
    assert [(n, r["id"]) for _, n, r in more.records()] == [(4, 3), (5, 4)]
    assert more.open_line and more.unfinished is None and more.end == 34 and more.lineno == 4


def test_the_stream_refuses_a_giant_line_and_a_tail_that_is_no_json(tmp_path, monkeypatch):
    import websailor.jsonio as jsonio

    f = tmp_path / "t.jsonl"
    f.write_bytes(b'{"id": 1}\n' + b"x" * 100 + b"\n")
    monkeypatch.setattr(jsonio, "MAX_LINE_BYTES", 64)
    with pytest.raises(jsonio.LineTooLongError, match="line 2 is longer than"):
        list(jsonio.JsonlStream(f, "a record").lines())
    monkeypatch.undo()
    f.write_bytes(b'{"id": 1}\nnot a record')
    with pytest.raises(InputFormatError, match="line 2 is not a record: is it the right file"):
        list(jsonio.JsonlStream(f, "a record").lines())
    f.write_bytes(b'{"id": 1}\n[1, 2]\n')
    with pytest.raises(InputFormatError, match="line 2 is not a record"):
        list(jsonio.JsonlStream(f, "a record").records())


def test_trailing_blanks_are_nothing_and_left_alone(tmp_path):
    from websailor.jsonio import read_jsonl

    f = tmp_path / "t.jsonl"
    f.write_bytes(b'{"id": 1}\n  ')
    assert read_jsonl(f, "a record") == ([(1, {"id": 1})], None)
    with appending(f, "a record") as (_, records):
        assert records == [(1, {"id": 1})]
    assert f.read_bytes() == b'{"id": 1}\n  '
    assert read_jsonl(tmp_path / "none.jsonl", "a record") == ([], None)
