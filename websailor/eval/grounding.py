"""Why an agent fails: whether its answer came from what it read, whether the answer's page was
within its reach, and whether its checks can say no.

Accuracy alone does not tell a user where a research agent goes wrong. These figures, read from
a rollout's messages and its gold answer, do (issue 38):

* ``grounded``: the final answer appears (normalized, as whole words) in an observation read
  before the agent first named it (in a thought, a tool call or the answer), not counting the
  lines that echo the agent's own queries and goals. An ungrounded answer was chosen from the
  model's memory or made up, even when the agent then opened its page.
* ``listed``: a search listed a page whose title is a gold form (its bare title: "Mercury
  (planet)" lists "Mercury"); ``visited``: such a page was opened; ``picked``: of the rollouts
  whose search listed it, the final answer is a gold form. Listed but not picked is a failure
  to choose; never listed is a failure to search.
* ``checks`` and ``rejections``: the thoughts right after a page was read that state a verdict
  on it (it fits, confirms, matches; or it does not fit, is not the answer, is ruled out; words
  in quotation marks are the page's, not the verdict), and how many of those say no. A checker
  that never rejects is not checking.

The verdict is read from the thought's words (:data:`REJECT` and :data:`ACCEPT`), so it is an
estimate for free-form models; the constructive trajectories (:mod:`websailor.train.constructive`)
write their verdicts in these words.
"""

from __future__ import annotations

import re
from typing import Any

from websailor.agent.parse import parse_turn
from websailor.judge.em import normalize_answer
from websailor.judge.gold import Gold
from websailor.tools.observation_parse import bare_title, observation_body, pages_read, search_results, title_from_url

#: a thought that rejects the candidate whose page it just read
REJECT = re.compile(
    r"\b(?:is not (?:the|our) (?:answer|one|entity)|does(?: not|n't) (?:fit|match)|"
    r"(?:can ?not|cannot|could not) be (?:the|our) (?:answer|one|entity)|rule[sd]? (?:it |this |that )?out|"
    r"reject(?:ed|s)?|not (?:a|the) match)\b",
    re.I,
)
#: a thought that accepts it
ACCEPT = re.compile(r"\b(?:fits|confirms?|confirmed|matches|is the (?:answer|one|entity))\b", re.I)
#: quoted text: what a page says, not the agent's verdict
_QUOTED = re.compile(r'"[^"]*"|\u201c[^\u201d]*\u201d')

#: the per-rollout fields, in the order a report shows them
FIELDS = ("answered", "grounded", "listed", "visited", "picked", "checks", "rejections")


def _norm(text: str) -> str:
    return normalize_answer(text)


def _contains(haystack: str, needle: str) -> bool:
    """Whether normalized ``needle`` is whole words of normalized ``haystack`` (both already
    normalized)."""
    return bool(needle) and f" {needle} " in f" {haystack} "


def rollout_grounding(messages: list[dict], prediction: str | None, gold: Gold | None) -> dict[str, Any]:
    """The grounding figures of one rollout (see the module docstring).

    Args:
        messages: the rollout's chat (system, question, then assistant turns and the tool
            responses that answer them).
        prediction: the final answer (``None``: none given).
        gold: the question's gold answer (``None``: ungraded question; ``listed``,
            ``visited`` and ``picked`` are then ``None``).

    Returns:
        ``answered`` (bool); ``grounded`` (bool, ``None`` without an answer); ``listed``,
        ``visited`` (bool, ``None`` without a gold answer); ``picked`` (bool, ``None`` unless
        listed); ``checks`` and ``rejections`` (counts).
    """
    observations: list[str] = []  # what the tools found, in order
    forms = {_norm(f) for f in gold.forms} - {""} if gold is not None else set()
    listed = visited = False
    listed_urls: set[str] = set()
    checks = rejections = 0
    after_visit = False
    answer = _norm(prediction) if prediction else ""
    grounded: bool | None = None  # decided at the first assistant turn that names the answer
    for m in messages[2:]:
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        if m.get("role") == "user":
            pages = pages_read(content)
            after_visit = bool(pages)
            for hit in search_results(content):
                if forms & {_norm(hit.title), _norm(bare_title(hit.title))}:
                    listed = True
                    listed_urls.add(hit.url)
            if forms and any(u in listed_urls or _norm(bare_title(title_from_url(u))) in forms for u in pages):
                visited = True
            observations.append(observation_body(content))
            continue
        if m.get("role") != "assistant":
            continue
        if answer and grounded is None and _contains(_norm(content), answer):
            grounded = _contains(_norm("\n".join(observations)), answer)
        if after_visit:
            thought = _QUOTED.sub(" ", parse_turn(content).thought)
            if REJECT.search(thought):
                checks, rejections = checks + 1, rejections + 1
            elif ACCEPT.search(thought):
                checks += 1
            after_visit = False
    if answer and grounded is None:  # an answer given outside the chat's turns: all that was read
        grounded = _contains(_norm("\n".join(observations)), answer)
    return {
        "answered": bool(answer),
        "grounded": grounded,
        "listed": listed if gold is not None else None,
        "visited": visited if gold is not None else None,
        "picked": (answer in forms) if listed else None,
        "checks": checks,
        "rejections": rejections,
    }


