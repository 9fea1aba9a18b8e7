"""``python experiments/mini_pipeline.py status --out DIR``: where a ladder experiment stands.

For each stage: its state (done, partial, not started), its progress in its own units (items,
trajectories, optimizer steps, rollouts) out of how many, the time spent on it (the script's
record of every run of the stage, or the step logs' seconds when a killed run left no record),
an estimate of what is left (from the stage's own rate, or a like stage's), and at the end the
command that continues the run. Reads files only; changes nothing.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pipeline_common import file_digest, folder_path

#: the stages in order; --until stops after one of them
STAGES = (
    "synth",
    "traj",
    "sft",
    "eval_base",
    "eval_sft",
    "prefilter",
    "sanity",
    "rl",
    "eval_rl",
    "dupo",
    "eval_dupo",
    "throughput",
    "transfer",
)
#: stages measured in rollouts, and where their trajectories are
EVALS = {
    "eval_base": "eval_base",
    "eval_sft": "eval_sft",
    "prefilter": "eval_sft_train",
    "eval_rl": "eval_rl",
    "eval_dupo": "eval_dupo",
}
#: RL stages: run folder and the setting that holds their steps
RL_RUNS = {"sanity": ("rl_sanity", "sanity_steps"), "rl": ("rl_model", "rl_steps"), "dupo": ("dupo_model", "rl_steps")}
#: the hand-written questions of the transfer stage (20 in benchmarks/data/vital_questions.jsonl)
TRANSFER_QUESTIONS = 20


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def _records(path: Path) -> list[dict]:
    out = []
    try:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # an unfinished last line
                if isinstance(rec, dict):
                    out.append(rec)
    except OSError:
        pass
    return out


def _finished_rollouts(path: Path) -> int:
    """Distinct ``(id, rollout)`` pairs of a trajectories file whose latest record a resumed
    ``websailor eval`` keeps (:func:`websailor.agent.runner.finished`: no model error, no
    environment failure); the others it runs again."""
    from websailor.agent.runner import finished

    latest = {(r.get("id"), r.get("rollout")): r for r in _records(path)}
    return sum(finished(r) for r in latest.values())


def evaluation_done(folder: Path, total: int) -> tuple[int, bool]:
    """The rollouts of the evaluation in ``folder`` a rerun would keep, and whether it is done:
    nothing a rerun would do (its summary is written when a run stops too, and a rollout that
    ended in a model error or an outage, or was left ungraded, is run or graded again)."""
    done = _finished_rollouts(folder / "trajectories.jsonl")
    summary = _json(folder / "summary.json")
    return done, bool(summary) and done >= total and not summary.get("ungraded")


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _step_log(path: Path) -> tuple[int, float]:
    """The last step of a step log and the seconds its steps took."""
    recs = [r for r in _records(path) if isinstance(r.get("step"), int)]
    return (max((r["step"] for r in recs), default=0), sum(float(r.get("time/step_s") or 0.0) for r in recs))


def _sft_total(out: Path, settings: dict, trajectories: int) -> int | None:
    """The SFT run's optimizer steps: the trainer's own count once it has checkpointed, else from
    the config's batch size and epochs (or max_steps) and the trajectories."""
    states = sorted((out / "sft_model" / "checkpoints").glob("checkpoint-*/trainer_state.json"))
    for state in states[::-1]:
        try:
            return int(json.loads(state.read_text())["max_steps"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    try:
        cfg = yaml.safe_load(Path(settings["sft_config"]).read_text()) or {}
    except (OSError, KeyError, ValueError, TypeError, yaml.YAMLError):
        return None
    if not isinstance(cfg, dict):
        return None
    if cfg.get("max_steps"):
        return int(cfg["max_steps"])
    if not trajectories:
        return None
    return math.ceil(math.ceil(trajectories / int(cfg.get("batch_size", 32))) * float(cfg.get("epochs", 3)))


def stage_progress(out: Path, settings: dict, results: dict) -> dict[str, dict[str, Any]]:
    """``{stage: {"state", "done", "total", "unit", "spent_s"}}`` of the run in ``out`` (see the
    module docstring); ``total`` is ``None`` where it cannot be known yet."""
    stages = results.get("stages") or {}
    items = _records(out / "qa.jsonl")
    train = sum(1 for it in items if it.get("split") == "train")
    test = sum(1 for it in items if it.get("split") == "test")
    rows: dict[str, dict[str, Any]] = {}

    def row(name: str, done: int, total: int | None, unit: str, finished: bool, logged_s: float = 0.0) -> None:
        rec = stages.get(name) or {}
        spent = max(float(rec.get("wall_s") or 0.0), logged_s)
        started = done > 0 or spent > 0 or bool(rec.get("runs"))
        state = "done" if finished else "partial" if started else "not started"
        rows[name] = {"state": state, "done": done, "total": total, "unit": unit, "spent_s": round(spent, 1)}

    row("synth", len(items), settings.get("items"), "items", (out / "qa_stats.txt").exists())
    n_pool = _lines(out / "traj_pool.jsonl")
    made = bool((stages.get("traj") or {}).get("finished")) and (out / "sft_trajectories.jsonl").exists()
    row("traj", n_pool, train or None, "train items", made)  # built, then drawn (traj select)
    # SFT trains on --sft-items of the pool (traj select): its steps follow from that many
    n_traj = _lines(out / "sft_trajectories.jsonl") or min(n_pool, int(settings.get("sft_items") or n_pool))
    step, seconds = _step_log(out / "sft_model" / "sft_log.jsonl")
    finished = (out / "sft_model" / "sft_summary.json").exists()
    row("sft", step, _sft_total(out, settings, n_traj), "steps", finished, seconds)
    k, limit = int(settings.get("k", 4)), int(settings.get("eval_limit", 60))
    for name, folder in EVALS.items():
        if name == "prefilter":
            total = min(train or limit, int(settings.get("prefilter_limit", 48))) * int(settings.get("prefilter_k", 8))
        else:
            total = min(test or limit, limit) * k
        done, finished = evaluation_done(out / folder, total)
        row(name, done, total, "rollouts", finished)
    for name, (folder, key) in RL_RUNS.items():
        step, seconds = _step_log(out / folder / "rl_log.jsonl")
        trained = _json(out / folder / "rl_summary.json").get("steps")
        # a finished run of fewer steps than asked (--rl-steps raised) is continued, not done
        finished = isinstance(trained, int) and trained >= int(settings.get(key) or 0)
        row(name, step, settings.get(key), "RL steps", finished, seconds)
    groups = _lines(out / "dupo_stream.jsonl")
    measured = (_json(out / "dupo_throughput.json").get("context") or {}).get("args") or {}
    asked = (settings.get("throughput_groups"), settings.get("throughput_max_groups"))
    row(
        "throughput",
        groups,
        settings.get("throughput_max_groups"),
        "groups (at most)",
        bool((stages.get("throughput") or {}).get("finished"))
        and (measured.get("groups"), measured.get("max_groups")) == asked,
    )
    models = [m for m in ("base", "sft", "rl", "dupo") if (out / f"transfer_{m}").exists() or m in ("base", "sft")]
    each = {m: evaluation_done(out / f"transfer_{m}", TRANSFER_QUESTIONS * k) for m in ("base", "sft", "rl", "dupo")}
    done = sum(each[m][0] for m in models)
    finished = all(ok for _, ok in each.values())
    spent = sum(float((stages.get(f"transfer_{m}") or {}).get("wall_s") or 0.0) for m in ("base", "sft", "rl", "dupo"))
    stages.setdefault("transfer", {"wall_s": spent})
    row("transfer", done, 4 * TRANSFER_QUESTIONS * k, "rollouts", finished)
    return {name: rows[name] for name in STAGES}  # the pipeline's order: the first not done runs next


def estimate_left(rows: dict[str, dict[str, Any]]) -> None:
    """Add ``left_s`` to each row: its remaining units at its own rate, or at the rate of a stage
    of the same unit (evaluations: seconds a rollout; RL: seconds an RL step); ``None`` unknown."""
    rates: dict[str, list[float]] = {}
    for r in rows.values():
        if r["done"] and r["spent_s"]:
            rates.setdefault(r["unit"], []).append(r["spent_s"] / r["done"])
    for r in rows.values():
        if r["state"] == "done":
            r["left_s"] = 0.0
            continue
        if r["total"] is None:
            r["left_s"] = None
            continue
        own = r["spent_s"] / r["done"] if r["done"] and r["spent_s"] else None
        like = rates.get(r["unit"])
        rate = own if own is not None else (sum(like) / len(like) if like else None)
        r["left_s"] = None if rate is None else round(max(0, r["total"] - r["done"]) * rate, 1)


def continue_command(settings: dict, defaults: dict[str, Any], option: Callable[[str, Any], str]) -> str:
    """The command that continues the run: the script with ``--out`` and every setting that
    differs from its default (``option(key, value)`` spells one; a file whose contents the run
    recorded, ``KEY_sha256``, is left out when the default file has those contents)."""
    parts = ["python", "experiments/mini_pipeline.py", "--out", shlex.quote(str(settings.get("out", "")))]
    for key, default in defaults.items():
        if key in ("out", "publish", "only", "until") or key not in settings:
            continue
        value = settings[key]
        digest = settings.get(f"{key}_sha256")
        if isinstance(default, Path) and digest and digest == file_digest(default):
            continue  # the same contents as the default file (another checkout's path)
        if str(value) != str(default.resolve() if isinstance(default, Path) else default):
            parts.append(option(key, value))
    return " ".join(parts)


def _seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "?"
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def format_status(out: Path, rows: dict[str, dict[str, Any]], command: str) -> str:
    """The status table and the continue command, as text."""
    lines = [f"{out}:", "", f"{'stage':<11} {'state':<12} {'progress':<28} {'spent':>8} {'left':>8}"]
    for name, r in rows.items():
        total = "?" if r["total"] is None else r["total"]
        progress = f"{r['done']} of {total} {r['unit']}"
        lines.append(
            f"{name:<11} {r['state']:<12} {progress:<28} {_seconds(r['spent_s']):>8} {_seconds(r['left_s']):>8}"
        )
    spent = sum(r["spent_s"] for r in rows.values())
    lefts = [r["left_s"] for r in rows.values()]
    known = sum(x for x in lefts if x is not None)
    unknown = sum(x is None for x in lefts)
    more = f" (+ {unknown} stage{'s' if unknown > 1 else ''} not estimated)" if unknown else ""
    lines += ["", f"spent {_seconds(spent)}; left about {_seconds(known)}{more}"]
    todo = [n for n, r in rows.items() if r["state"] != "done"]
    lines.append("every stage is done" if not todo else f"next: {todo[0]}; continue with:\n  {command}")
    return "\n".join(lines) + "\n"


def read_results(path: Path) -> dict:
    """The run's records (``OUT/results.json``: each stage's wall time and memory), empty for a
    new run.

    Raises:
        SystemExit: a file that is not a JSON object with a ``stages`` object whose records are
            objects with a numeric ``wall_s`` (one line, naming the file and the stage).
    """
    if not path.exists():
        return {}
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(
            f"{path} cannot be read ({type(e).__name__}: {e}): move it aside to start its records anew"
        ) from None
    if not isinstance(results, dict) or not isinstance(results.get("stages", {}), dict):
        raise SystemExit(f"{path} is not the run's records (a JSON object with a stages object): move it aside")
    for name, rec in results.get("stages", {}).items():
        wall = rec.get("wall_s", 0.0) if isinstance(rec, dict) else None
        if not isinstance(wall, (int, float)) or isinstance(wall, bool):
            raise SystemExit(
                f"{path}: the record of stage {name!r} is not an object with a number wall_s ({rec!r:.80}): "
                "move the file aside to start its records anew"
            )
    return results


def status(
    argv: list[str],
    layout: int,
    layout_difference: Callable[[object], str],
    defaults: dict[str, Any],
    option: Callable[[str, Any], str],
    added: dict[str, Any],
) -> int:
    """The ``status`` command: print the table for ``--out DIR`` (``--json`` for the rows);
    returns the exit code (2: not an experiment folder, or one of another layout). ``added``: the
    value a setting added since had in runs saved without it (the continue command names it where
    the default is now another)."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="mini_pipeline.py status", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=folder_path, required=True, help="the experiment's folder")
    p.add_argument("--json", action="store_true", help="the rows as JSON")
    a = p.parse_args(argv)
    path = a.out / "settings.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"{a.out} is not a ladder experiment folder (no settings.json): nothing to report", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"{path} cannot be read ({type(e).__name__}: {e}): not an experiment folder", file=sys.stderr)
        return 2
    if not isinstance(settings, dict):
        print(f"{a.out} is not a ladder experiment folder ({path} holds no experiment settings)", file=sys.stderr)
        return 2
    if settings.get("layout", 1) != layout:  # the first layout wrote no "layout" (as a run reads it)
        print(
            f"{a.out} holds a run of {layout_difference(settings.get('layout', 1))}: this version cannot continue it",
            file=sys.stderr,
        )
        return 2
    if not a.out.is_dir():
        print(f"{a.out} is not a folder", file=sys.stderr)
        return 2
    try:
        results = read_results(a.out / "results.json")
    except SystemExit as e:  # the run would refuse the same file: say so, not a table of zeros
        print(e, file=sys.stderr)
        return 2
    settings["out"] = str(a.out)  # the folder as it is now, wherever it was made
    try:
        rows = stage_progress(a.out, settings, results)
        estimate_left(rows)
        command = continue_command(added | settings, defaults, option)
        text = json.dumps({"out": str(a.out), "stages": rows, "continue": command}, indent=2, allow_nan=False)
        text = text + "\n" if a.json else format_status(a.out, rows, command)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, ArithmeticError, yaml.YAMLError) as e:
        print(
            f"{a.out} holds damaged experiment records ({type(e).__name__}: {e}): check settings.json, results.json "
            "and the SFT settings file they name",
            file=sys.stderr,
        )
        return 2
    print(text, end="")
    return 0
