"""The FACT judge: a chat model asked whether a cited page supports the statement that cites
it (DeepResearch Bench, Du et al., arXiv 2506.11763, section 3.2: support verification), its
verdicts parsed leniently and cached in SQLite (:class:`FactJudge`)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from websailor.errors import ModelError
from websailor.jsonio import load_lenient_json
from websailor.judge.reply_cache import ReplyCache
from websailor.log import get_logger
from websailor.models.base import ChatModel, SamplingParams
from websailor.reports.citations import url_key
from websailor.text import truncate

logger = get_logger(__name__)

#: longest reason kept for an unreachable page or an unjudged pair (characters)
MAX_REASON_CHARS = 300
#: bumped when the prompt changes, so that cached verdicts of another prompt are not reused
PROMPT_VERSION = "fact-v1"

FACT_PROMPT = """You check one citation of a research report: does the cited page support the statement that cites it?

<statement>
{statement}
</statement>

<page url="{url}">
{page}
</page>

Judge from the page alone, not from what you know:
- "supported": the page states the statement's facts or figures, all of them or some of them (a paraphrase counts; figures may be rounded);
- "unsupported": the page has real content, but none of the statement's facts or figures can be found in it;
- "no_content": the page has nothing to judge (an error or "not found" page, a login or cookie wall, an empty page).

Reply with a single JSON object and nothing else:
{{"verdict": "supported" or "unsupported" or "no_content", "reason": "one short sentence"}}"""

#: wall-clock budget of one verdict (HTTP retries included)
JUDGE_TIMEOUT_S = 120.0
#: completion budget of one verdict (a reasoning model thinks from the same budget)
JUDGE_MAX_TOKENS = 4096
_PARAMS = SamplingParams(
    temperature=0.0, top_p=1.0, presence_penalty=0.0, max_tokens=JUDGE_MAX_TOKENS, stop=[], timeout_s=JUDGE_TIMEOUT_S
)
_JUDGE_WORDS = {
    "supported": "supported",
    "support": "supported",
    "yes": "supported",
    "unsupported": "unsupported",
    "not supported": "unsupported",
    "not_supported": "unsupported",
    "no": "unsupported",
    "no_content": "no_content",
    "no content": "no_content",
    "unknown": "no_content",
}


def parse_fact_verdict(text: str) -> tuple[str, str] | None:
    """``(verdict, reason)`` from a judge reply (``supported``, ``unsupported`` or
    ``no_content``), or ``None`` if the reply holds no usable verdict. A thought before it
    (``<think>...</think>``) is not read."""
    obj = load_lenient_json(text.rpartition("</think>")[2])
    if not obj:
        return None
    word = " ".join(str(obj.get("verdict", "")).strip().strip(".!\"'").lower().split())
    verdict = _JUDGE_WORDS.get(word)
    if verdict is None:
        return None
    reason = obj.get("reason")
    return verdict, "" if reason in (None, "") else " ".join(str(reason).split())


def _defused(text: str) -> str:
    """``text`` with its own ``<statement>``/``<page>`` tags broken (a statement or page cannot
    close its block in the judge's prompt and write outside it)."""
    return re.sub(r"<(\s*/?\s*(?:statement|page)\b)", "<\u200b\\1", text, flags=re.I)


@dataclass(frozen=True)
class JudgeVerdict:
    """One answer of :class:`FactJudge`: ``verdict`` ``supported``, ``unsupported``,
    ``no_content``, or ``None`` with ``error`` when no attempt gave one; ``cached``: read from
    the cache; ``calls``: requests sent to the judge model for it (0 when cached)."""

    verdict: str | None
    reason: str = ""
    cached: bool = False
    calls: int = 0
    error: str | None = None


class FactJudge:
    """Asks a chat model whether a page supports a statement (DeepResearch Bench, section 3.2:
    support verification), with a verdict cache.

    Args:
        model: the judge model (any :class:`~websailor.models.base.ChatModel`; temperature 0).
        cache: SQLite file of cached verdicts (created if missing; it may be the file of
            :class:`~websailor.judge.llm.LLMJudge`'s cache, in another table); ``None``: no cache.
            An unusable cache is logged and left out.
        max_attempts: tries per pair, for endpoint errors and unparsable replies together.

    Raises:
        ValueError: ``max_attempts`` below 1.
    """

    def __init__(self, model: ChatModel, cache: Path | str | None = None, max_attempts: int = 3) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.model = model
        self.max_attempts = max_attempts
        self._cache = ReplyCache(cache, "fact_replies", "FACT verdict") if cache is not None else None

    @property
    def name(self) -> str:
        """The judge model's name, as recorded in the cache key."""
        return self.model.name

    def key(self, statement: str, url: str, page: str) -> str:
        """The cache key of a verdict: SHA-256 (hex) of the prompt version, the judge model's
        name, the statement, the page's :func:`~websailor.reports.citations.url_key` and the
        page text."""
        raw = json.dumps([PROMPT_VERSION, self.model.name, statement, url_key(url), page], ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def _cached(self, key: str) -> tuple[str, str] | None:
        raw = self._cache.get(key) if self._cache is not None else None
        if raw is None:
            return None
        try:
            obj = json.loads(raw)
            return str(obj["verdict"]), str(obj.get("reason", ""))
        except (ValueError, TypeError, KeyError) as e:
            logger.warning("FACT verdict cache read failed (%s); asking the judge", e)
            return None

    def _store(self, key: str, verdict: str, reason: str) -> None:
        if self._cache is not None:
            self._cache.put(key, json.dumps({"verdict": verdict, "reason": reason}, ensure_ascii=False))

    def judge(self, statement: str, url: str, page: str) -> JudgeVerdict:
        """The verdict on one pair, from the cache or from the model (up to ``max_attempts``
        requests; :class:`~websailor.errors.ModelError` and unparsable replies are retried).
        Never raises for a judge failure: the verdict is then ``None`` with the last error."""
        key = self.key(statement, url, page)
        hit = self._cached(key)
        if hit is not None:
            return JudgeVerdict(hit[0], hit[1], cached=True)
        prompt = FACT_PROMPT.format(
            statement=_defused(statement), url=url.replace('"', "%22").replace(">", "%3E"), page=_defused(page)
        )
        error = ""
        calls = 0
        for _ in range(self.max_attempts):
            calls += 1
            try:
                reply = self.model.chat([{"role": "user", "content": prompt}], _PARAMS).text
            except ModelError as e:
                error = f"judge endpoint error: {e}"
                continue
            parsed = parse_fact_verdict(reply or "")
            if parsed is not None:
                self._store(key, *parsed)
                return JudgeVerdict(parsed[0], parsed[1], calls=calls)
            error = f"unparsable verdict: {(reply or '')[:200]!r}"
        logger.warning("FACT pair unjudged after %d attempts: %s", self.max_attempts, error)
        return JudgeVerdict(None, calls=calls, error=truncate(error, MAX_REASON_CHARS))

    def close(self) -> None:
        """Close the cache (the model is the caller's)."""
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> FactJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
