"""Replaying an item's solution path through the real local tools, at synthesis time.

Every step of ``item["procedure"]`` is run with the simulated environment's ``search`` and
``visit`` (:func:`websailor.tools.build_local_tools`), the same tools an agent and the
constructive trajectories (:mod:`websailor.train.constructive`) use:

* a ``search`` step holds when its ``expect`` URL is among the results of its ``query``;
* a ``visit`` step holds when the page is found and the observation contains each name in the
  step's ``mentions`` (the name, its URL, or the step's evidence sentence);
* the path reaches the answer when, besides, a page visited before the answer's names the
  answer (or, for a one-search lookup, the search returns the answer's page) and the last step
  opens the answer's page.

SailorFog-QA-V2 keeps, for each question, the procedure that solves it (WebSailor-V2 section
3); this check is what makes "solvable in the environment" a property of every stored item
rather than of its first hop. Observations are cached by call, since candidates share pages.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from websailor.corpus.urls import title_to_url
from websailor.text import fold_space
from websailor.tools.base import Tool

#: the goal a replayed visit reads a page for (the goal of the constructive trajectories)
GOAL = "what links this page to the entity asked about: {question}"


class PathReplayer:
    """Replays procedures through ``tools`` (``search`` and ``visit`` by name), caching up to
    ``cache_size`` observations.

    Raises:
        ValueError: ``tools`` lacks ``search`` or ``visit``.
    """

    def __init__(self, tools: Mapping[str, Tool], cache_size: int = 4096) -> None:
        missing = [name for name in ("search", "visit") if name not in tools]
        if missing:
            raise ValueError(f"replaying a solution path needs the tools search and visit; missing {missing}")
        self.tools = tools
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, str] = OrderedDict()
        self.calls = 0  # tool calls actually made (cache misses)

    def _call(self, name: str, arguments: dict, key: tuple) -> str:
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        self.calls += 1
        observation = str(self.tools[name](arguments))
        self._cache[key] = observation
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return observation

    def __call__(self, item: dict) -> tuple[bool, str]:
        """``(True, "")`` when the item's procedure reaches its answer, else ``(False, why)``
        with the first step that fails (1-based) and what it missed."""
        steps = item.get("procedure") or []
        target_url, answer = item["target_url"], item["answer"]
        if not steps:
            return False, "no procedure"
        if steps[-1].get("action") != "visit" or steps[-1].get("url") != target_url:
            return False, f"the last step does not open the answer's page {target_url}"
        goal = GOAL.format(question=item["question"])
        reached = False
        # searches first: they are the cheaper calls and the likelier to fail
        order = sorted(enumerate(steps, 1), key=lambda s: s[1].get("action") != "search")
        for i, step in order:
            action = step.get("action")
            if action == "search":
                query = step.get("query") or ""
                if not query.strip():
                    return False, f"step {i}: empty search"
                observation = self._call("search", {"query": [query]}, ("search", query))
                if step.get("expect") not in observation:
                    return False, f"step {i}: searching {query!r} does not return {step.get('expect')}"
                reached = reached or step.get("expect") == target_url
            elif action == "visit":
                url = step.get("url") or ""
                observation = self._call("visit", {"url": url, "goal": goal}, ("visit", url, goal))
                if not observation.startswith("Page ") or "could not be found" in observation[:300]:
                    return False, f"step {i}: the page {url} is not in the corpus"
                seen = fold_space(observation)
                for name in step.get("mentions") or []:
                    if not _mentioned(name, step, seen):
                        return False, f"step {i}: the page {url} does not mention {name!r}"
                if i < len(steps) and (answer in (step.get("mentions") or []) or _mentioned(answer, {}, seen)):
                    reached = True
            else:
                return False, f"step {i}: unknown action {action!r}"
        if not reached:
            return False, "no step before the last finds the answer's page or a page that names it"
        return True, ""


def _mentioned(name: str, step: dict, seen: str) -> bool:
    """The name, its URL, or the step's evidence sentence (which mentions it, perhaps by
    another form such as "da Vinci") is in the observation."""
    if fold_space(name) in seen or fold_space(title_to_url(name)) in seen:
        return True
    evidence = fold_space(step.get("evidence") or "")
    return bool(evidence) and evidence in seen


def replay_procedure(item: dict, tools: Mapping[str, Tool]) -> tuple[bool, str]:
    """Replay ``item["procedure"]`` through ``tools`` once (see :class:`PathReplayer`, which
    caches across items). Returns ``(reached, why_not)``.

    Raises:
        ValueError: ``tools`` lacks ``search`` or ``visit``.
    """
    return PathReplayer(tools)(item)
