import json
import os
import re
from pathlib import Path

import pytest
from fixtures import KiltSample, Wiki18Sample

from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus, is_complete
from websailor.corpus import build as build_mod
from websailor.errors import CorpusError


def test_vital_build_counts(vital: Corpus):
    assert len(vital) == 10033
    assert vital.meta["n_passages"] >= 10033
    assert vital.meta["n_links"] > 20000
    assert vital.meta["format"] == "vital" and vital.meta["complete"] is True


def test_wiki18_builds_and_searches(wiki18_sample: Wiki18Sample, tmp_path: Path):
    c = Corpus.open(build_corpus(CorpusBuildConfig(source=wiki18_sample.path, format="wiki18", out=tmp_path / "w")))
    assert len(c) == wiki18_sample.n_pages
    assert c.meta["n_passages"] == wiki18_sample.n_passages
    hits = c.search([wiki18_sample.query], k=3)[0]
    assert hits[0].title == wiki18_sample.title


def test_kilt_builds_and_searches(kilt_sample: KiltSample, tmp_path: Path):
    c = Corpus.open(build_corpus(CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")))
    assert len(c) == kilt_sample.n_pages
    hits = c.search([kilt_sample.query], k=3)[0]
    assert hits[0].title == kilt_sample.title
    assert kilt_sample.heading in c.get(kilt_sample.title).text


def test_reuse_unless_force(kilt_sample: KiltSample, tmp_path: Path):
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")
    out = build_corpus(cfg)
    stamp = json.loads((out / "meta.json").read_text())["built_at"], (out / "meta.json").stat().st_mtime_ns
    assert build_corpus(cfg) == out
    assert (out / "meta.json").stat().st_mtime_ns == stamp[1]
    cfg.force = True
    build_corpus(cfg)
    assert (out / "meta.json").stat().st_mtime_ns != stamp[1]
    # no temp or old dirs left (the build's lock file stays: filelock keeps it, so no waiter locks a removed file)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]


def test_interrupted_build_leaves_no_corpus(kilt_sample: KiltSample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod.EntityLinker, "link", boom)
    out = tmp_path / "k"
    with pytest.raises(KeyboardInterrupt):
        build_corpus(CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=out))
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [".k.lock"]  # no temporary directory left
    with pytest.raises(CorpusError, match="no corpus at"):
        Corpus.open(out)


def test_interrupted_rebuild_keeps_the_old_corpus(
    kilt_sample: KiltSample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")
    out = build_corpus(cfg)
    monkeypatch.setattr(build_mod.EntityLinker, "link", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk")))
    cfg.force = True
    with pytest.raises(RuntimeError):
        build_corpus(cfg)
    assert len(Corpus.open(out)) == kilt_sample.n_pages


def test_target_that_is_not_a_corpus_is_not_overwritten(tmp_path: Path, kilt_sample: KiltSample):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=out)
    with pytest.raises(CorpusError, match="is not a websailor corpus: refusing to write there, even with --force"):
        build_corpus(cfg)
    cfg.force = True
    with pytest.raises(CorpusError, match="refusing to write there"):
        build_corpus(cfg)
    assert (out / "notes.txt").read_text() == "precious"
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(CorpusError, match="is a file, not a corpus directory"):
        build_corpus(CorpusBuildConfig(source=cfg.source, format="kilt", out=tmp_path / "afile", force=True))
    assert (tmp_path / "afile").read_text() == "mine"
    with pytest.raises(CorpusError, match="a parent of it is a file"):
        build_corpus(CorpusBuildConfig(source=cfg.source, format="kilt", out=tmp_path / "afile" / "c"))


def test_reuse_checks_the_source(kilt_sample: KiltSample, generated_wiki18: Wiki18Sample, tmp_path: Path):
    from websailor.errors import InputFormatError

    out = build_corpus(CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k"))
    with pytest.raises(InputFormatError, match="does not exist"):
        build_corpus(CorpusBuildConfig(source=tmp_path / "missing.jsonl", format="kilt", out=out))
    with pytest.raises(CorpusError, match=f"already holds a corpus built from .*{re.escape(kilt_sample.path.name)}"):
        build_corpus(CorpusBuildConfig(source=generated_wiki18.path, format="wiki18", out=out))


def test_incomplete_corpus_needs_force(kilt_sample: KiltSample, tmp_path: Path):
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")
    out = build_corpus(cfg)
    (out / "meta.json").unlink()
    with pytest.raises(CorpusError, match="incomplete corpus .*pass --force"):
        build_corpus(cfg)
    cfg.force = True
    assert len(Corpus.open(build_corpus(cfg))) == kilt_sample.n_pages


def test_leftovers_of_killed_builds_are_cleaned(kilt_sample: KiltSample, tmp_path: Path):
    import subprocess

    dead = subprocess.run(["true"]).returncode or 999_999  # a pid that does not exist
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")
    out = build_corpus(cfg)
    # a kill between the two renames of a rebuild: the old corpus sits in .k.old-PID
    os.replace(out, tmp_path / f".k.old-{dead}")
    (tmp_path / f".k.tmp-{dead}").mkdir()
    assert build_corpus(cfg) == out and len(Corpus.open(out)) == kilt_sample.n_pages
    assert sorted(p.name for p in tmp_path.iterdir()) == [".k.lock", "k"]


def test_a_build_of_a_target_being_built_waits_and_reuses_it(kilt_sample: KiltSample, tmp_path: Path):
    """Two first runs at once: the second build of one target waits for the first's lock, then
    reuses the corpus the first renamed into place instead of replacing it under its readers."""
    import shutil
    import threading

    first = build_corpus(CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "first"))
    cfg = CorpusBuildConfig(source=kilt_sample.path, format="kilt", out=tmp_path / "k")
    got: list[Path] = []
    with build_mod._build_lock(cfg.out):  # another build holds it (flock: another open file, so this thread too)
        second = threading.Thread(target=lambda: got.append(build_corpus(cfg)))
        second.start()
        second.join(1.0)
        assert second.is_alive() and not cfg.out.exists()  # waiting, not building beside it
        shutil.copytree(first, cfg.out)  # what the first build puts in place
        store = (cfg.out / "store.sqlite").stat().st_ino
    second.join(60)
    assert got == [cfg.out] and (cfg.out / "store.sqlite").stat().st_ino == store  # reused, not rebuilt
    assert sorted(p.name for p in tmp_path.iterdir()) == [".first.lock", ".k.lock", "first", "k"]


def test_stop_word_only_pages_still_build(tmp_path: Path):
    src = tmp_path / "s.jsonl"
    src.write_text(
        json.dumps({"title": "a", "text": "the"}) + "\n" + json.dumps({"title": "Bee", "text": "a bee"}) + "\n"
    )
    c = Corpus.open(build_corpus(CorpusBuildConfig(source=src, format="jsonl", out=tmp_path / "c")))
    assert c.search(["bee"], k=5)[0][0].title == "Bee"


def _copy_corpus(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_open_reports_missing_or_corrupt_corpora(tmp_path: Path, vital_dir: Path):
    with pytest.raises(CorpusError, match="no corpus at .*websailor corpus build"):
        Corpus.open(tmp_path / "absent")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CorpusError, match="is a file"):
        Corpus.open(tmp_path / "afile")

    half = _copy_corpus(vital_dir, tmp_path / "half")
    (half / "meta.json").unlink()
    assert not is_complete(half)
    with pytest.raises(CorpusError, match="not a complete corpus .*interrupted build"):
        Corpus.open(half)

    bad_meta = _copy_corpus(vital_dir, tmp_path / "bad_meta")
    (bad_meta / "meta.json").write_bytes(b"{not json")
    with pytest.raises(CorpusError, match="meta.json is corrupt"):
        Corpus.open(bad_meta)

    bad_store = _copy_corpus(vital_dir, tmp_path / "bad_store")
    (bad_store / "store.sqlite").write_bytes(os.urandom(4096))
    with pytest.raises(CorpusError, match="altered after its build: store.sqlite has 4096 bytes"):
        Corpus.open(bad_store)

    no_index = _copy_corpus(vital_dir, tmp_path / "no_index")
    import shutil

    shutil.rmtree(no_index / "bm25")
    with pytest.raises(CorpusError, match="bm25 is missing"):
        Corpus.open(no_index)

    bad_index = _copy_corpus(vital_dir, tmp_path / "bad_index")
    for f in (bad_index / "bm25").iterdir():
        f.write_bytes(b"garbage")
    with pytest.raises(CorpusError, match="altered after its build: bm25/.* has 7 bytes"):
        Corpus.open(bad_index)

    # same size, other bytes: only the checksum can tell
    patched = _copy_corpus(vital_dir, tmp_path / "patched")
    with (patched / "store.sqlite").open("r+b") as fh:
        fh.seek(3000 * 4096)
        fh.write(os.urandom(4096))
    with pytest.raises(CorpusError, match="store.sqlite does not match its checksum"):
        Corpus.open(patched)
    assert len(Corpus.open(patched, verify=False)) == 10033  # size-only check passes ...
    with pytest.raises(CorpusError, match="corrupt"):  # ... and damage found later is still an error
        for q in ["Nile", "zebra", "Paris", "Mona Lisa", "quantum", "river", "empire", "music"]:
            Corpus.open(patched, verify=False).search([q], k=10)
            list(Corpus.open(patched, verify=False).iter_links())

    bad_count = _copy_corpus(vital_dir, tmp_path / "bad_count")
    meta = json.loads((bad_count / "meta.json").read_text())
    meta["n_passages"] = str(meta["n_passages"])
    (bad_count / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CorpusError, match="'n_passages' must be an integer"):
        Corpus.open(bad_count)
    with pytest.raises(CorpusError, match="must be a string or a Path, got int"):
        Corpus.open(5)
