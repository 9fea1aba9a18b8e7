"""Constructive trajectories: the expert-free cold start (``traj build``, the default source).

Each synthesized QA item keeps the procedure that solves it in the local environment
(search the first hop's description, read its page, ..., open the answer's page). Here that
procedure is replayed as an agent trajectory in the protocol: every tool call is executed for
real against the local tools, so each observation is the actual tool output, and every step
carries a short thought; the trajectory ends with the correct answer. No LLM is involved.

WebSailor-V2's agent learns to reduce uncertainty, not only to follow a search path, so a
trajectory checks its candidate before answering (``construction``, recorded in the record):

* ``verified``: the answer's page is opened to check a stated constraint (the thought quotes the
  question's phrase), and the final thought names every constraint its page confirmed. A check
  is claimed only when the constraint's evidence sentence is in the real observation.
* ``distractor`` (a share of items, drawn from the item's id): before the answer, a page named
  in what was read that fails a constraint (a node of the graph meeting all constraints but one
  when there is one) is visited for real and rejected, naming the constraint and what its
  page says; then the answer is checked as above.
* ``direct``: today's replay, when no constraint can be confirmed from the answer's page.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from websailor import __version__
from websailor.agent.prompt import system_prompt, tool_response
from websailor.agent.trajectory import ToolCallRecord, Trajectory
from websailor.errors import InputFormatError, InvalidArgumentError
from websailor.eval.grounding import choice_grounding
from websailor.log import get_logger
from websailor.synth.phrasing import statement
from websailor.text import fold_space
from websailor.tools import Tool, execute_tool
from websailor.tools.observation_parse import observation_body, search_results
from websailor.train.checks import Check, accepted, answer_checks, check_order, confirmed, name_check, rejection
from websailor.train.checks import rejected as rejected_words
from websailor.train.choices import names_whole, why_this_page

logger = get_logger(__name__)

#: The kinds of constructive trajectory, in the order they are reported.
CONSTRUCTIONS = ("direct", "verified", "distractor")
#: The share of items whose trajectory meets a wrong candidate first, by default in ``traj build``.
DEFAULT_DISTRACTOR_SHARE = 0.3
#: Candidate pages tried (visited) before giving up on a distractor.
_MAX_DISTRACTOR_TRIES = 6


class HopNotShown(InputFormatError):
    """A search step of the solution path whose results, under the run's observation settings
    (fewer results than synthesis replayed it with), do not show the page the next step opens:
    a trajectory would visit a page the agent was never shown."""


def _check_shown(item: dict, steps: list[dict], i: int, observation: str) -> None:
    """Raise :class:`HopNotShown` when step ``i`` is a search and the visit after it opens a
    URL its observation does not list."""
    nxt = steps[i + 1] if i + 1 < len(steps) else None
    if steps[i].get("action") == "search" and nxt is not None and nxt.get("action") == "visit":
        if f"({nxt['url']})" not in observation:
            raise HopNotShown(
                f"item {item.get('id')!r}: the search {steps[i]['query']!r} does not show {nxt['url']} under these "
                "observation settings"
            )


def _turn(thought: str, name: str, arguments: dict) -> str:
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<think>\n{thought}\n</think>\n<tool_call>\n{call}\n</tool_call>"


#: the longest question the opening search queries whole (the search tool cuts longer queries)
_MAX_QUESTION_QUERY = 500


def _asks_question(item: dict, question_query: bool) -> bool:
    """Whether the item's first step is an opening search that also queries the question's
    text: the option on, the first step a search, and a question that is neither blank, nor
    the clue itself, nor longer than the search tool takes whole."""
    question = str(item.get("question") or "")
    step = item["procedure"][0]
    return (
        question_query
        and step.get("action") == "search"
        and bool(question.strip())
        and len(question) <= _MAX_QUESTION_QUERY
        and fold_space(step["query"]) != fold_space(question)
    )


def _thought(
    step: dict,
    i: int,
    answer_title: str,
    question_query: bool = False,
    observations: list[str] = (),
    question: str = "",
) -> str:
    """The thought before step ``i``; ``question_query``: this step is the opening search of
    the question's text (:func:`_asks_question`). Before a visit, the thought says why that page
    from ``observations`` (what was read so far) and the ``question``
    (:func:`why_this_page`)."""
    if step["action"] == "search":
        if question_query:
            return f"I search the question in its own words, and its most specific clue: {step['query']}."
        lead = "I start with the most specific clue I can look up" if i == 0 else "Next I look up another clue"
        return f"{lead}: {step['query']}."
    why = why_this_page(step.get("url", ""), observations, question)
    if why:
        return f"{why} I open its page."
    if step.get("url", "").endswith("/" + answer_title.replace(" ", "_")):
        return f"The clues point to {answer_title}. I open its page to check the remaining conditions."
    return "One of the results looks like the entity described. I read its page for what it is linked to."


class _Replay:
    """A trajectory being built: each step runs its tool call for real."""

    def __init__(self, item: dict, tools: Mapping[str, Tool], rollout: int) -> None:
        self.item, self.tools = item, tools
        self.t0 = time.perf_counter()
        self.traj = Trajectory(
            id=str(item["id"]),
            rollout=rollout,
            question=item["question"],
            answer={"answer": item["answer"], "aliases": list(item.get("aliases") or []), "parts": None},
            model="constructive",
            env="local",
            version=__version__,
            level=item["level"] if isinstance(item.get("level"), int) else None,
        )
        self.traj.messages = [
            {"role": "system", "content": system_prompt(tools.values())},
            {"role": "user", "content": item["question"]},
        ]
        self.observations: list[str] = []
        #: the clue the opening search queried beside the question (``None``: no such opening)
        self.opening_clue: str | None = None

    def question_lists(self, url: str) -> bool:
        """Whether the opening search of the question's own text listed ``url``."""
        if self.opening_clue is None or not self.observations:
            return False
        return _question_lists(self.observations[0], self.item["question"], url)

    def no_fit(self) -> str:
        """Before the first visit after an opening search of the question: when that search
        did not list the answer's page (no result of it fits every clue; when it does, the
        trajectory takes the short path), the sentence saying so and that the most specific
        clue is followed; else ``""``."""
        if self.opening_clue is None or any(c.name == "visit" for c in self.traj.tool_calls) or not self.observations:
            return ""
        if self.question_lists(str(self.item.get("target_url") or "")):
            return ""
        return f"No result of my search for the question fits every clue, so I follow its most specific clue, '{self.opening_clue}'. "

    def visited(self, url: str) -> bool:
        """Whether a visit of this trajectory opened ``url``."""
        return any(c.name == "visit" and c.arguments.get("url") == url for c in self.traj.tool_calls)

    def step(self, thought: str, name: str, arguments: dict) -> str:
        if name == "visit":
            thought = self.no_fit() + thought
        t = time.perf_counter()
        result = execute_tool(self.tools, name, arguments)
        self.traj.tool_calls.append(ToolCallRecord(name, arguments, time.perf_counter() - t, result.error))
        self.traj.messages.append({"role": "assistant", "content": _turn(thought, name, arguments)})
        self.traj.messages.append({"role": "user", "content": tool_response(result.observation)})
        self.observations.append(result.observation)
        return result.observation

    def finish(self, thought: str, construction: str, notes: dict) -> Trajectory:
        answer = self.item["answer"]
        traj = self.traj
        traj.messages.append(
            {"role": "assistant", "content": f"<think>\n{thought}\n</think>\n<answer>{answer}</answer>"}
        )
        traj.prediction = answer
        traj.termination = "answer"
        traj.num_tool_calls = len(traj.tool_calls)
        traj.num_model_calls = len(traj.tool_calls) + 1
        traj.timings = {
            "total_s": time.perf_counter() - self.t0,
            "model_s": 0.0,
            "tools_s": sum(c.latency_s for c in traj.tool_calls),
        }
        traj.construction, traj.construction_notes = construction, notes
        return traj