def record_gold(rec: dict) -> Gold | None:
    """The gold answer of a trajectory record, or ``None`` where its ``answer`` is missing or
    does not parse (an ungraded question)."""
    try:
        return Gold.parse(rec.get("answer"))
    except (ValueError, TypeError):
        return None


def record_grounding(rec: dict) -> dict[str, Any]:
    """:func:`rollout_grounding` of a trajectory record (its ``messages``, ``prediction`` and
    gold answer, :func:`record_gold`); ``{}`` for a record of another task than question
    answering (a report)."""
    if rec.get("task", "qa") != "qa":
        return {}
    messages = rec.get("messages")
    return rollout_grounding(messages if isinstance(messages, list) else [], rec.get("prediction"), record_gold(rec))


def describe_grounding(g: dict[str, Any]) -> str:
    """One rollout's grounding figures (:func:`rollout_grounding`) in words, as the viewer
    shows them under its answer: ``the answer appears in what the agent read before giving it;
    a search listed the answer's page, visited, picked; 2 checks of a page read, 1 rejecting``.
    ``""`` for ``{}`` (a report)."""
    if not g:
        return ""
    if not g.get("answered"):
        parts = ["no answer given"]
    elif g.get("grounded"):
        parts = ["the answer appears in what the agent read before giving it"]
    else:
        parts = ["the answer appears in nothing the agent read before giving it (memory, or made up)"]
    if g.get("listed") is True:
        visited = "visited" if g.get("visited") else "not visited"
        picked = "picked" if g.get("picked") else "not the answer given"
        parts.append(f"a search listed the answer's page: {visited}, {picked}")
    elif g.get("listed") is False:
        parts.append("no search listed the answer's page" + (", but it was visited" if g.get("visited") else ""))
    checks, rejections = int(g.get("checks") or 0), int(g.get("rejections") or 0)
    parts.append(
        f"{checks} check{'' if checks == 1 else 's'} of a page read, {rejections} rejecting"
        if checks
        else "no check of a page read states a verdict"
    )
    return "; ".join(parts)


def grounding_figures(rollouts: list[dict]) -> dict[str, Any]:
    """The run's grounding figures from the per-rollout ones (:func:`rollout_grounding`):
    ``answered`` (count), ``grounded`` (share of the answered), ``listed`` and ``visited``
    (shares of the rollouts with a gold answer), ``picked`` (share of the listed), ``checks``
    (count) and ``rejecting`` (share of the checks); a share is ``None`` where nothing counts
    towards it. ``{}`` for no rollouts."""
    rows = [r for r in rollouts if r]
    if not rows:
        return {}

    def share(key: str, among: list[dict]) -> float | None:
        return round(sum(bool(r[key]) for r in among) / len(among), 4) if among else None

    answered = [r for r in rows if r.get("answered")]
    with_gold = [r for r in rows if r.get("listed") is not None]
    listed = [r for r in with_gold if r["listed"]]
    checks = sum(int(r.get("checks") or 0) for r in rows)
    rejections = sum(int(r.get("rejections") or 0) for r in rows)
    return {
        "rollouts": len(rows),
        "answered": len(answered),
        "grounded": share("grounded", answered),
        "listed": share("listed", with_gold),
        "visited": share("visited", with_gold),
        "picked": share("picked", listed),
        "checks": checks,
        "rejecting": round(rejections / checks, 4) if checks else None,
    }


