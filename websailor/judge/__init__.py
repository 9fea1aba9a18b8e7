"""Answer grading: normalized exact match with aliases and list answers, token F1, and an
LLM judge (:func:`load_judge` builds any of them from its spec)."""

from websailor.judge.base import JUDGE_HELP, Case, ExactMatchJudge, F1Judge, Grade, Judge, load_judge
from websailor.judge.em import exact_match, gold_answers, normalize_answer, token_f1
from websailor.judge.gold import Gold

__all__ = [
    "Case",
    "ExactMatchJudge",
    "F1Judge",
    "Gold",
    "Grade",
    "Judge",
    "JUDGE_HELP",
    "exact_match",
    "gold_answers",
    "load_judge",
    "normalize_answer",
    "token_f1",
]
