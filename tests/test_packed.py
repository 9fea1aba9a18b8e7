"""Packed run files (``NAME.gz``, :mod:`websailor.packed`): a published run's large rollouts
read as if they were plain, by the viewer and by ``compare``; what a broken one gets."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from websailor.errors import InputFormatError
from websailor.packed import exists, pack, packed_twin, unpacked
from websailor.view import create_view_app, find_runs


def _traj(qid: str, question: str) -> dict:
    return {
        "id": qid,
        "rollout": 0,
        "question": question,
        "answer": {"answer": "Nile", "aliases": [], "parts": []},
        "prediction": "Nile",
        "termination": "answer",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": question}],
    }


def _eval_run(folder: Path, question: str, packed: bool) -> Path:
    folder.mkdir(parents=True)
    data = (json.dumps(_traj("q1", question)) + "\n").encode()
    if packed:
        packed_twin(folder / "trajectories.jsonl").write_bytes(pack(data))
    else:
        (folder / "trajectories.jsonl").write_bytes(data)
    from websailor.eval.scoring import Score

    score = Score("q1", 0, "em", True, 1.0, "Nile", None, None, None, "answer", 1, 2, 300, 40, 1.5)
    graded = (json.dumps(dataclasses.asdict(score)) + "\n").encode()
    if packed:  # a large evaluation's scores are packed too
        packed_twin(folder / "scores.jsonl").write_bytes(pack(graded))
    else:
        (folder / "scores.jsonl").write_bytes(graded)
    return folder


def test_a_packed_file_reads_as_its_plain_copy_made_once(tmp_path: Path):
    path = tmp_path / "rollouts.jsonl"
    assert unpacked(path) == path and not exists(path)  # neither form: the caller names the missing file
    records = "".join(json.dumps({"step": i, "reward": i / 10}) + "\n" for i in range(500)).encode()
    assert pack(records) == pack(records) and len(pack(records)) < len(records) / 3  # no time stamp
    packed_twin(path).write_bytes(pack(records))
    copy = unpacked(path)
    assert exists(path) and copy != path and copy.read_bytes() == records and copy.name == path.name
    made = copy.stat().st_mtime_ns
    assert unpacked(path) == copy and copy.stat().st_mtime_ns == made  # decompressed once
    packed_twin(path).write_bytes(pack(records[:100]))  # published again: a new copy
    os.utime(packed_twin(path), ns=(made + 10**9, made + 10**9))
    assert unpacked(path).read_bytes() == records[:100]
    path.write_bytes(b"plain\n")  # a plain file wins over its packed twin
    assert unpacked(path) == path


@pytest.mark.parametrize("body", [b"not gzip at all\n", gzip.compress(b'{"a": 1}\n' * 1000)[:60]])
def test_a_broken_packed_file_is_named(tmp_path: Path, body: bytes):
    path = tmp_path / "trajectories.jsonl"
    packed_twin(path).write_bytes(body)
    with pytest.raises(InputFormatError, match=r"trajectories.jsonl.gz is not a whole gzip file"):
        unpacked(path)
    assert not list((Path(os.environ["WEBSAILOR_HOME"]) / "cache" / "unpacked").rglob("trajectories.jsonl"))


def test_the_viewer_and_compare_read_a_packed_eval_run(tmp_path: Path):
    from websailor.eval.compare import check_same_questions

    plain = _eval_run(tmp_path / "plain", "Which river is longest?", packed=False)
    packed = _eval_run(tmp_path / "packed", "Which river is longest?", packed=True)
    assert {r.rel: r.kind for r in find_runs(tmp_path)} == {"plain": "eval", "packed": "eval"}
    client = TestClient(create_view_app(tmp_path))
    page = client.get("/eval/packed")
    assert page.status_code == 200 and "Which river is longest?" in page.text
    compared = client.get("/compare?a=plain&b=packed")
    assert compared.status_code == 200 and "different questions" not in compared.text
    check_same_questions(plain, packed)
    other = _eval_run(tmp_path / "other", "Which lake is deepest?", packed=True)
    with pytest.raises(Exception, match="different questions"):
        check_same_questions(plain, other)  # the packed run's texts are read, not skipped


def test_publish_packs_large_jsonl_and_replaces_the_other_form(tmp_path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "pipeline_common", Path(__file__).parents[1] / "experiments" / "pipeline_common.py"
    )
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    run, dest = tmp_path / "run", tmp_path / "pub"
    (run / "rl_model").mkdir(parents=True)
    big = "".join(json.dumps({"step": i, "text": f"rollout {i} " * 20}) + "\n" for i in range(12_000))
    assert len(big) >= common.PACK_BYTES
    (run / "rl_model" / "rollouts.jsonl").write_text(big)
    (run / "rl_model" / "rl_log.jsonl").write_text('{"step": 1}\n')
    size = common.publish(run, dest, ("rl_model/*.jsonl",))
    got = dest / "rl_model" / "rollouts.jsonl.gz"
    assert not (dest / "rl_model" / "rollouts.jsonl").exists() and (dest / "rl_model" / "rl_log.jsonl").exists()
    assert gzip.decompress(got.read_bytes()).decode() == big and size == got.stat().st_size + 12
    (run / "rl_model" / "rollouts.jsonl").write_text('{"step": 1}\n')  # smaller now: published plain
    common.publish(run, dest, ("rl_model/*.jsonl",))
    assert not got.exists() and (dest / "rl_model" / "rollouts.jsonl").read_text() == '{"step": 1}\n'


def test_a_packed_file_linked_out_of_its_run_folder_is_not_read(tmp_path: Path):
    from websailor.errors import InvalidArgumentError
    from websailor.view.discover import run_file

    secret = tmp_path / "secret.gz"
    secret.write_bytes(pack(b'{"id": "x"}\n'))
    run = _eval_run(tmp_path / "root" / "ev", "Which river is longest?", packed=False)
    (run / "trajectories.jsonl").unlink()
    packed_twin(run / "trajectories.jsonl").symlink_to(secret)
    with pytest.raises(InvalidArgumentError, match="symbolic link out of its run folder"):
        run_file(run, "trajectories.jsonl")


def test_a_bad_line_in_a_packed_file_names_the_packed_file(tmp_path: Path):
    import re

    from typer.testing import CliRunner

    from websailor.cli import app

    good = json.dumps(_traj("q1", "Which river is longest?"))
    run = _eval_run(tmp_path / "root" / "ev", "Which river is longest?", packed=True)
    packed_twin(run / "trajectories.jsonl").write_bytes(pack(f"{good}\nnot json\n".encode()))
    page = TestClient(create_view_app(tmp_path / "root")).get("/eval/ev")
    text = re.sub(r"\s+", " ", re.sub("<[^>]+>", " ", page.text))
    assert page.status_code == 422 and "ev/trajectories.jsonl.gz line 2 is not a trajectory record" in text
    assert "unpacked" not in text and os.environ["WEBSAILOR_HOME"] not in text
    plain = _eval_run(tmp_path / "plain", "Which river is longest?", packed=False)
    res = CliRunner().invoke(app, ["compare", str(plain), str(run)])
    assert res.exit_code == 2 and f"{run}/trajectories.jsonl.gz line 2" in res.output and "unpacked" not in res.output
