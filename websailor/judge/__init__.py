"""Answer grading: normalized exact match with aliases and list answers, token F1, and an
LLM judge (:func:`load_judge` builds any of them from its spec)."""

from websailor.judge.base import Case, ExactMatchJudge, F1Judge, Grade, Judge
from websailor.judge.em import exact_match, gold_answers, normalize_answer, token_f1
from websailor.judge.gold import Gold
from websailor.judge.load import JUDGE_HELP, judge_model, load_judge

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
    "judge_model",
    "load_judge",
    "normalize_answer",
    "token_f1",
]
