"""The trainer wiring of an RL run: TRL's ``GRPOTrainer`` with our agent's rollouts as its
``rollout_func``, the step log callback, and :func:`train_rl`, the whole run from the QA file
to the saved model.

The trainer runs a token-level clipped objective (``loss_type="dapo"``: clip-higher with
``epsilon_low`` / ``epsilon_high``, no KL term, no entropy bonus); the rollouts, rewards and
advantages are ours (:mod:`websailor.train.rl.rollouts`). One optimizer step per batch of
rollouts keeps training strictly on-policy. The update's forward passes skip the batch's padding,
score only the positions in the loss and need no separate pass for the old log-probabilities
(:mod:`websailor.train.rl.update`).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.memory import release_memory
from websailor.models.hf import turn_budget
from websailor.train.common import (
    CHECKPOINTING_KWARGS,
    check_report_to,
    is_main_process,
    limit_training_memory,
    load_trainable_model,
    save_model,
    tensorboard_dir,
    world_size,
)
from websailor.train.rl.plan import RunPlan, choose_items, plan_run
from websailor.train.rl.resume import PREFILTER_NEUTRAL, finish_from_checkpoint
from websailor.train.rl.settings import (
    LOG_FILE,
    PREFILTER_FILE,
    ROLLOUTS_FILE,
    SETTINGS_FILE,
    SUMMARY_FILE,
    RLSettings,
    build_agent_config,
)
from websailor.train.run_folder import trim_jsonl

if TYPE_CHECKING:
    from websailor.tools.environment import EnvSpec


logger = get_logger(__name__)


def _callback(out: Path, rollouts: Any, micro_batch_size: int, resumed: bool) -> Any:
    from transformers import TrainerCallback

    from websailor.train.rl_log import StepLogger

    class _Log(TrainerCallback):
        """Merges the rollout figures with the trainer's (loss, entropy, clip fractions) into
        one record per step."""

        def __init__(self) -> None:
            # under a launcher one process writes the log and its event files (the others would
            # race it for the TensorBoard folder a resumed run rewrites)
            self.log = StepLogger(out, replay=resumed) if is_main_process() else None
            self.t0 = time.perf_counter()

        def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            release_memory()

        def on_log(self, args, state, control, logs=None, **kw):  # noqa: ANN001
            if self.log is None or not logs or "loss" not in logs:
                return
            step_s = time.perf_counter() - self.t0
            trainer_figures = {
                k: v
                for k, v in logs.items()
                if not k.startswith(("reward", "rewards/", "frac_reward")) and isinstance(v, (int, float))
            }
            share = rollouts.last.get("rollouts/in_loss_share", 1.0)
            if micro_batch_size == 1 and share < 1.0:
                # the trainer averages these over micro-batches; one without loss tokens counts as 0
                for key in ("entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"):
                    if key in trainer_figures:
                        trainer_figures[key] = trainer_figures[key] / share if share > 0 else None
            last = rollouts.last
            # with rollouts sampled ahead, the step waited only for what was not yet sampled
            waited = last.get("time/rollout_blocked_s", last.get("time/rollout_s", 0.0)) + last.get("sync/wait_s", 0.0)
            record = {
                **trainer_figures,
                **last,
                "time/step_s": step_s,
                "time/update_s": max(0.0, step_s - waited - last.get("sync/seconds", 0.0)),
            }
            self.log.write(state.global_step, record)

        def on_train_end(self, args, state, control, **kw):  # noqa: ANN001
            if self.log is not None:
                self.log.close()

    return _Log()


def _grpo_config(run: RunPlan, bf16: bool, max_position_embeddings: int, progress: bool) -> Any:
    """TRL's ``GRPOConfig`` for the run: one optimizer step per batch, the token-level DAPO
    loss with clip-higher, no KL, the advantages passed through unscaled."""
    import torch
    from trl import GRPOConfig

    settings = run.settings
    return GRPOConfig(
        output_dir=str(run.out / "checkpoints"),
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=settings.warmup_ratio,
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        per_device_train_batch_size=settings.micro_batch_size,
        gradient_accumulation_steps=run.accumulation,
        num_generations=settings.group_size,
        num_iterations=1,
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps or -1,
        beta=0.0,
        loss_type="dapo",
        epsilon=settings.epsilon_low,
        epsilon_high=settings.epsilon_high,
        scale_rewards="none",
        temperature=settings.temperature,
        top_p=settings.top_p,
        mask_truncated_completions=False,
        use_vllm=settings.use_vllm,
        vllm_mode=settings.vllm_mode,
        # vLLM's reply budget per turn
        max_completion_length=settings.max_tokens_per_turn or turn_budget(max_position_embeddings),
        bf16=bf16,
        gradient_checkpointing=None,  # the deprecated alias
        activation_checkpointing=settings.gradient_checkpointing,
        activation_checkpointing_kwargs=dict(CHECKPOINTING_KWARGS) if settings.gradient_checkpointing else None,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.keep_checkpoints,
        logging_steps=1,
        report_to=list(run.report_to) or "none",
        seed=settings.seed,
        disable_tqdm=not progress,
        use_cpu=not torch.cuda.is_available(),
    )


def _open_server(settings: RLSettings) -> tuple[Any, Any]:
    """The rollout servers (a :class:`~websailor.train.rl.servers.ServerPool`) and their
    weight sync, all checked (``(None, None)`` without ``rollout_server``).

    Raises:
        ConfigError: a server cannot serve rollouts or take weights (:meth:`ServerWeightSync.check`),
            naming its URL.
    """
    if not settings.rollout_servers:
        return None, None
    from websailor.models import load_model
    from websailor.train.rl.servers import ServerPool
    from websailor.train.rl.sync import ServerWeightSync

    drop = settings.on_server_loss == "continue"
    if settings.weight_transfer == "nccl":
        from websailor.train.rl.nccl_sync import NCCLWeightSync

        sync = NCCLWeightSync(settings.rollout_servers, timeout_s=settings.sync_timeout_s, drop_failed=drop)
    else:
        sync = ServerWeightSync(
            settings.rollout_servers,
            timeout_s=settings.sync_timeout_s,
            sync_dir=settings.sync_dir,
            server_dir=settings.server_sync_dir,
            drop_failed=drop,
        )
    sync.check()
    # the pool handles a server that dies (on_server_loss), not a breaker: shorter retries than
    # the breaker's window (4 tries, back-offs of 0.5, 1 and 2 s), so a lost server is found sooner
    models = [load_model(spec, check=True, max_attempts=4, backoff_s=0.5) for spec in settings.rollout_servers]
    for m in models:
        m.breaker = None
    return ServerPool(models, sync.servers), sync


def train_rl(
    data_path: str | Path,
    model: str,
    out: str | Path,
    settings: RLSettings | None = None,
    split: str | None = None,
    env: EnvSpec | None = None,
    progress: bool = True,
    report_to: Sequence[str] | str | None = None,
    engine: str | None = None,
) -> dict:
    """Train ``model`` with RL on the questions of ``data_path`` in the local environment
    (offline Wikipedia), the real web, or a tool server's.

    Rollouts are sampled by the local engine from the trainer's weights, or, with
    ``settings.rollout_server`` (a ``vllm:NAME@URL`` spec), by that vLLM server, whose weights
    are synced from the trainer's after every optimizer step (:mod:`websailor.train.rl.sync`);
    the server is checked before any rollout and, before a sampling prefilter, given the
    starting weights.

    Args:
        data_path: QA JSONL (``synth`` output; ``split`` selects its items) or any format
            ``eval`` reads.
        model: ``smollm2`` or ``hf:DIR`` (usually the SFT model).
        out: run directory; rerunning the same command resumes from its latest checkpoint, and
            rerunning it with a larger ``max_steps`` continues a finished run.
        settings: hyper-parameters (paper V2 defaults when ``None``).
        split: which split of a ``synth`` file to train on (``train``, ``test``, ``all``;
            default ``train``); other formats have no splits.
        env: the rollouts' environment (default: the local tools over the embedded corpus); its
            :meth:`~websailor.tools.environment.EnvSpec.record` is part of the run's identity.
        progress: progress bars.
        report_to: TRL's experiment trackers (``tensorboard``, ``wandb``, ``mlflow``,
            ``trackio``; :func:`websailor.train.common.check_report_to`), beside the step log
            and its TensorBoard scalars that every run writes. TRL's TensorBoard files go to
            ``out/trl_tensorboard``.
        engine: ``auto`` or ``vllm``: without ``settings.rollout_server``, start a vLLM server
            for ``model`` once the run is checked, sample there with the weights synced every
            step, and stop it at the end (``auto``: only when ``max_steps x batch_size`` reaches
            the server's break-even and vLLM is installed; :mod:`websailor.models.serving`);
            ``local`` or ``None``: the local engine.

    Returns:
        The summary written to ``out/rl_summary.json``: settings, item counts (and prefilter
        counts), steps, seconds, and the per-step log.

    Raises:
        ConfigError: bad settings for this world size, model or tokenizer problems (a chat
            template that cannot be split into per-turn pieces among them), ``out``
            holding another run, nothing left after the prefilter, a rollout server that is
            not running or cannot take weights.
        InputFormatError: an unreadable or empty QA file.
        ModelError: the judge (or the policy) failed on every rollout of several batches; the
            rollout server failed during a step, or a weight sync failed
            (:class:`~websailor.train.rl.sync.WeightSyncError`): the step is not trained and a
            rerun resumes from the last checkpoint.
    """
    from websailor.tools.environment import EnvSpec, open_environment

    settings = settings or RLSettings()
    reporters = tuple(check_report_to(report_to))  # an unknown or missing tracker fails before any work
    out = Path(out)
    run = plan_run(data_path, model, out, settings, split, env or EnvSpec())
    if isinstance(run, dict):
        return run
    run.report_to = reporters
    tool_env = open_environment(env or EnvSpec())  # the tools answer before a server is started
    try:
        served = _serve_policy(run, engine)
        try:
            return _open_and_train(run, data_path, model, tool_env, progress)
        finally:
            if served is not None:
                served.close()
    finally:
        tool_env.close()
        if out.exists():
            tool_env.record_metrics(out / "tool_metrics.jsonl")


def _serve_policy(run: RunPlan, engine: str | None) -> Any:
    """A vLLM rollout server started for the starting model when ``engine`` (``auto``,
    ``vllm``) asks for one and the run names none (:func:`websailor.models.serving.serve_for_job`;
    ``auto`` weighs ``max_steps x batch_size`` rollouts); it becomes the run's
    ``rollout_server``. ``None``: no server started.

    Raises:
        ConfigError: ``vllm`` where the sync cannot serve (LoRA, TRL's own vLLM) or without
            vLLM installed; a server that cannot start.
    """
    settings = run.settings
    if engine in (None, "local") or settings.rollout_server:
        return None
    if settings.lora or settings.use_vllm:
        if engine == "vllm":
            why = "lora (the weight sync writes whole models)" if settings.lora else "use_vllm (TRL's own engine)"
            raise ConfigError(f"--engine vllm cannot serve RL rollouts with {why}; use --engine local")
        return None
    from transformers import AutoConfig

    from websailor.models.serving import serve_for_job

    rollouts = (settings.max_steps or 10**6) * settings.batch_size
    context = int(getattr(AutoConfig.from_pretrained(run.model_dir), "max_position_embeddings", 0) or 0)
    limit = settings.max_context_tokens if context and settings.max_context_tokens < context else None
    served = serve_for_job(run.model, engine, rollouts, max_model_len=limit)
    if served.engine != "vllm":
        return None
    run.settings = settings.model_copy(update={"rollout_server": [served.spec]})
    return served


def _open_and_train(run: RunPlan, data_path: str | Path, model: str, tool_env: Any, progress: bool) -> dict:
    """Open the rollout server, choose the items, train with the tools of ``tool_env`` (see
    :func:`train_rl`)."""
    settings, out = run.settings, run.out
    if settings.max_staleness and not settings.rollout_servers:
        raise ConfigError(
            f"max_staleness {settings.max_staleness} samples the next batch on rollout servers while one trains: "
            "give --rollout-server (or --engine vllm), or set max_staleness to 0"
        )
    server, sync = _open_server(settings)
    try:
        if run.stale:  # a run that never trained, with other settings: its rollouts and choice are not ours
            sampled = run.stale - PREFILTER_NEUTRAL  # what the prefilter's rollouts would differ in
            for name in (LOG_FILE, ROLLOUTS_FILE, PREFILTER_FILE, *(["prefilter_rollouts.jsonl"] if sampled else [])):
                (out / name).unlink(missing_ok=True)
            if not sampled and (out / "prefilter_rollouts.jsonl").exists():
                logger.info("the prefilter's rollouts are kept: %s do not change them", ", ".join(sorted(run.stale)))
        out.mkdir(parents=True, exist_ok=True)
        judge = _reward_judge(settings, data_path, out)
        if is_main_process():
            (out / SETTINGS_FILE).write_text(json.dumps(run.record, indent=2), encoding="utf-8")
        net = load_trainable_model(run.model_dir, settings)
        if sync is not None:  # every server reads the sync's folder, or one line before any rollout
            _probe_together(sync, net, 0 if run.resume is None else None)  # a sampling prefilter rates these
        policy = settings.rollout_servers[0] if settings.rollout_servers else model  # the prefilter's sampler
        choose_items(run, judge, tool_env.tools, tool_env.name, policy, progress)
        return _train(run, net, judge, tool_env, server, sync, progress)
    finally:
        if server is not None:
            server.close()


def _probe_together(sync: Any, net: Any, step: int | None) -> None:
    """The first weight sync (:meth:`ServerWeightSync.probe`): the main process pushes; under a
    launcher every process then learns whether it worked, so all stop at once when it did not
    (the others would otherwise go on into the trainer and wait there for the one that stopped).

    Raises:
        ConfigError: the probe failed (on the main process: its line; on the others: a pointer
            to it).
    """
    world = world_size()
    main = is_main_process()  # under a launcher one process pushes
    error: ConfigError | None = None
    try:
        sync.probe(net, step, main)
    except ConfigError as e:
        error = e
    if world > 1:
        import torch
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())  # the process group TRL's arguments would open
        import torch.distributed as dist

        failed: list[Any] = [None] * world
        dist.all_gather_object(failed, error is not None)
        if error is None and any(failed):
            raise ConfigError("the first weight sync failed on the main process of this launch (its line says why)")
    if error is not None:
        raise error


def _reward_judge(settings: RLSettings, data_path: str | Path, out: Path) -> Any:
    """The rollouts' judge: the QA judge of ``settings.reward``, or on report tasks the RACE
    judge (:class:`~websailor.train.rl.report_reward.ReportJudge`); replies are cached in
    ``out`` so a resumed run asks nothing twice."""
    from websailor.judge import judge_model, load_judge

    if settings.task != "report":
        return load_judge(settings.reward, cache=out / "judge_cache.sqlite")  # LLM verdicts survive a resume
    from websailor.models import load_model
    from websailor.train.rl.report_reward import ReportJudge, read_rubric, report_training_tasks

    _, tasks = report_training_tasks(data_path, settings.language)
    rubric = read_rubric(settings.rubric) if settings.rubric is not None else None
    model = judge_model(load_model(settings.reward[4:], check=True))
    return ReportJudge(model, tasks, rubric, cache=out / "race_cache.sqlite")


def _train(run: RunPlan, net: Any, judge: Any, tool_env: Any, server: Any, sync: Any, progress: bool) -> dict:
    """Build the trainer over the chosen items, train, save the model and the summary."""
    from datasets import Dataset

    from websailor.precision import choose_precision
    from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
    from websailor.train.rl.update import AgentGRPOTrainer
    from websailor.train.rl_log import read_log

    settings, out = run.settings, run.out
    precision = choose_precision(settings.precision, net.config)
    limits = limit_training_memory(settings.memory_limits)
    if is_main_process():  # under a launcher, the one process that writes them
        for name in (LOG_FILE, ROLLOUTS_FILE):
            trim_jsonl(out / name, run.step0)
    if run.resume is not None and settings.max_steps is not None and run.step0 >= settings.max_steps:
        # the trainer would still sample one more batch: take the model of that checkpoint as it is
        logger.info("%s: checkpoint %d reaches --max-steps %d; saving its model", out, run.step0, settings.max_steps)
        summary = run.summary(run.step0, precision, limits)
        return finish_from_checkpoint(run.resume, out, run.model_dir, run.tokenizer, settings, summary)

    rollouts = AgentRollouts(
        {it.question: it for it in run.items},
        tool_env.tools,
        judge,
        RolloutSettings(
            settings.group_size,
            settings.algo,
            build_agent_config(settings),
            settings.concurrency,
            settings.seed,
            skip_zero_advantage=settings.skip_zero_advantage,
            max_env_failures=settings.max_env_failures,
            on_server_loss=settings.on_server_loss,
            max_staleness=settings.max_staleness,
            exclude_unanswered=settings.unanswered_negatives == "exclude",  # V2's rule; DUPO has none
        ),
        out / ROLLOUTS_FILE,
        env=tool_env.name,
        server=server,
        sync=sync,
    )

    def advantage(prompts: list, completions: list, advantage: list, **kw: Any) -> list[float]:
        """The advantage computed by the rollout function, passed through as the reward."""
        return list(advantage)

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": it.question}]} for it in run.items])
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # TRL 1.16 still calls transformers' old gradient_checkpointing_* names (around generation and
    # the old log-probabilities' pass): three FutureWarnings a run that a user cannot act on
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.*deprecated", category=FutureWarning)
    with tensorboard_dir(out / "trl_tensorboard", run.report_to):
        trainer = AgentGRPOTrainer(
            model=net,
            lm_head=settings.lm_head,
            reward_funcs=[advantage],
            args=_grpo_config(run, precision.bf16, net.config.max_position_embeddings, progress),
            train_dataset=dataset,
            processing_class=run.tokenizer,
            rollout_func=rollouts,
            callbacks=[_callback(out, rollouts, settings.micro_batch_size, run.resume is not None)],
        )
    trainer.look_ahead = settings.max_staleness > 0  # the next batch's prompts, to sample it ahead
    if sync is not None:
        from websailor.train.rl.sync import attach

        attach(trainer, sync, settings.importance_sampling, settings.importance_sampling_cap)
    t0 = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(run.resume) if run.resume else None)
    finally:
        rollouts.close()
    seconds = time.perf_counter() - t0
    save_model(trainer, out, run.model_dir, settings.lora)
    summary = {
        **run.summary(trainer.state.global_step, precision, limits),
        "lm_head": trainer.lm_head,
        "train_seconds": round(seconds, 1),
        "log": read_log(out),
    }
    if trainer.is_world_process_zero():
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
