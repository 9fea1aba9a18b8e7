"""The settings of an RL run (:class:`RLSettings`), the names of its files, and what follows
from the settings alone: the micro-batches of a step, the agent's budgets, the training
questions and the prefilter's band."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import Field, field_validator, model_validator

from websailor.errors import ConfigError, InputFormatError
from websailor.questions import Question, load_questions, resolve_split
from websailor.train.common import TrainSettings, read_settings

SETTINGS_FILE = "rl_settings.json"
SUMMARY_FILE = "rl_summary.json"
LOG_FILE = "rl_log.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
PREFILTER_FILE = "prefilter.json"
#: settings that may change between a run and its continuation (not part of a run's identity);
#: ``concurrency`` schedules rollouts whose sampling seeds come from their numbers, not from it
CONTINUABLE = (
    "max_steps",
    "concurrency",
    "rollout_server",
    "sync_timeout_s",
    "sync_dir",
    "server_sync_dir",
    "on_server_loss",
    "weight_transfer",
    "keep_checkpoints",
)
#: settings added after runs had begun, with the value those runs had: a setting at that value
#: is left out of a run's identity record, so the folders of those runs resume
ADDED_SETTINGS: dict[str, Any] = {"max_staleness": 0, "unanswered_negatives": "exclude"}
#: the moderate band of WebSailor's filter: solved sometimes but not always
DEFAULT_BAND = "0<c<k"


def parse_band(band: str) -> tuple[float, float] | None:
    """The pass-rate interval ``(lo, hi)`` of a ``prefilter_band``; ``None`` for the default
    :data:`DEFAULT_BAND` (``0 < correct < k``).

    Raises:
        ValueError: neither ``0<c<k`` nor ``LO:HI`` with ``0 <= LO <= HI <= 1``.
    """
    text = band.replace(" ", "")
    if text == DEFAULT_BAND:
        return None
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo = hi = float("nan")
    if not sep or not 0 <= lo <= hi <= 1:
        raise ValueError(
            f"prefilter_band {band!r}: use {DEFAULT_BAND} (solved sometimes, not always) or a pass-rate "
            "interval LO:HI with 0 <= LO <= HI <= 1, e.g. 0.1:0.75"
        )
    return lo, hi


def band_verdict(correct: int, k: int, band: str) -> str:
    """``"kept"``, ``"too_easy"`` or ``"too_hard"`` for an item solved ``correct`` times in
    ``k`` under ``band`` (see :func:`parse_band`)."""
    from websailor.synth.difficulty import verdict

    interval = parse_band(band)
    if interval is None:
        return verdict(correct, k, "moderate")
    rate = correct / k
    return "too_hard" if rate < interval[0] else "too_easy" if rate > interval[1] else "kept"


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def _server_key(base_url: str) -> tuple[str, str, int | None, str]:
    """What makes two base URLs the same server: scheme, host (every loopback name one), port
    (the scheme's default when none is written) and path, so ``http://localhost:8000/v1`` and
    ``http://127.0.0.1:8000/v1/`` are one server."""
    url = httpx.URL(base_url)
    host = "127.0.0.1" if url.host.lower() in _LOOPBACK else url.host.lower()
    port = url.port or {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, host, port, url.path.rstrip("/")


class RLSettings(TrainSettings):
    """Every knob of an RL run; a ``--config`` YAML or JSON file holds any subset of them.

    Attributes:
        algo: ``v2`` (leave-one-out advantage, 0/1 reward, negative exclusion) or ``dupo``
            (group-normalized advantage, 0.1 format + 0.9 answer, duplication of groups with
            spread).
        group_size: rollouts per question (paper: 8).
        batch_size: rollouts per optimizer step over all devices (paper V2: 128); a multiple
            of ``group_size``.
        micro_batch_size: rollouts per forward and backward pass on one device.
        learning_rate: constant after warm-up (paper V2: 1e-6).
        epsilon_low, epsilon_high: clip range of the importance ratio (clip-higher, DAPO).
        temperature, top_p: rollout sampling (paper V2: 1.0 and 1.0).
        max_calls, max_tokens_per_turn, max_context_tokens, timeout_s: the agent's budgets
            (``max_tokens_per_turn`` unset: the policy's own, :func:`websailor.models.hf.turn_budget`;
            the paper config sets 8,192).
        reward: judge spec: ``em``, ``f1[:T]`` or ``llm:MODEL_SPEC``.
        prefilter: run the starting model this many times per item before training and keep
            the items it solves sometimes but not always (0: off). With ``prefilter_from``: the
            graded rollouts each item needs (0: as many as the file has for its items).
        prefilter_from: take the moderate items from rollouts that already exist instead of
            sampling: an ``eval`` output directory (or its ``trajectories.jsonl``), an RL run
            directory or its ``prefilter_rollouts.jsonl`` (:func:`prefilter_from_file`).
        prefilter_band: which items are moderate: ``0<c<k`` (solved sometimes, not always;
            the default) or a pass-rate interval ``LO:HI`` (``0.1:0.75`` keeps items with
            ``0.1 <= correct / k <= 0.75``).
        concurrency: rollouts run at once (they share batched generation).
        max_env_failures: tool calls per rollout the environment may degrade (a provider
            outage, an unreachable tool server) and the rollout still get a reward; beyond it
            the rollout has none and its group is skipped (``groups/env_failed``), and the
            prefilter does not count it (default 0: any such call).
        skip_zero_advantage: do not spend a forward and backward pass on rollouts without
            gradient (advantage exactly 0, or left out of the loss); see
            :class:`websailor.train.rl.rollouts.RolloutSettings`.
        max_steps: optimizer steps; ``None`` runs ``epochs`` over the questions.
        (LoRA, precision, gradient checkpointing: :class:`websailor.train.common.TrainSettings`.)
        use_vllm, vllm_mode: generate with TRL's vLLM integration on GPUs (colocate mode:
            multi-turn rollouts of different lengths cannot keep server mode's lock-step).
        rollout_server: sample the rollouts (and the prefilter's) on these vLLM servers, each
            a ``vllm:NAME@URL`` spec (``websailor serve model`` prints it; one spec, a list, or
            specs separated by commas), their weights synced from the trainer's after every
            optimizer step; a rollout goes to the server with the fewest in flight
            (:mod:`websailor.train.rl.servers`). Unset: the local engine samples from the
            trainer's own weights. A run may resume against other servers.
        on_server_loss: what a batch does when a server fails during it: ``stop`` (the
            default: the step stops untrained, as with one server, and a rerun resumes from
            the last checkpoint) or ``continue`` (the failed rollouts are rerun on the servers
            that still answer, and the server that does not is dropped for the rest of the
            run; the step stops when none is left).
        weight_transfer: how the weights reach the rollout servers: ``file`` (the default: a
            checkpoint in ``sync_dir`` that every server reloads; CPUs and GPUs) or ``nccl``
            (streamed GPU to GPU through vLLM's weight-transfer endpoints,
            :mod:`websailor.train.rl.nccl_sync`; not yet run on a GPU).
        max_staleness: K, asynchronous rollouts with bounded staleness: with K >= 1 the next
            batch is sampled on the rollout servers while the current one trains, and no
            rollout is trained on more than K policy versions after the weights that sampled it
            (one batch is sampled ahead, so at most 1 is realized;
            :mod:`websailor.train.rl.ahead`). 0, the default: every batch on-policy. A config
            may also write it as ``async: {max_staleness: K}``.
        unanswered_negatives: V2's rollouts that never answered (cut by the call, context or time
            budget) and carry a negative advantage: ``exclude`` them from the loss (the paper's
            rule, WebSailor-V2 Sec. 5: a rollout cut by the budget is no evidence that its
            reasoning was wrong; the default) or ``keep`` them, so that what runs rollouts out
            of budget is pushed down like a wrong answer (with a small budget the rule can shield
            a habit of repeated calls: docs/experiments.md). V2 only: DUPO leaves no rollout
            out, so one config can serve both algorithms.
        sync_dir: the folder the weight sync writes the policy's weights to (default: shared
            memory, ``/dev/shm``, which only servers on this machine read); a shared
            filesystem's path when the servers run elsewhere.
        server_sync_dir: that folder's path as the servers see it (default: ``sync_dir``);
            checked with a first sync before any rollout.
        importance_sampling, importance_sampling_cap: with a rollout server, TRL's correction
            for the mismatch between the server's sampling probabilities (bf16) and the
            trainer's: ``token_truncate`` (each token's ratio capped at the cap, the default),
            ``token_mask``, ``sequence_truncate``, ``sequence_mask``, or ``none``.
        sync_timeout_s: seconds one weight sync may take before the step stops.
        task: ``qa`` (the data are questions with gold answers) or ``report`` (the data are
            report tasks in DeepResearch Bench's layout; the reward is each report's RACE score
            by the ``reward`` judge, ``llm:MODEL_SPEC``; :mod:`websailor.train.rl.report_reward`).
        rubric: report tasks: a JSON rubric (the benchmark's criteria layout) scoring every
            task instead of the task file's criteria.
        language: report tasks: train only on the tasks in this language (``en``, ``zh``).
        save_steps: optimizer steps between checkpoints (default 1: after every step, so a run
            killed at any moment loses at most the step in progress; the last
            ``keep_checkpoints`` are kept).
    """

    algo: Literal["v2", "dupo"] = "v2"
    group_size: int = Field(8, ge=1)
    batch_size: int = Field(128, ge=1)
    micro_batch_size: int = Field(1, ge=1)
    learning_rate: float = Field(1e-6, gt=0)
    warmup_ratio: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    epsilon_low: float = Field(0.2, gt=0, lt=1)
    epsilon_high: float = Field(0.28, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    max_calls: int = Field(100, ge=1)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    max_context_tokens: int = Field(128_000, ge=256)
    timeout_s: float = Field(150 * 60, gt=0)
    reward: str = "em"
    prefilter: int = Field(0, ge=0)
    prefilter_from: str | None = None
    prefilter_band: str = DEFAULT_BAND
    concurrency: int = Field(8, ge=1)
    max_env_failures: int = Field(0, ge=0, strict=True)
    skip_zero_advantage: bool = True
    epochs: float = Field(1.0, gt=0)
    max_steps: int | None = Field(None, ge=1)
    use_vllm: bool = False
    vllm_mode: Literal["colocate"] = "colocate"
    rollout_server: list[str] | None = None
    on_server_loss: Literal["stop", "continue"] = "stop"
    max_staleness: int = Field(0, ge=0, strict=True)
    unanswered_negatives: Literal["exclude", "keep"] = "exclude"
    weight_transfer: Literal["file", "nccl"] = "file"
    sync_dir: str | None = None
    server_sync_dir: str | None = None
    importance_sampling: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none"] = (
        "token_truncate"
    )
    importance_sampling_cap: float = Field(2.0, gt=1)
    sync_timeout_s: float = Field(300.0, gt=0)
    task: Literal["qa", "report"] = "qa"
    rubric: str | None = None
    language: Literal["en", "zh"] | None = None
    save_steps: int = Field(1, ge=1)
    seed: int = Field(0, ge=0, lt=2**32)

    @field_validator("rollout_server", mode="before")
    @classmethod
    def _server_list(cls, value: Any) -> Any:
        """One spec, specs separated by commas, or a list of them; ``None`` or nothing: none."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, (list, tuple)):  # each element may itself hold several (--rollout-server A,B)
            specs = (
                [part.strip() for v in value for part in v.split(",")]
                if all(isinstance(v, str) for v in value)
                else value
            )
            specs = [v for v in specs if v != ""]
            return specs or None
        return value

    @property
    def rollout_servers(self) -> list[str]:
        """The rollout servers' specs (empty: the local engine)."""
        return list(self.rollout_server or [])

    @classmethod
    def file_values(cls, values: dict[str, Any]) -> dict[str, Any]:
        """A config file's values as settings (``async: {max_staleness: K}`` flattened), before
        the command line's options override them."""
        return cls._async_section(values)

    @model_validator(mode="before")
    @classmethod
    def _async_section(cls, data: Any) -> Any:
        """``async: {max_staleness: K}`` in a config file is ``max_staleness: K``."""
        if not isinstance(data, dict) or "async" not in data:
            return data
        section = data["async"]
        if not isinstance(section, dict) or set(section) - {"max_staleness"}:
            raise ValueError(f"async: {section!r}: write async: {{max_staleness: K}} with K an integer >= 0")
        data = {k: v for k, v in data.items() if k != "async"}
        if "max_staleness" in section:
            if data.get("max_staleness") not in (None, section["max_staleness"]):
                raise ValueError("max_staleness is set twice (async.max_staleness and max_staleness): keep one")
            data["max_staleness"] = section["max_staleness"]
        return data

    @model_validator(mode="after")
    def _groups_fit(self) -> RLSettings:
        if self.group_size < 2:
            raise ValueError(
                f"group_size {self.group_size}: a group of one rollout has no baseline (every advantage "
                "would be 0); use 2 or more (paper: 8)"
            )
        if self.batch_size % self.group_size:
            raise ValueError(
                f"batch_size {self.batch_size} is not a multiple of group_size {self.group_size}: "
                "a batch holds whole groups"
            )
        if self.micro_batch_size > self.batch_size:
            raise ValueError(
                f"micro_batch_size ({self.micro_batch_size}) is larger than batch_size ({self.batch_size})"
            )
        if self.rollout_server is not None:
            from websailor.models.vllm_server import parse_spec

            roots: dict[tuple, str] = {}
            for spec in self.rollout_server:
                try:
                    url = parse_spec(spec)[1]
                except ConfigError as e:
                    raise ValueError(f"rollout_server: {e}") from None
                seen = roots.get(_server_key(url))
                if seen is not None:
                    also = "" if seen == url else f" (also as {url})"
                    raise ValueError(f"rollout_server names {seen} twice{also}: list each server once")
                roots[_server_key(url)] = url
            if self.lora:
                raise ValueError(
                    "rollout_server with lora: the weight sync writes whole models, not adapters; train without lora"
                )
            if self.use_vllm:
                raise ValueError("rollout_server and use_vllm: choose one rollout engine")
        if self.task == "report":
            if not self.reward.startswith("llm:") or not self.reward[4:].strip():
                raise ValueError(
                    f"reward {self.reward!r}: report tasks are rewarded with their RACE score, which needs a judge "
                    "model: reward llm:MODEL_SPEC"
                )
            if self.prefilter or self.prefilter_from:
                raise ValueError(
                    "prefilter with task report: the prefilter keeps items solved sometimes, which a report's "
                    "graded score does not define; train without it"
                )
        elif self.rubric is not None or self.language is not None:
            raise ValueError("rubric and language are settings of report tasks: set task report, or leave them out")
        if self.server_sync_dir is not None and self.sync_dir is None:
            raise ValueError(
                "server_sync_dir without sync_dir: give sync_dir, the folder the trainer writes the weights to"
            )
        if (self.sync_dir is not None or self.on_server_loss != "stop") and not self.rollout_server:
            raise ValueError(
                "sync_dir, server_sync_dir and on_server_loss are settings of rollout servers: set rollout_server"
            )
        if self.weight_transfer == "nccl" and self.sync_dir is not None:
            raise ValueError("sync_dir with weight_transfer nccl: nothing is written to a folder; leave sync_dir out")
        if self.weight_transfer == "nccl" and not self.rollout_server:
            raise ValueError("weight_transfer nccl is a setting of rollout servers: set rollout_server")
        if self.max_staleness and (self.use_vllm or self.lora):
            raise ValueError(
                "max_staleness samples ahead on rollout servers, which use_vllm and lora runs do not use; set it to 0"
            )
        if self.prefilter == 1:
            raise ValueError("prefilter 1: one rollout per item cannot tell a moderate item; use 2 or more (paper: 8)")
        parse_band(self.prefilter_band)
        return self


def load_settings(config: str | Path | None = None, **overrides: Any) -> RLSettings:
    """RL settings from an optional YAML/JSON ``config`` file, then ``overrides`` (``None``
    values are ignored).

    Raises:
        ConfigError: unreadable file, unknown keys, or values of the wrong type or range.
    """
    return read_settings(RLSettings, "RL", config, **overrides)


def accumulation_steps(settings: RLSettings, world: int) -> int:
    """Micro-batches per optimizer step on each of ``world`` processes, so that one step
    consumes exactly one batch of rollouts.

    Raises:
        ConfigError: the batch does not split evenly over the processes, or a process's share
            does not hold whole groups (group advantages are computed where the rollouts run).
    """
    per_process, rest = divmod(settings.batch_size, world)
    if rest or per_process % settings.micro_batch_size:
        raise ConfigError(
            f"batch_size {settings.batch_size} does not split into {world} processes x micro-batches "
            f"of {settings.micro_batch_size}"
        )
    if per_process % settings.group_size:
        raise ConfigError(
            f"each of the {world} processes gets {per_process} rollouts, not whole groups of "
            f"{settings.group_size}: raise batch_size to a multiple of {world * settings.group_size}"
        )
    return per_process // settings.micro_batch_size


def build_agent_config(settings: RLSettings) -> Any:
    """The agent's budgets and sampling during RL rollouts."""
    from websailor.agent.loop import AgentConfig
    from websailor.models.base import SamplingParams

    return AgentConfig(
        max_calls=settings.max_calls,
        max_context_tokens=settings.max_context_tokens,
        answer_nudge_tokens=settings.max_context_tokens * 110 // 128,
        timeout_s=settings.timeout_s,
        max_tokens_per_turn=settings.max_tokens_per_turn,
        sampling=SamplingParams(temperature=settings.temperature, top_p=settings.top_p, presence_penalty=0.0),
        seed=settings.seed,
        task=settings.task,
        summarize_at=None,  # token-exact RL trains one sequence per rollout: no summaries
    )


def training_questions(path: str | Path, split: str | None = None) -> list[Question]:
    """The training questions of a QA file, read by :func:`websailor.questions.load_questions`:
    a ``synth`` file's ``split`` (default ``train``), or every item of any other layout; one
    record per question text.

    Raises:
        InputFormatError: an unreadable file, no items, ``split`` on a file without splits,
            or one question text with two different gold answers (TRL hands prompts back as
            text only).
    """
    items = load_questions(str(path), split=resolve_split(path, split, "train"))
    if not items:
        raise InputFormatError(f"{path}: no questions to train on")
    seen: dict[str, Question] = {}
    for it in items:
        other = seen.setdefault(it.question, it)
        if other.gold != it.gold:
            raise InputFormatError(
                f"{path}: items {other.id} and {it.id} ask the same question with different gold "
                "answers or aliases; remove one or merge them"
            )
    return list(seen.values())
