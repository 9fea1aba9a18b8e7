"""SailorFog-QA-V2 synthesis (in progress): attributes, the knowledge graph, subgraph sampling,
and the vagueness functions behind the uncertainty operators."""

from websailor.synth.constraints import Constraint, candidates, is_leak_free, is_supported, is_unique
from websailor.synth.attributes import Attributes, Quantity, parse_attributes
from websailor.synth.graph import KnowledgeGraph, build_knowledge_graph, load_or_build
from websailor.synth.sampling import has_cycle, sample_subgraph, structural_roles, topology_hash
from websailor.synth.vague import NameMask, Vague, mask_name, vague_number, vague_period

__all__ = ["Attributes", "Constraint", "KnowledgeGraph", "candidates", "is_leak_free", "is_supported", "is_unique", "NameMask", "Quantity", "Vague", "build_knowledge_graph", "has_cycle",
           "load_or_build", "mask_name", "parse_attributes", "sample_subgraph", "structural_roles", "topology_hash",
           "vague_number", "vague_period"]