def _question_lists(observation: str, question: str, url: str) -> bool:
    """Whether ``observation`` (a search's) lists ``url`` among the results of the query that is
    the question's own text."""
    asked = fold_space(question)
    return any(h.url == url for h in search_results(observation) if fold_space(h.query) == asked)


def _step_call(item: dict, step: dict, i: int, goal: str, question_query: bool = False) -> tuple[str, dict]:
    if step.get("action") == "search":
        if question_query:
            return "search", {"query": [item["question"], step["query"]]}
        return "search", {"query": [step["query"]]}
    if step.get("action") == "visit":
        return "visit", {"url": step["url"], "goal": goal}
    raise InputFormatError(f"item {item.get('id')!r} step {i + 1}: unknown action {step.get('action')!r}")


def _distractor_pool(item: dict, kg: Any, observations: list[str]) -> list[str]:
    """Wrong candidates a solver could meet: nodes of the graph meeting all constraints but
    one (``candidates`` on every subset that leaves one out), then the pages the hops link to
    and the titles of the search results, each named (as a whole word) in ``observations``; nearest misses
    first (fewest constraints failed), never the answer or a page already visited."""
    from websailor.synth.constraints import Constraint, candidates

    cs = [Constraint.from_dict(c) for c in item.get("constraints") or []]
    answer = item["answer"]
    seen: set[str] = set()
    for c in cs:
        for o in c.params.get("others") or ([c.params["other"]] if "other" in c.params else []):
            if o in kg:
                seen.update(kg.neighbors(o))
    for j in range(len(cs)):
        seen.update(candidates(kg, cs[:j] + cs[j + 1 :]))
    for obs in observations:
        seen.update(hit.title for hit in search_results(obs) if hit.title in kg)
    visited = {s.get("url") for s in item.get("procedure") or []}
    text = fold_space("\n".join(observation_body(o) for o in observations))
    pool = []
    for node in sorted(seen):
        if node == answer or kg.url(node) in visited or not names_whole(text, node):
            continue
        failed = sum(not c.matches(kg, node) for c in cs)
        if failed:
            pool.append((failed, node))
    return [n for _, n in sorted(pool)]


