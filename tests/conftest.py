"""Shared fixtures. Real sample data is read in place from ../shared/data (never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"shared test data not found at {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the user's ~/.cache/websailor."""
    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="session")
def vital_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 10,033-page vital-articles corpus, built once per session (about 5 s)."""
    out = tmp_path_factory.mktemp("corpora") / "vital"
    return build_corpus(CorpusBuildConfig(source=shared_data / "vital_articles_en.json", format="vital",
                                          out=out, show_progress=False))


@pytest.fixture(scope="session")
def vital(vital_dir: Path) -> Corpus:
    return Corpus.open(vital_dir)
