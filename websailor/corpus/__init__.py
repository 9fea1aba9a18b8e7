"""Corpora: ingest, document store, BM25 search and the entity-link graph."""

from websailor.corpus.build import CorpusBuildConfig, build_corpus, is_complete
from websailor.corpus.corpus import Corpus, SearchHit
from websailor.corpus.ingest import FORMATS
from websailor.corpus.linking import EntityLinker, Mention
from websailor.corpus.store import Document
from websailor.corpus.urls import title_to_url, url_to_title

__all__ = [
    "FORMATS",
    "Corpus",
    "CorpusBuildConfig",
    "Document",
    "EntityLinker",
    "Mention",
    "SearchHit",
    "build_corpus",
    "is_complete",
    "title_to_url",
    "url_to_title",
]