def wants_distractor(item_id: str, share: float) -> bool:
    """Whether the item's trajectory meets a wrong candidate first: a draw seeded by the item's
    id alone, so a rebuild or a resumed build makes the same choice."""
    return random.Random(f"distractor:{item_id}").random() < share


def constructive_trajectory(
    item: dict,
    tools: Mapping[str, Tool],
    rollout: int = 0,
    kg: Any = None,
    distractor: bool = False,
    verify: bool = True,
    question_query: bool = True,
) -> Trajectory:
    """Replay ``item["procedure"]`` through ``tools`` (``search`` and ``visit``) as a
    trajectory that ends with ``<answer>item["answer"]</answer>``.

    With ``verify`` the answer's page is opened to check a stated constraint (``verified``);
    with ``distractor`` (needs ``kg``, the corpus's knowledge graph) a wrong candidate is
    visited and rejected first (``distractor``). Where neither can be supported by a real
    observation the trajectory is today's replay (``direct``); ``construction_notes`` says why.

    Args:
        item: a QA item (``id``, ``question``, ``answer``, ``aliases``, ``procedure``, and
            ``constraints`` and ``target_url`` for the checks).
        tools: the local tools, by name (:func:`websailor.tools.build_local_tools`).
        rollout: recorded in the trajectory.
        kg: the knowledge graph the items were synthesized from
            (:func:`websailor.synth.graph.load_or_build`), for distractors.
        distractor: meet a wrong candidate first.
        verify: check a constraint on the answer's page.
        question_query: the first search also queries the question's own text, beside the
            path's first clue (recorded as ``construction_notes["opening"]`` ``question``; else
            ``clue``: the build's setting, also for an item whose question cannot be queried
            whole: blank, the clue itself, or too long for the search tool). A model taught
            this opening starts from what a question says, so the move carries over to
            questions that name no entity (issue 27's transfer check).

    Raises:
        InputFormatError: the item has no procedure, or a step is neither a search nor a visit.
        HopNotShown: a search of the path does not show the page the next step opens (with
            fewer search results than the item was synthesized with).
        InvalidArgumentError: ``distractor`` without ``kg``.
    """
    if not item.get("procedure"):
        raise InputFormatError(f"item {item.get('id')!r} has no solution procedure to replay")
    if distractor and kg is None:
        raise InvalidArgumentError("a distractor trajectory needs the knowledge graph (kg)")
    c = _Construction(item, tools, rollout, kg, distractor, verify, question_query)
    if c.checks:
        traj, ok = c.build(check=True)
        if ok:
            return traj
        why = traj.construction_notes
    else:
        why = {"unverified": "no_checkable_constraint"} if verify else {}
    traj, _ = c.build(check=False)
    traj.construction_notes = {**why, **(traj.construction_notes or {})}
    return traj


