"""SailorFog-QA-V2 synthesis (in progress): attributes, the knowledge graph, subgraph sampling."""

from websailor.synth.attributes import Attributes, Quantity, parse_attributes
from websailor.synth.graph import KnowledgeGraph, build_knowledge_graph, load_or_build
from websailor.synth.sampling import has_cycle, sample_subgraph, structural_roles, topology_hash

__all__ = ["Attributes", "KnowledgeGraph", "Quantity", "build_knowledge_graph", "has_cycle", "load_or_build",
           "parse_attributes", "sample_subgraph", "structural_roles", "topology_hash"]
