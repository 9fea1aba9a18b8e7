"""The real-web environment: search, scholar and page-reading providers behind the tool
execution layer (:mod:`websailor.tools.web.executor`), configured by :class:`WebSettings`."""

from websailor.tools.web.settings import WebSettings, load_web_settings
from websailor.tools.web.tools import WebScholarTool, WebSearchTool, WebVisitTool, build_web_tools

__all__ = ["WebScholarTool", "WebSearchTool", "WebSettings", "WebVisitTool", "build_web_tools", "load_web_settings"]
