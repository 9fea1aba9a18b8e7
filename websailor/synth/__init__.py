"""SailorFog-QA-V2 synthesis (WebSailor-V2, arXiv 2509.13305, section 3): typed attributes,
the knowledge graph, subgraph sampling, the uncertainty operators, item building and
rendering, verification, the LLM writer, the dataset loop and the difficulty filter.

A minimal run::

    from websailor.corpus import Corpus
    from websailor.synth import SynthConfig, load_or_build, synthesize
    from websailor.tools import build_local_tools
    corpus = Corpus.open()
    kg = load_or_build(corpus)                 # built once, cached in the corpus
    synthesize(kg, "qa.jsonl", SynthConfig(n=100, seed=0, levels="1-4"), tools=build_local_tools(corpus))
"""

from websailor.synth.attributes import Attributes, Quantity, parse_attributes
from websailor.synth.constraints import Constraint, candidates, is_leak_free, is_supported, is_unique
from websailor.synth.dataset import SynthConfig, dataset_report, parse_levels, read_items, synthesize
from websailor.synth.difficulty import DifficultyConfig, DifficultyFilter
from websailor.synth.graph import KnowledgeGraph, build_knowledge_graph, load_or_build
from websailor.synth.items import aliases_of, build_item
from websailor.synth.levels import LEVELS, ItemConfig, Level
from websailor.synth.phrasing import render, type_word
from websailor.synth.replay import PathReplayer, replay_procedure
from websailor.synth.sampling import has_cycle, sample_subgraph, structural_roles, topology_hash
from websailor.synth.vague import NameMask, Vague, bare_name, mask_name, vague_number, vague_period
from websailor.synth.writer import write_question

__all__ = [
    "Attributes",
    "Constraint",
    "DifficultyConfig",
    "DifficultyFilter",
    "ItemConfig",
    "KnowledgeGraph",
    "LEVELS",
    "Level",
    "NameMask",
    "PathReplayer",
    "Quantity",
    "SynthConfig",
    "Vague",
    "aliases_of",
    "bare_name",
    "build_item",
    "build_knowledge_graph",
    "candidates",
    "dataset_report",
    "has_cycle",
    "is_leak_free",
    "is_supported",
    "is_unique",
    "load_or_build",
    "mask_name",
    "parse_attributes",
    "parse_levels",
    "read_items",
    "render",
    "replay_procedure",
    "sample_subgraph",
    "structural_roles",
    "synthesize",
    "topology_hash",
    "type_word",
    "vague_number",
    "vague_period",
    "write_question",
]
