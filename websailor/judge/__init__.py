"""Answer grading: normalized exact match with aliases and token F1 (the LLM judge comes with
the evaluation harness)."""

from websailor.judge.em import exact_match, gold_answers, normalize_answer, token_f1

__all__ = ["exact_match", "gold_answers", "normalize_answer", "token_f1"]
