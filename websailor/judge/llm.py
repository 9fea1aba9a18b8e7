"""LLM-as-judge in the style of the BrowseComp grader (Wei et al., arXiv 2504.12516, the
grader the WebSailor papers use): the judge model sees the question, the agent's response
and the correct answer and returns JSON with the extracted final answer, its reasoning, a
yes/no verdict and the response's confidence.

Unparsable verdicts and endpoint errors are retried (``max_attempts`` in all); after that the
case is *ungraded* (``correct=None``, with the error), never counted as wrong. Verdicts are
cached in SQLite by judge model, question, gold answer and prediction, so re-scoring a run
costs nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from websailor.errors import ModelError
from websailor.jsonio import load_lenient_json
from websailor.judge.base import Case, Grade
from websailor.judge.reply_cache import ReplyCache
from websailor.log import get_logger
from websailor.models.base import ChatModel, SamplingParams

logger = get_logger(__name__)

GRADER_PROMPT = """Judge whether a response to a question gives the correct answer.

[question]: {question}

[response]: {response}

[correct_answer]: {correct_answer}

Reply with a single JSON object and nothing else, with these keys:
"extracted_final_answer": the final answer stated in the response, copied exactly, or "None" if it states none;
"reasoning": one or two sentences on whether the extracted answer and the correct answer mean the same thing; do not try to solve the question yourself and do not argue for another answer;
"correct": "yes" if the extracted answer matches the correct answer, allowing only small differences of wording, formatting or numerical rounding, and "no" otherwise (also when it is ambiguous, incomplete or names several candidates);
"confidence": the confidence stated in the response as a number from 0 to 100, or 100 if it states none."""

#: wall-clock budget of one verdict (HTTP retries included): a hanging judge costs at most this per try
JUDGE_TIMEOUT_S = 120.0
#: completion budget of one verdict: the JSON verdict is short, but a reasoning model (o3, gpt-5,
#: Qwen3 thinking) spends its thought from the same budget
JUDGE_MAX_TOKENS = 4096
_PARAMS = SamplingParams(
    temperature=0.0, top_p=1.0, presence_penalty=0.0, max_tokens=JUDGE_MAX_TOKENS, stop=[], timeout_s=JUDGE_TIMEOUT_S
)


def parse_verdict(text: str) -> Grade | None:
    """The grade in a judge reply, or ``None`` if the reply holds no usable verdict. A thought
    before the verdict (``<think>...</think>``, what a reasoning model's backend puts back) is
    not read: the verdict is looked for after the last ``</think>``."""
    obj = load_lenient_json(text.rpartition("</think>")[2])
    if not obj:
        return None
    verdict = str(obj.get("correct", "")).strip().strip(".!\"'").lower()
    if verdict not in ("yes", "no", "true", "false"):
        return None
    ok = verdict in ("yes", "true")
    try:
        confidence = float(str(obj.get("confidence", "")).strip().rstrip("%"))
    except ValueError:
        confidence = None
    extracted = obj.get("extracted_final_answer")
    reasoning = obj.get("reasoning")
    return Grade(
        ok,
        float(ok),
        extracted=None if extracted in (None, "None") else str(extracted),
        reasoning=str(reasoning) if reasoning not in (None, "") else None,
        confidence=confidence,
    )


class LLMJudge:
    """Grades with a chat model.

    Args:
        model: the judge model (any :class:`ChatModel`; ``temperature`` 0).
        cache: SQLite file of cached verdicts (created if missing); ``None``: no cache.
        max_attempts: tries per case, for endpoint errors and unparsable replies together.
        concurrency: cases graded at once.
    """

    def __init__(
        self, model: ChatModel, cache: Path | None = None, max_attempts: int = 3, concurrency: int = 8
    ) -> None:
        if max_attempts < 1 or concurrency < 1:
            raise ValueError("max_attempts and concurrency must be at least 1")
        self.model = model
        self.name = f"llm:{model.name}"
        self.max_attempts = max_attempts
        self.concurrency = concurrency
        self._cache = ReplyCache(cache, table="qa_verdicts", what="judge verdict") if cache is not None else None

    def _key(self, case: Case) -> str:
        raw = json.dumps([self.model.name, case.question, case.gold.to_dict(), case.prediction], ensure_ascii=False)
        return hashlib.sha256(raw.encode()).hexdigest()

    def _cached(self, key: str) -> Grade | None:
        stored = self._cache.get(key) if self._cache is not None else None
        if stored is None:
            return None
        try:
            return Grade(**json.loads(stored))
        except (ValueError, TypeError) as e:
            logger.warning("a cached verdict is unreadable (%s); asking the judge", e)
            return None

    def _store(self, key: str, grade: Grade) -> None:
        if self._cache is not None:  # a failed write is warned about; the verdict is still returned
            self._cache.put(key, json.dumps(grade.to_dict()))

    def _grade_one(self, case: Case) -> Grade:
        if not case.prediction or not case.prediction.strip():
            return Grade(False, 0.0, reasoning="the response gives no final answer")
        key = self._key(case)
        cached = self._cached(key)
        if cached is not None:
            return cached
        gold = (
            case.gold.answer
            if not case.gold.aliases
            else f"{case.gold.answer} (also accepted: {'; '.join(case.gold.aliases)})"
        )
        prompt = GRADER_PROMPT.format(question=case.question, response=case.prediction, correct_answer=gold)
        error = ""
        for _ in range(self.max_attempts):
            try:
                reply = self.model.chat([{"role": "user", "content": prompt}], _PARAMS).text
            except ModelError as e:
                error = f"judge endpoint error: {e}"
                continue
            grade = parse_verdict(reply)
            if grade is not None:
                self._store(key, grade)
                return grade
            error = f"unparsable verdict: {reply[:200]!r}"
        logger.warning("ungraded after %d attempts: %s", self.max_attempts, error)
        return Grade(None, None, error=error)

    def grade(self, cases: Sequence[Case]) -> list[Grade]:
        """One grade per case, in order; ungraded cases have ``correct=None``.

        Raises:
            ServiceDown: the judge's endpoint was declared down (:mod:`websailor.breaker`):
                the verdicts made until then are in the cache, the rest are not made.
        """
        if not cases:
            return []
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(cases)), thread_name_prefix="judge")
        finished_cleanly = False
        try:
            grades = list(pool.map(self._grade_one, cases))
            finished_cleanly = True
            return grades
        finally:  # on an interrupt, do not wait for verdicts in flight
            pool.shutdown(wait=finished_cleanly, cancel_futures=not finished_cleanly)