class _Construction:
    """One item's constructive trajectory being built (see :func:`constructive_trajectory`):
    the path up to the answer's page and a distractor (:meth:`_approach`), then the check on
    the answer's page (:meth:`_verified`) or today's replay of it (:meth:`_replayed`)."""

    def __init__(
        self,
        item: dict,
        tools: Mapping[str, Tool],
        rollout: int,
        kg: Any,
        distractor: bool,
        verify: bool,
        question_query: bool,
    ) -> None:
        self.item, self.tools, self.rollout, self.kg = item, tools, rollout, kg
        self.distractor, self.question_query = distractor, question_query
        self.steps: list[dict] = item["procedure"]
        self.answer, self.question = item["answer"], item["question"]
        self.target_url = item.get("target_url") or ""
        self.goal = f"what links this page to the entity asked about: {self.question}"
        # the answer's page: the last visit of its URL (every procedure ends there today); the
        # distractor and the check come just before it, and any later steps after it
        self.last = max(
            (i for i, s in enumerate(self.steps) if s.get("action") == "visit" and s.get("url") == self.target_url),
            default=None,
        )
        self.before = self.steps if self.last is None else self.steps[: self.last]
        self.checks = check_order(item) if verify and self.target_url else []
        # the opening search also queries the question's text (when it can: see _asks_question)
        self.opening = _asks_question(item, question_query)

    def build(self, check: bool) -> tuple[Trajectory, bool]:
        """The trajectory, with the check on the answer's page (``check``) or without; the
        flag is false when the check found nothing to confirm (the trajectory then only
        carries its notes)."""
        r, notes, rejected, lead = self._approach()
        if check:
            return self._verified(r, notes, rejected, lead)
        return self._replayed(r, notes, rejected, lead), True

    def _approach(self) -> tuple[_Replay, dict, tuple[str, Check] | None, str]:
        """Replay the path up to the answer's page and meet the distractor: the replay, the
        notes so far, the rejected candidate (``None``: none) and the thought that leads to the
        answer's page."""
        item, steps, answer, question = self.item, self.steps, self.answer, self.question
        r = _Replay(item, self.tools, self.rollout)
        r.opening_clue = steps[0]["query"] if self.opening else None
        for i, step in enumerate(self.before):
            obs = r.step(
                _thought(step, i, answer, self.opening and i == 0, r.observations, question),
                *_step_call(item, step, i, self.goal, self.opening and i == 0),
            )
            if i == 0 and self.last is not None and r.question_lists(self.target_url):
                break  # the short path: the question's own search lists the answer, the hops are skipped
            _check_shown(item, steps, i, obs)
        notes: dict = {"opening": "question" if self.question_query else "clue"}
        rejected = _meet_distractor(r, item, self.kg, self.tools, self.goal) if self.distractor else None
        if self.distractor and isinstance(rejected, str):
            notes["no_distractor"], rejected = rejected, None
        why = why_this_page(self.target_url, r.observations, question, from_question=r.question_lists(self.target_url))
        lead = why or f"The clues point to {answer}."
        if rejected:
            node, failed = rejected
            notes["rejected"] = {"title": node, "failed": failed.constraint["phrase"]}
            lead = f"{rejected_words(node, failed)} " + (
                f"Another candidate: {why}" if why else f"Another candidate, {answer}, fits the clues."
            )
        return r, notes, rejected, lead

    def _check_goal(self, c: dict) -> dict:
        return {
            "url": self.target_url,
            "goal": f"check that {statement(c, self.answer)}; the question: {self.question}",
        }

    def _verified(self, r: _Replay, notes: dict, rejected: Any, lead: str) -> tuple[Trajectory, bool]:
        """Open the answer's page to check the first constraint it shows, then the steps after
        it and the answer naming every constraint confirmed; ``(notes only, False)`` when the
        page confirms none."""
        item, answer, checks, target_url = self.item, self.answer, self.checks, self.target_url
        kind = "distractor" if rejected else "direct"
        # the constraint the check is about: the first whose visit (its goal names it) shows it
        earlier = "\n".join(r.observations)
        first = next(
            (
                c
                for c in checks
                if confirmed(c, execute_tool(self.tools, "visit", self._check_goal(c)).observation, target_url, earlier)
            ),
            None,
        )
        shown_ = []
        if first is not None:
            obs = r.step(
                f'{lead} Before answering I check on its own page that "{statement(first, "it")}".',
                "visit",
                self._check_goal(first),
            )
            shown_ = [(c, s) for c in checks if (s := confirmed(c, obs, target_url, earlier))]
            shown_.sort(key=lambda cs: cs[0] is not first)  # the one it set out to check first
        if not shown_:
            values = [c for c in checks if c["kind"] != "linked"]
            return r.finish("", kind, {"unverified": "evidence_not_shown" if values else "links_not_on_page"}), False
        rest = [] if self.last is None else self.steps[self.last + 1 :]
        for i, step in enumerate(rest, len(self.before) + 1):
            r.step(
                _thought(step, i, answer, False, r.observations, self.question), *_step_call(item, step, i, self.goal)
            )  # i > 0
        urls = {n["title"]: n.get("url") for n in (item.get("subgraph") or {}).get("nodes") or []}
        hops = [c["params"]["other"] for c in item.get("constraints") or [] if c["kind"] == "linked"]
        hops = [h for h in hops if not any(c.get("params", {}).get("other") == h for c, _ in shown_)]
        hops = [h for h in hops if r.visited(urls.get(h, ""))]  # only pages it read led it there
        via = ""
        if hops:
            pages = hops[0] if len(hops) == 1 else ", ".join(hops[:-1]) + " and " + hops[-1]
            via = f" The page{'s' if len(hops) > 1 else ''} of {pages} led me to it."
        notes["checked"] = [c["phrase"] for c, _ in shown_]
        thought = accepted(answer, answer_checks(item, shown_), via)
        return r.finish(thought, "distractor" if rejected else "verified", notes), True

    def _replayed(self, r: _Replay, notes: dict, rejected: Any, lead: str) -> Trajectory:
        """Today's replay of the answer's page (read for the question) and the generic
        conclusion (the constraints that name it, if any)."""
        item, answer, before = self.item, self.answer, self.before
        for i, step in enumerate(self.steps[len(before) :], len(before)):
            t = _thought(step, i, answer, False, r.observations, self.question)  # the answer's page: a visit
            if rejected and i == len(before):
                t = f"{lead} I open its page to check the remaining conditions."
            r.step(t, *_step_call(item, step, i, self.goal))
        names = [name_check(c, answer) for c in item.get("constraints") or [] if c["kind"] == "name"]
        conclusion = (
            accepted(answer, names)
            if names
            else f"The clues led me to {answer}; its page shows none of the conditions to check, so I answer {answer}."
        )
        if rejected and self.last is None:  # no page of the answer to open: the rejection goes here
            conclusion = f"{lead} {conclusion}"
        return r.finish(conclusion, "distractor" if rejected else "direct", notes)


