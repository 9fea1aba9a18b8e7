"""Evaluation: metrics (Avg@k, Pass@k, Best Pass@1), scoring of trajectory files, the report
and the ``websailor eval`` harness. Benchmarks are read by :func:`websailor.questions.load_questions`
(``load_benchmark`` and ``EvalItem`` are its earlier names, kept here)."""

from websailor.eval.harness import EvalConfig, evaluate
from websailor.eval.metrics import avg_at_k, best_pass_at_1, bootstrap_ci, pass_at_k, per_run_accuracy
from websailor.eval.report import summarize, write_report
from websailor.eval.scoring import Score, read_trajectories, rollouts_per_question, score_trajectories
from websailor.questions import Question, load_questions

EvalItem = Question
load_benchmark = load_questions

__all__ = [
    "EvalConfig",
    "EvalItem",
    "Question",
    "Score",
    "avg_at_k",
    "best_pass_at_1",
    "bootstrap_ci",
    "evaluate",
    "load_benchmark",
    "load_questions",
    "pass_at_k",
    "per_run_accuracy",
    "read_trajectories",
    "rollouts_per_question",
    "score_trajectories",
    "summarize",
    "write_report",
]
