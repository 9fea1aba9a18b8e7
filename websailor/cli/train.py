"""``websailor train sft``, ``train rl`` and ``train plot``: cold-start SFT and agentic RL with TRL."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from websailor.cli.common import ENGINE_ENV, Engine, Split, Task, env_options, handle_errors, service_options

train_app = typer.Typer(
    help="Train models: SFT on trajectories, RL (v2, dupo) in the environment.", no_args_is_help=True
)


#: ``--report-to`` of ``train sft`` and ``train rl``
ReportToOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        help="Experiment trackers of TRL's trainer: tensorboard, wandb, mlflow or trackio (repeat, or comma-separate); "
        "default none beyond the run's own logs.",
    ),
]


@train_app.command("sft")
@handle_errors
def train_sft_cmd(
    data: Annotated[
        list[Path], typer.Option(help="Trajectories JSONL (websailor traj build); repeat to pool several files.")
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Output directory: the fine-tuned model (use as --model hf:DIR); "
            "rerun the same command to resume from its checkpoints."
        ),
    ],
    model: Annotated[str, typer.Option(help="Model to fine-tune: smollm2 or hf:DIR.")] = "smollm2",
    config: Annotated[
        Optional[Path], typer.Option(help="YAML or JSON file of SFT settings (options below override it).")
    ] = None,
    lora: Annotated[
        Optional[bool], typer.Option("--lora/--full", help="LoRA adapters (merged on save) or all weights.")
    ] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(min=1, help="Optimizer steps (default: --epochs over the data).")
    ] = None,
    epochs: Annotated[Optional[float], typer.Option(min=0.0, help="Passes over the data (default 3).")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", min=0.0, help="Peak learning rate (paper: 5e-6).")] = None,
    warmup_ratio: Annotated[
        Optional[float], typer.Option(min=0.0, max=0.99, help="Share of steps warming up from 0 (default 0.1).")
    ] = None,
    batch_size: Annotated[
        Optional[int], typer.Option(min=1, help="Trajectories per optimizer step (paper: 32).")
    ] = None,
    max_length: Annotated[
        Optional[int],
        typer.Option(min=16, help="Longest trajectory in tokens; longer ones are dropped (default 32768)."),
    ] = None,
    precision: Annotated[
        Optional[str],
        typer.Option(
            help="auto, bf16 or fp32 (default auto: bf16 where it runs faster than fp32, timed once per machine)."
        ),
    ] = None,
    save_steps: Annotated[
        Optional[int],
        typer.Option(min=1, help="Steps between checkpoints (default 50): a killed run loses at most that many."),
    ] = None,
    keep_checkpoints: Annotated[
        Optional[int], typer.Option(min=1, help="Newest checkpoints kept (default 2; about 1.6 GB each for 135M).")
    ] = None,
    seed: Annotated[Optional[int], typer.Option(min=0, help="Seed of data order and initialization.")] = None,
    report_to: ReportToOpt = None,
) -> None:
    """Cold-start SFT with TRL: the loss covers the assistant's tokens only."""
    from websailor.train.sft import load_settings, train_sft

    settings = load_settings(
        config,
        lora=lora,
        max_steps=max_steps,
        epochs=epochs,
        learning_rate=lr,
        batch_size=batch_size,
        max_length=max_length,
        precision=precision,
        seed=seed,
        warmup_ratio=warmup_ratio,
        save_steps=save_steps,
        keep_checkpoints=keep_checkpoints,
    )
    s = train_sft(data, model, out, settings, report_to=report_to)
    from websailor.train.common import end_processes, is_main_process

    end_processes()

    if not is_main_process():  # under a launcher, one process reports
        return
    counts = ", ".join(f"{k} {v}" for k, v in s["counts"].items())
    print(f"trajectories: {counts}; {s['tokens']['total']} tokens, {s['tokens']['loss']} with loss")
    last = s["loss_history"][-1]["loss"] if s["loss_history"] else float("nan")
    print(
        f"{s['steps']} steps ({s['train_seconds']} s of training, {s.get('session_seconds', 0)} s in this session); "
        f"loss at the last step {last:.4f}, mean over this session's steps {s['train_loss']:.4f}; step log "
        f"{out}/sft_log.jsonl"
    )
    print(f"model saved to {out}: use --model hf:{out}")


class Algo(str, Enum):
    v2 = "v2"
    dupo = "dupo"


