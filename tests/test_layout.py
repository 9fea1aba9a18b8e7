"""The package's layering, checked on real imports in a fresh interpreter: the tool protocol
loads no back end and no corpus, the judge and the extractors no agent, the sandbox no tool;
every module imports on its own (no circular imports); the old import paths a user may have
(``websailor.tools.SearchTool``, ``websailor.eval.load_benchmark``) still resolve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(module: str) -> set[str]:
    """The ``websailor`` modules a fresh interpreter holds after importing ``module``."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(m for m in sys.modules if m.startswith('websailor'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("websailor.tools", ("websailor.corpus", "websailor.agent", "websailor.tools.local", "websailor.tools.web")),
        ("websailor.tools.base", ("websailor.corpus", "websailor.agent", "websailor.models")),
        ("websailor.tools.search", ("websailor.corpus",)),
        ("websailor.tools.visit", ("websailor.corpus",)),
        ("websailor.judge.llm", ("websailor.agent", "websailor.tools")),
        ("websailor.tools.extract", ("websailor.agent",)),
        ("websailor.sandbox", ("websailor.tools", "websailor.agent", "websailor.corpus")),
        ("websailor.text", ("websailor.corpus", "websailor.tools")),
        ("websailor.questions", ("websailor.agent", "websailor.eval", "websailor.tools")),
    ],
)
def test_layers_do_not_reach_up(module: str, forbidden: tuple[str, ...]):
    loaded = _loaded_after(module)
    reached = sorted(m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert not reached, f"importing {module} loads {reached}"


def test_every_module_imports_on_its_own():
    """Each module imported first in a clean ``websailor`` namespace: an import cycle shows up
    as an ImportError for some order, so every module gets to be first once."""
    code = """
import importlib, json, pkgutil, sys, traceback
import websailor
names = sorted(m.name for m in pkgutil.walk_packages(websailor.__path__, "websailor.") if not m.name.endswith("__main__"))
failed = {}
for name in names:
    for m in [m for m in sys.modules if m == "websailor" or m.startswith("websailor.")]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps({"n": len(names), "failed": failed}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["n"] > 80 and not result["failed"], result["failed"]


def test_earlier_import_paths_still_resolve():
    import websailor.eval as ev
    import websailor.tools as tools
    from websailor.questions import Question, load_questions
    from websailor.tools.local import SearchTool, VisitTool, build_local_tools

    assert (tools.SearchTool, tools.VisitTool, tools.build_local_tools) == (SearchTool, VisitTool, build_local_tools)
    assert (ev.load_benchmark, ev.EvalItem) == (load_questions, Question)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        tools.Nothing  # noqa: B018


def test_one_version_from_the_package_metadata():
    from importlib.metadata import version

    import websailor

    assert websailor.__version__ == version("websailor")