def _meet_distractor(r: _Replay, item: dict, kg: Any, tools: Mapping[str, Tool], goal: str) -> tuple[str, Check] | str:
    """Visit a wrong candidate (:func:`_distractor_pool`; on the short path, a result of the
    question's own search ranked above the answer first) whose page shows a constraint it
    fails, as a step of ``r``: ``(title, the failed check)``, or why none was
    (``no_wrong_candidate``: no page named in what was read fails a constraint;
    ``no_rejectable_page``: none of those tried shows the failure on its page)."""
    pool = _distractor_pool(item, kg, r.observations)
    if not pool:
        return "no_wrong_candidate"
    near = pool[: _MAX_DISTRACTOR_TRIES * 2]
    random.Random(f"distractor-pick:{item['id']}").shuffle(near)  # among the nearest misses, the draw decides
    target_url = str(item.get("target_url") or "")
    if r.question_lists(target_url):  # the short path: first the question's results ranked above the answer
        asked = fold_space(item["question"])
        hits = [h for h in search_results(r.observations[0]) if fold_space(h.query) == asked]
        rank = next(h.rank for h in hits if h.url == target_url)
        above = [h.title for h in sorted(hits, key=lambda h: h.rank) if h.rank < rank and h.title in pool]
        near = above + [n for n in near if n not in above]
    for node in near[:_MAX_DISTRACTOR_TRIES]:
        arguments = {"url": kg.url(node), "goal": goal}
        probe = execute_tool(tools, "visit", arguments)
        why = rejection(item, kg, node, probe.observation) if probe.error is None else None
        if why:
            reason = why_this_page(arguments["url"], r.observations, r.item["question"])
            r.step(
                f"{reason or f'{node}, named in what I have read, could be the entity asked about.'} "
                "I open its page to check it against the question.",
                "visit",
                arguments,
            )
            return node, why
    return "no_rejectable_page"