@train_app.command("rl")
@handle_errors
@service_options()
@env_options()
def train_rl_cmd(
    data: Annotated[Path, typer.Option(help="QA JSONL (websailor synth) or any benchmark file eval reads.")],
    out: Annotated[
        Path,
        typer.Option(
            help="Output directory: the trained model (use as --model hf:DIR), rollouts, "
            "step log; rerun the same command to resume from its checkpoints."
        ),
    ],
    model: Annotated[str, typer.Option(help="Starting model: smollm2 or hf:DIR (usually the SFT model).")] = "smollm2",
    algo: Annotated[Optional[Algo], typer.Option(help="v2 (leave-one-out, 0/1 reward) or dupo (default v2).")] = None,
    config: Annotated[
        Optional[Path], typer.Option(help="YAML or JSON file of RL settings (options below override it).")
    ] = None,
    split: Annotated[
        Optional[Split], typer.Option(help="Split of a synth file to train on: train (default), test or all.")
    ] = None,
    group_size: Annotated[Optional[int], typer.Option(help="Rollouts per question (default 8).")] = None,
    batch: Annotated[
        Optional[int], typer.Option(help="Rollouts per optimizer step, whole groups (default 128).")
    ] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Learning rate (paper V2: 1e-6).")] = None,
    max_calls: Annotated[Optional[int], typer.Option(help="Model calls per rollout (default 100).")] = None,
    max_tokens: Annotated[
        Optional[int], typer.Option(help="Tokens per model call (default: the policy's, 256 for smollm2).")
    ] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(help="Optimizer steps (default: one pass over the questions).")
    ] = None,
    reward: Annotated[Optional[str], typer.Option(help="Judge: em, f1[:T] or llm:MODEL_SPEC (default em).")] = None,
    prefilter: Annotated[
        Optional[int],
        typer.Option(
            help="Rollouts per item of the starting model before training; "
            "keeps items solved sometimes but not always (0: off)."
        ),
    ] = None,
    prefilter_from: Annotated[
        Optional[Path],
        typer.Option(
            help="Take the moderate items from existing graded rollouts instead of sampling: an eval output "
            "(directory or its trajectories.jsonl) or an RL run's prefilter_rollouts.jsonl; --prefilter K then "
            "sets the graded rollouts each item needs (default: as many as the file has)."
        ),
    ] = None,
    prefilter_band: Annotated[
        Optional[str],
        typer.Option(
            help="Which items the prefilter keeps: 0<c<k (solved sometimes, not always; default) or a pass-rate "
            "interval LO:HI such as 0.1:0.75."
        ),
    ] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Rollouts run at once (default 8).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed of sampling and data order.")] = None,
    max_env_failures: Annotated[
        Optional[int],
        typer.Option(
            min=0,
            help="Tool calls per rollout the environment may degrade (provider outage, tool server down) and the "
            "rollout still get a reward; beyond it the rollout has none and its group is skipped. Default 0: a "
            "single degraded call is enough.",
        ),
    ] = None,
    rollout_server: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Sample rollouts on this vLLM server (vllm:NAME@URL, printed by websailor serve model, started "
            "on --model), its weights synced from the trainer's after every optimizer step; repeat the option (or "
            "separate specs by commas) for several servers: each rollout goes to the one with the fewest in flight. "
            "Default: the local engine."
        ),
    ] = None,
    sync_dir: Annotated[
        Optional[Path],
        typer.Option(
            help="Folder the weight sync writes the policy's weights to (default /dev/shm, which only servers on "
            "this machine read; a shared filesystem's path for servers elsewhere)."
        ),
    ] = None,
    server_sync_dir: Annotated[
        Optional[str],
        typer.Option(help="--sync-dir's path as the rollout servers see it (default: the same path)."),
    ] = None,
    on_server_loss: Annotated[
        Optional[str],
        typer.Option(
            help="stop (default): a rollout server that fails during a batch stops the step untrained (rerun to "
            "resume); continue: its rollouts are rerun on the servers that still answer and it is dropped."
        ),
    ] = None,
    weight_transfer: Annotated[
        Optional[str],
        typer.Option(
            help="file (default): the weights as a checkpoint in --sync-dir that the servers reload; nccl: streamed "
            "GPU to GPU through vLLM's weight-transfer endpoints (servers on other GPUs; not yet run on a GPU).",
        ),
    ] = None,
    max_staleness: Annotated[
        Optional[int],
        typer.Option(
            min=0,
            help="K >= 1: sample the next batch on the rollout servers while one trains; no rollout is trained more "
            "than K policy versions after the weights that sampled it (one batch ahead). 0 (default): on-policy.",
        ),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            envvar=ENGINE_ENV,
            help="Without --rollout-server: auto starts a vLLM rollout server for --model (synced every step) when "
            "max_steps x batch rollouts reach the break-even of its start-up and vLLM is installed (make vllm), and "
            "stops it at the end; vllm always does; local samples with the trainer's own weights.",
        ),
    ] = Engine.auto,
    precision: Annotated[
        Optional[str],
        typer.Option(
            help="auto, bf16 or fp32 (default auto: bf16 where it runs faster than fp32, timed once per machine)."
        ),
    ] = None,
    report_to: ReportToOpt = None,
    task: Annotated[
        Optional[Task],
        typer.Option(
            help="qa (default) or report: --data is then DeepResearch Bench's task file or folder and the reward "
            "each report's RACE score by --reward llm:MODEL_SPEC."
        ),
    ] = None,
    rubric: Annotated[
        Optional[Path],
        typer.Option(help="Report tasks: a JSON rubric (the benchmark's criteria layout) scoring every task."),
    ] = None,
    language: Annotated[
        Optional[str], typer.Option(help="Report tasks: train only on the tasks in this language (en, zh).")
    ] = None,
    env_spec: Any = None,
) -> None:
    """Agentic RL with TRL's GRPOTrainer: multi-turn rollouts of the agent in the local
    environment (or the real web, or a tool server's), V2's on-policy leave-one-out variant or DUPO;
    on QA items (0/1 reward) or report tasks (RACE reward)."""
    from websailor.models import check_endpoint
    from websailor.train.common import check_report_to
    from websailor.train.rl import load_settings, train_rl

    settings = load_settings(
        config,
        algo=algo.value if algo else None,
        group_size=group_size,
        batch_size=batch,
        learning_rate=lr,
        max_calls=max_calls,
        max_tokens_per_turn=max_tokens,
        max_steps=max_steps,
        reward=reward,
        prefilter=prefilter,
        prefilter_from=str(prefilter_from) if prefilter_from else None,
        prefilter_band=prefilter_band,
        concurrency=concurrency,
        seed=seed,
        max_env_failures=max_env_failures,
        rollout_server=rollout_server or None,  # typer gives an empty list when the option is not given
        sync_dir=str(sync_dir) if sync_dir else None,
        server_sync_dir=server_sync_dir,
        on_server_loss=on_server_loss,
        max_staleness=max_staleness,
        weight_transfer=weight_transfer,
        precision=precision,
        task=task.value if task else None,
        rubric=str(rubric) if rubric else None,
        language=language,
    )
    check_report_to(report_to)  # before the judge's endpoint is probed: one bad option does not hide another
    check_endpoint(settings.reward)  # an llm: judge's endpoint answers, or one line in seconds
    s = train_rl(
        data,
        model,
        out,
        settings,
        split=split.value if split else None,
        env=env_spec,
        report_to=report_to,
        engine=engine.value,
    )
    from websailor.train.common import end_processes, is_main_process

    end_processes()

    if not is_main_process():
        return
    if s.get("prefilter"):
        p = s["prefilter"]
        where = f" from {p['source']}" if p.get("source") else ""
        print(
            f"prefilter{where} (band {p.get('band', '0<c<k')}): {p['kept']} kept, {p['too_easy']} too easy, "
            f"{p['too_hard']} too hard, {p['ungraded']} ungraded"
        )
    from websailor.train.rl_log import run_outcome

    for line in run_outcome(s):
        print(line)
    print(f"model saved to {out}: use --model hf:{out}; curves: websailor train plot {out}")


@train_app.command("plot")
@handle_errors
def train_plot_cmd(
    run_dir: Annotated[Path, typer.Argument(help="RL output directory (or its rl_log.jsonl).")],
    png: Annotated[
        Optional[Path], typer.Option("--out", help="Image to write (default RUN_DIR/rl_curves.png).")
    ] = None,
    smooth: Annotated[int, typer.Option(min=1, help="Steps in the moving average.")] = 5,
) -> None:
    """Draw an RL run's curves: reward, accuracy, zero-spread groups, tool calls, response
    length, entropy, clip fraction, seconds per step."""
    from websailor.train.rl_log import plot_log

    print(f"wrote {plot_log(run_dir, png, smooth)}")


def register(app: typer.Typer) -> None:
    app.add_typer(train_app, name="train")
