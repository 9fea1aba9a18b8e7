"""The HTTP tool server: one process holds the index (and any cache) and serves the agent's
tools to many rollout workers; :func:`connect_tools` gives the workers :class:`RemoteTool` s
with the same names, schemas and observations as the local tools."""

from __future__ import annotations

from websailor.server.app import create_app, serve_tools
from websailor.server.client import RemoteTool, RetryPolicy, connect_tools

__all__ = ["RemoteTool", "RetryPolicy", "connect_tools", "create_app", "serve_tools"]