def build_constructive(
    items: list[dict],
    tools: Mapping[str, Tool],
    out,
    split: str = "train",
    progress: bool = True,
    transform=None,
    source: str = "constructive",
    distractor_share: float = 0.0,
    kg: Any = None,
    verify: bool = True,
    question_query: bool = True,
) -> tuple[int, int]:
    """Append a constructive trajectory for every item of ``split`` (``train``, ``test`` or
    ``all``) to ``out``, skipping items already there (resumable; the file is locked while
    written). ``transform`` (optional) edits each trajectory before it is written, e.g.
    short-CoT reconstruction; ``source`` is the trajectories' ``model`` field after it, and
    ``out`` must hold no other source's. ``distractor_share`` of the items (drawn from each
    item's id, :func:`wants_distractor`; ``traj build`` uses :data:`DEFAULT_DISTRACTOR_SHARE`)
    meet a wrong candidate first; ``kg`` is the corpus's knowledge graph they need
    (:func:`websailor.synth.graph.load_or_build`). ``question_query``: the opening search
    also queries the question's text (:func:`constructive_trajectory`); ``out`` must hold
    trajectories of the same opening. Items whose path a search does not show
    under the tools' observation settings (:class:`HopNotShown`) are left out, with a warning
    (a rerun tries them again, with the same outcome). Returns ``(written, skipped)``.

    Raises:
        InputFormatError: no item in that split, an item without a procedure, or ``out``
            holding lines that are not trajectory records.
        InvalidArgumentError: ``out`` holds trajectories of another source or another opening;
            ``distractor_share`` outside [0, 1], or above 0 without ``kg``.
    """
    from functools import partial

    from websailor.agent.runner import append_new_trajectories

    check_distractor_share(distractor_share)
    if distractor_share > 0 and kg is None:
        raise InvalidArgumentError("distractor_share above 0 needs the knowledge graph (kg)")
    chosen = [it for it in items if split == "all" or it.get("split") == split]
    if not chosen:
        raise InputFormatError(f"no QA items in split {split!r}")
    check_opening(Path(out), "question" if question_query else "clue")
    not_shown: list[str] = []
    ungrounded: list[str] = []

    def make(it: dict) -> Trajectory | None:
        try:
            traj = constructive_trajectory(
                it,
                tools,
                kg=kg,
                distractor=wants_distractor(str(it["id"]), distractor_share),
                verify=verify,
                question_query=question_query,
            )
        except HopNotShown:
            not_shown.append(str(it["id"]))
            return None
        if not all(c["grounded"] for c in choice_grounding(traj.messages)):
            ungrounded.append(str(it["id"]))  # a page opened for no reason that was read: never taught
            return None
        return traj

    makers = [(str(it["id"]), partial(make, it)) for it in chosen]
    written, skipped = append_new_trajectories(
        Path(out), makers, "constructive trajectories", progress, transform, source
    )
    if not_shown:
        logger.warning(
            "%d of %d items left out: a search of their solution path does not show the page the next step "
            "opens under these observation settings (e.g. %s); synthesize with the same observation settings "
            "(the CLI replays every path; a library call without tools does not)",
            len(not_shown),
            len(chosen),
            not_shown[0],
        )
    if ungrounded:
        logger.warning(
            "%d of %d items refused: a visit of their trajectory has no reason in what was read before it (no "
            "search listed the page and no quoted line names it; e.g. %s)",
            len(ungrounded),
            len(chosen),
            ungrounded[0],
        )
    return written - len(not_shown) - len(ungrounded), skipped


def check_opening(out: Path, opening: str) -> None:
    """Raise :class:`InvalidArgumentError` when ``out`` holds constructive trajectories whose
    opening search (``construction_notes["opening"]``; ``clue`` for records from before it was
    recorded) is not ``opening``: one SFT file teaches one first move."""
    from websailor.jsonio import read_appended_jsonl

    if not out.is_file():
        return
    for line, rec in read_appended_jsonl(out, "a trajectory record"):
        if not rec.get("construction"):  # not a constructive record (another source is refused elsewhere)
            continue
        notes = rec.get("construction_notes") or {}
        if not isinstance(notes, dict):
            raise InputFormatError(f"{out} line {line}: construction_notes is {type(notes).__name__}, not an object")
        theirs = notes.get("opening", "clue")
        if theirs not in ("question", "clue"):
            raise InputFormatError(f"{out} line {line}: opening {theirs!r} is neither 'question' nor 'clue'")
        if theirs != opening:
            flag = "--question-query" if theirs == "question" else "--no-question-query"
            raise InvalidArgumentError(
                f"{out} holds constructive trajectories whose first search is the {theirs!r} opening (line {line}), "
                f"not {opening!r}: build with {flag} to resume it, or write to another file"
            )


def check_distractor_share(share: float) -> None:
    """Raise :class:`InvalidArgumentError` unless ``share`` is in [0, 1]."""
    if not (isinstance(share, (int, float)) and 0.0 <= share <= 1.0):
        raise InvalidArgumentError(f"distractor_share must be in [0, 1], got {share!r}")
