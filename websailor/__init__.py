"""websailor: the WebSailor-V2 pipeline for deep-research web agents (arXiv 2509.13305)."""

__version__ = "0.1.0"
