"""websailor: the WebSailor-V2 pipeline for deep-research web agents (arXiv 2509.13305)."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed distribution's version (``pyproject.toml`` is the one place it is written).
    __version__ = version("websailor")
except PackageNotFoundError:  # a source tree on sys.path without an install
    __version__ = "0+unknown"
