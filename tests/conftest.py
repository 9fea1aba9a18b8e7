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
    return build_corpus(
        CorpusBuildConfig(source=shared_data / "vital_articles_en.json", format="vital", out=out, show_progress=False)
    )


@pytest.fixture(scope="session")
def vital(vital_dir: Path) -> Corpus:
    return Corpus.open(vital_dir)


MODEL_CACHE = Path(__file__).resolve().parent / ".cache"


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The embedded SmolLM2-135M-Instruct, fetched and converted once into tests/.cache
    (about 30 s the first time, then reused by later runs)."""
    import os

    from websailor.models.embedded import ensure_smollm2

    old = os.environ.get("WEBSAILOR_HOME")
    os.environ["WEBSAILOR_HOME"] = str(MODEL_CACHE)
    try:
        return ensure_smollm2()
    finally:
        if old is None:
            os.environ.pop("WEBSAILOR_HOME", None)
        else:
            os.environ["WEBSAILOR_HOME"] = old


@pytest.fixture(scope="session")
def smollm2(smollm2_path: Path):
    from websailor.models.hf import TransformersModel

    return TransformersModel(smollm2_path, name="smollm2")
