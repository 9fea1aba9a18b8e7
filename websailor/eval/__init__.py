"""Evaluation: benchmark loaders, metrics (Avg@k, Pass@k, Best Pass@1), scoring of trajectory
files, the report and the ``websailor eval`` harness."""

from websailor.eval.harness import EvalConfig, evaluate
from websailor.eval.loaders import EvalItem, load_benchmark
from websailor.eval.metrics import avg_at_k, best_pass_at_1, bootstrap_ci, pass_at_k, per_run_accuracy
from websailor.eval.report import summarize, write_report
from websailor.eval.scoring import Score, read_trajectories, rollouts_per_question, score_trajectories

__all__ = [
    "EvalConfig",
    "EvalItem",
    "Score",
    "avg_at_k",
    "best_pass_at_1",
    "bootstrap_ci",
    "evaluate",
    "load_benchmark",
    "pass_at_k",
    "per_run_accuracy",
    "read_trajectories",
    "rollouts_per_question",
    "score_trajectories",
    "summarize",
    "write_report",
]