def describe_figures(g: dict[str, Any]) -> str:
    """A run's grounding figures (:func:`grounding_figures`) as the sentence ``report.md`` and
    the viewer's table page show."""

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}"

    answered = g.get("answered", 0)
    checks = (
        f"{g['checks']} checks of a page read, {pct(g.get('rejecting'))}% of them rejecting"
        if g.get("checks")
        else "no check of a page read states a verdict"
    )
    if not answered:
        return (
            f"Grounding: no rollout gave an answer; the answer's page was listed by a search in "
            f"{pct(g.get('listed'))}% of the rollouts and visited in {pct(g.get('visited'))}%; {checks}."
        )
    return (
        f"Grounding: {pct(g.get('grounded'))}% of {answered} answer{'' if answered == 1 else 's'} appear in what the "
        f"agent read before giving them; the answer's page was listed by a search in {pct(g.get('listed'))}% of the "
        f"rollouts and visited in {pct(g.get('visited'))}%; where listed, it was the answer given in "
        f"{pct(g.get('picked'))}%; {checks}."
    )


#: a thought that gives a search result's rank: "result 2", "the second result" is not read
_RANK = re.compile(r"\bresults?\s+(?:#\s*|no\.?\s*)?(\d{1,2})\b", re.I)
#: the fewest words of a quoted stretch that count as a quotation of what was read (a bare name does not)
_MIN_QUOTE_WORDS = 4


def _quotes(thought: str) -> list[str]:
    """The stretches in quotation marks, each cut at its ellipses (a quotation may leave words out)."""
    parts = [m.group(0)[1:-1] for m in _QUOTED.finditer(thought)]
    return [p.strip() for q in parts for p in re.split(r"\.\.\.|\u2026", q) if len(p.split()) >= _MIN_QUOTE_WORDS]


def choice_grounding(messages: list[dict]) -> list[dict[str, Any]]:
    """For every assistant turn that opens a page, whether its choice is grounded (issue 38):
    the page's entity (its title, :func:`~websailor.tools.observation_parse.title_from_url`)
    was shown by an earlier observation (a search listed its URL, or what a tool found names
    it), and the thought says where: the rank of a result that listed it ("result 2"), or a
    quotation (in quotation marks, at least four words: a bare name is not one) of an earlier
    observation that names it.

    Args:
        messages: a trajectory's chat (system, question, then assistant turns and tool
            responses).

    Returns:
        One dict per visit turn, in order: ``turn`` (index in ``messages``), ``candidate``
        (the title), ``shown``, ``says_where`` and ``grounded`` (both).
    """
    listed: list = []
    bodies: list[str] = []
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages[2:], 2):
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        if m.get("role") == "user":
            listed.extend(search_results(content))
            bodies.append(observation_body(content))
            continue
        if m.get("role") != "assistant":
            continue
        action = parse_turn(content)
        call = action.tool_call
        if call is None or call.name != "visit":
            continue
        url = call.arguments.get("url")
        url = url[0] if isinstance(url, list) and url else url
        if not isinstance(url, str) or not url.strip():
            continue
        candidate = title_from_url(url.strip())
        names = {_norm(candidate), _norm(bare_title(candidate))} - {""}
        read = _norm("\n".join(bodies))
        hits = [h for h in listed if h.url == url.strip()]
        shown = bool(hits) or any(_contains(read, n) for n in names)
        ranks = {int(r) for r in _RANK.findall(_QUOTED.sub(" ", action.thought))}
        quoted = [_norm(q) for q in _quotes(action.thought)]
        says = any(h.rank in ranks for h in hits) or any(
            q in read and any(_contains(q, n) for n in names) for q in quoted
        )
        out.append({"turn": i, "candidate": candidate, "shown": shown, "says_where": says, "grounded": shown and says})
    return out
