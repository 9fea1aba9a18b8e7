"""The ``rollout_func`` of TRL's ``GRPOTrainer``: our ReAct agent, run with the policy being
trained, in the tool environment, graded by a judge, turned into token sequences with
per-slot advantages.

TRL hands the function the prompts of one generation batch, each repeated ``group_size``
times in a row (one group per question). For each batch it:

1. runs every rollout with the current policy (multi-turn, real tool calls);
2. grades the final answers with the judge and computes the rewards
   (:mod:`websailor.train.rewards`);
3. plans the batch (:func:`websailor.train.advantages.plan_batch`): advantages, V2's negative
   exclusion, DUPO's duplication of groups with spread;
4. returns prompt ids, completion ids and an ``env_mask`` (0 on tool responses and on every
   token of a rollout left out of the loss), and passes each slot's advantage to the trainer
   as its "reward". The trainer runs with ``scale_rewards="none"``; each group's advantages
   sum to zero, so the trainer's ``reward - group mean`` returns them unchanged.

Every rollout is appended, with its step, reward, advantage and whether it entered the loss,
to ``rollouts.jsonl`` in the run directory; the batch's figures go to the step log.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websailor.agent.loop import Agent, AgentConfig
from websailor.agent.trajectory import Trajectory, repeated_tool_calls
from websailor.errors import ModelError, ServiceDown
from websailor.judge.base import Case, Judge
from websailor.log import get_logger
from websailor.memory import release_memory
from websailor.models.turns import TurnTemplate
from websailor.questions import Question
from websailor.train.advantages import plan_batch
from websailor.train.rewards import reward
from websailor.train.rl.servers import RoutedAgent
from websailor.train.rollout_tokens import rollout_tokens

logger = get_logger(__name__)


@dataclass
class RolloutSettings:
    """How the policy acts during RL. ``temperature`` must equal the trainer's (it scales the
    logits of the recomputed log-probabilities). ``max_failed_steps``: batches in a row whose
    every reward is missing (the judge, the policy or the environment is down) before training
    stops. ``max_env_failures``: tool calls of a rollout the environment may degrade (an
    outage, not the policy's doing) and the rollout still get a reward; beyond it the rollout
    has no reward and its group is skipped (logged as ``groups/env_failed``).
    ``on_server_loss``: with rollout servers, what a rollout that failed on its server does to
    the batch: ``stop`` the step, or ``continue`` (rerun it on the servers that still answer,
    dropping the one that does not; :mod:`websailor.train.rl.servers`). ``max_staleness``: with
    rollout servers, K >= 1 samples the next batch while the current one trains
    (:mod:`websailor.train.rl.ahead`); 0 keeps every batch on-policy. ``exclude_unanswered``:
    V2 leaves out of the loss the rollouts that never answered and carry a negative advantage
    (:func:`websailor.train.advantages.v2_loss_mask`).

    ``skip_zero_advantage``: a rollout left out of the loss, or whose advantage is exactly 0,
    has no gradient; its completion is replaced by one masked token so the update does not
    spend a forward and backward pass on it. The token-level loss is then averaged over the
    tokens that carry an advantage, a per-step scale that Adam's normalization absorbs."""

    group_size: int
    algo: str
    agent: AgentConfig
    concurrency: int = 8
    seed: int = 0
    max_failed_steps: int = 3
    skip_zero_advantage: bool = True
    max_env_failures: int = 0
    on_server_loss: str = "stop"
    max_staleness: int = 0
    exclude_unanswered: bool = True


class AgentRollouts:
    """Callable as TRL's ``rollout_func(prompts, trainer)``.

    Args:
        items: the training questions by question text (the prompts TRL hands back carry the
            text only).
        tools: the environment's tools by name.
        judge: grades final answers (``em``, ``f1`` or an LLM judge).
        settings: group size, algorithm, agent budgets and sampling.
        rollouts_path: JSONL every graded rollout is appended to.
        server: the vLLM rollout servers (a :class:`~websailor.train.rl.servers.ServerPool`) and
            ``sync`` their :class:`~websailor.train.rl.sync.ServerWeightSync`: rollouts are
            sampled there, each on the least busy server, from the weights the sync pushed
            after the last optimizer step; ``None``: sampled here by the local engine from the
            trainer's own weights.

    Raises (when called):
        ValueError: prompts that do not come in groups of ``group_size``, or a question not
            among ``items``.
        ModelError: ``max_failed_steps`` batches in a row without a single graded rollout;
            with servers: a rollout that ended in a model error (a server failed mid-step; with
            ``on_server_loss: continue``, one still failed when rerun, or no server is left),
            or a server that does not hold this step's weights
            (:class:`~websailor.train.rl.sync.WeightSyncError`). Nothing of that batch is trained.
    """

    def __init__(
        self,
        items: dict[str, Question],
        tools: dict[str, Any],
        judge: Judge,
        settings: RolloutSettings,
        rollouts_path: Path,
        env: str = "local",
        server: Any = None,
        sync: Any = None,
    ) -> None:
        self.items = items
        self.tools = tools
        self.env = env
        self.judge = judge
        self.settings = settings
        self.rollouts_path = Path(rollouts_path)
        self.rng = random.Random(settings.seed)
        self.last: dict[str, float] = {}
        self._failed_steps = 0
        self._calls = 0
        self._warned_retokenized = False
        self.server = server
        self.sync = sync
        self._where: list[str | None] = []  # the server of each rollout of the last batch
        self.accelerator: Any = None  # the trainer's, set by each call: several processes share a batch
        self.ahead = None
        if server is not None and settings.max_staleness > 0:
            from websailor.train.rl.ahead import SampleAhead

            self.ahead = SampleAhead(settings.max_staleness)
            sync.before_push = self.ahead.settle  # the weights change only when no rollout runs

    # -- the steps of one batch -------------------------------------------------------
    def _questions(self, prompts: list) -> list[Question]:
        G = self.settings.group_size
        texts = [p[-1]["content"] if isinstance(p, list) else str(p) for p in prompts]
        if len(texts) % G:
            raise ValueError(f"{len(texts)} prompts do not split into groups of {G}")
        out = []
        for g in range(0, len(texts), G):
            if len(set(texts[g : g + G])) != 1:
                raise ValueError(f"prompts {g}..{g + G - 1} are not one question repeated {G} times")
            item = self.items.get(texts[g])
            if item is None:
                raise ValueError(f"a prompt is not among the training questions: {texts[g][:80]!r}")
            out += [item] * G
        return out

    def _run(self, agent: Any, items: list[Question], step: int, numbers: list[int] | None = None) -> list[Trajectory]:
        """The batch's rollouts, ``concurrency`` at a time; ``numbers``: the rollouts' numbers
        (their seeds; default :meth:`_numbers`). An interrupt (Ctrl-C, SIGTERM) cancels the
        rollouts not started and does not wait for those in flight."""
        numbers = numbers if numbers is not None else self._numbers(len(items), step)
        pool = ThreadPoolExecutor(max_workers=self.settings.concurrency, thread_name_prefix="rl-rollout")
        finished = False
        try:
            futures = [
                pool.submit(agent.run, it.question, it.id, k, it.gold.answer if it.gold else None)
                for k, it in zip(numbers, items)
            ]
            trajs = [f.result() for f in futures]
            finished = True
            return trajs
        finally:
            pool.shutdown(wait=finished, cancel_futures=not finished)

    def _numbers(self, n: int, step: int) -> list[int]:
        """The numbers of this process's ``n`` rollouts of ``step``, unique in the run whatever the
        process count: ``step * N + offset + i``, where ``N`` is the whole batch over every process
        and ``offset`` this process's place in it (TRL gives each process a contiguous slice), so
        one process with the whole batch samples the same rollouts as several with a slice each."""
        index, count = self._process()
        return [step * n * count + index * n + i for i in range(n)]

    def _process(self) -> tuple[int, int]:
        """This process's index and the process count (``(0, 1)`` outside a launcher)."""
        acc = self.accelerator
        return (int(acc.process_index), int(acc.num_processes)) if acc is not None else (0, 1)

    def _gather(self, value: Any) -> list[Any]:
        """``value`` of every process, in process order (``[value]`` in a single process)."""
        if self._process()[1] == 1:
            return [value]
        from accelerate.utils import gather_object

        return list(gather_object([value]))

    def _grade(self, items: list[Question], trajs: list[Trajectory]) -> list[bool | float | None]:
        """The judge's verdicts; ``None`` (no reward) for rollouts that ended in a model error
        or whose environment failed (:meth:`Trajectory.env_failed`): neither says anything
        about the policy. A judge whose ``scores`` attribute is true (the report judge) gives
        each grade's score in [0, 1] instead of its correctness."""
        limit = self.settings.max_env_failures
        graded = [i for i, t in enumerate(trajs) if t.termination != "model_error" and not t.env_failed(limit)]
        correct: list[bool | None] = [None] * len(trajs)
        if not graded:
            return correct
        try:
            grades = self.judge.grade([Case(items[i].question, trajs[i].prediction, items[i].gold) for i in graded])
        except ServiceDown:  # the judge was declared down: the step stops untrained (a rerun resumes)
            raise
        except Exception as e:  # a judge that raises instead of returning ungraded verdicts
            logger.warning("the judge failed on this batch (%s: %s): its rewards are missing", type(e).__name__, e)
            return correct
        scores = getattr(self.judge, "scores", False)
        for i, g in zip(graded, grades):
            correct[i] = (g.score if g.correct is not None else None) if scores else g.correct
        return correct

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        from trl.models.utils import unwrap_model_for_generation

        from websailor.models.hf import TransformersModel

        s = self.settings
        step = trainer.state.global_step
        self.accelerator = getattr(trainer, "accelerator", None)
        items = self._questions(prompts)
        tokenizer = trainer.processing_class
        t0 = time.perf_counter()
        config = self._config(step)
        version, sampled_s = step, None
        if self.server is not None:  # vLLM rollout servers, synced by TRL through self.sync before this call
            self.sync.require_current(step)
            ahead = self.ahead.take([it.question for it in items], step) if self.ahead is not None else None
            if ahead is None:
                trajs = self._on_servers(items, step, config)
            else:
                trajs, sampled_s, version = ahead
        elif getattr(trainer, "use_vllm", False):  # GPUs: the trainer's vLLM engine, weights synced by TRL
            from websailor.models.trl_vllm import TRLVLLMModel

            chat = TRLVLLMModel(trainer, f"policy@step{step}")
            try:
                trajs = self._run(Agent(chat, self.tools, config, env=self.env), items, step)
            finally:
                chat.close()
        else:
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator) as policy:
                was_training = policy.training
                policy.eval()
                chat = TransformersModel.from_loaded(
                    policy, tokenizer, name=f"policy@step{step}", max_batch=s.concurrency
                )
                try:
                    trajs = self._run(Agent(chat, self.tools, config, env=self.env), items, step)
                finally:  # a new engine each batch: no key/value of older weights is ever reused
                    chat.close()
                    policy.train(was_training)
        release_memory()  # the generation's caches, before the update allocates its own
        blocked_s = time.perf_counter() - t0
        out = self.batch(items, trajs, step, tokenizer, blocked_s if sampled_s is None else sampled_s, version)
        if self.ahead is not None:
            self.last["time/rollout_blocked_s"] = blocked_s
            self.last["sync/wait_s"] = self.ahead.wait_s
            self.last["async/mispredicted"] = float(self.ahead.mispredicted)
            self._sample_ahead(trainer, step)
        return out

    def _config(self, step: int) -> AgentConfig:
        """The agent's settings for the rollouts of ``step`` (its sampling seed)."""
        return AgentConfig(**{**vars(self.settings.agent), "seed": self.settings.seed + step})

    def _sample_ahead(self, trainer: Any, step: int) -> None:
        """Start sampling the next step's batch on the servers from the weights of ``step``,
        when the trainer knows its prompts (``trainer.next_prompts``) and the run has a next step."""
        prompts = getattr(trainer, "next_prompts", None)
        if not prompts or step + 1 >= int(getattr(trainer.state, "max_steps", 0) or 0):
            return
        items = self._questions(prompts)
        config = self._config(step + 1)
        self.ahead.start(
            [it.question for it in items], step + 1, step, lambda: self._on_servers(items, step + 1, config)
        )

    def close(self) -> None:
        """Stop sampling ahead (a batch in flight finishes and is dropped)."""
        if self.ahead is not None:
            self.ahead.close()

    def _on_servers(self, items: list[Question], step: int, config: AgentConfig) -> list[Trajectory]:
        """The batch's rollouts on the servers, each on the least busy one. Rollouts that
        failed on their server stop the step, or (``on_server_loss: continue``) are rerun once
        on the others, the servers that no longer answer being dropped.

        Raises:
            ModelError: as the class says.
        """
        pool = self.server
        pool.reset_counts()
        agents = [Agent(model, self.tools, config, env=self.env) for model in pool.models]
        routed = RoutedAgent(pool, agents)
        numbers = self._numbers(len(items), step)
        trajs = self._run(routed, items, step, numbers)
        failed = [k for k, t in enumerate(trajs) if t.termination == "model_error"]
        if failed and self.settings.on_server_loss == "continue":
            where = sorted({routed.where[numbers[k]] for k in failed if numbers[k] in routed.where})
            for i in where:
                if not pool.answers(i):
                    pool.drop(i, f"it failed during step {step + 1} and no longer answers")
            logger.warning(
                "step %d: %d of %d rollouts failed on their server; rerunning them on %d live server(s)",
                step + 1, len(failed), len(trajs), len(pool.live),
            )  # fmt: skip
            again = RoutedAgent(pool, agents, avoid=where)
            rerun = self._run(again, [items[k] for k in failed], step, [numbers[k] for k in failed])
            for k, t in zip(failed, rerun):
                trajs[k] = t
            routed.where.update(again.where)
            failed = [k for k, t in enumerate(trajs) if t.termination == "model_error"]
        self._where = [pool.roots[routed.where[k]] if k in routed.where else None for k in numbers]
        if failed:
            on = self._where[failed[0]]
            hint = (
                " (or set on_server_loss: continue)" if len(pool) > 1 and self.settings.on_server_loss == "stop" else ""
            )
            raise ModelError(
                f"step {step + 1}: {len(failed)} of {len(trajs)} rollouts failed on the rollout server"
                f"{f' {on}' if on else ''} ({trajs[failed[0]].error}); nothing of this batch is trained: restart the "
                f"server and rerun the same command to resume from the last checkpoint{hint}"
            )
        return trajs

    def batch(
        self,
        items: list[Question],
        trajs: list[Trajectory],
        step: int,
        tokenizer: Any,
        rollout_s: float = 0.0,
        version: int | None = None,
    ) -> dict[str, Any]:
        """Grade finished rollouts (``trajs[i]`` answers ``items[i]``; groups contiguous) and
        build the trainer's batch: ``prompt_ids``, ``completion_ids``, ``env_mask``,
        ``logprobs`` (the sampling log-probabilities of each completion token, 0.0 on
        environment tokens; ``None`` when a model turn was re-tokenized) and ``advantage`` per
        slot. Appends the rollouts to the rollouts file and keeps the batch's figures in
        :attr:`last`. ``version``: the policy version (optimizer steps) of the weights that
        sampled the rollouts (default ``step``: on-policy).

        Raises:
            ModelError: this is the ``max_failed_steps``-th batch in a row without a reward.
        """
        s = self.settings
        verdicts = self._grade(items, trajs)
        rewards = [reward(t, v, s.algo) for t, v in zip(trajs, verdicts)]
        # a report's score counts as correct when at least as good as the reference (0.5)
        correct = [v if v is None or isinstance(v, bool) else v >= 0.5 for v in verdicts]
        plan = plan_batch(rewards, [t.termination for t in trajs], s.group_size, s.algo, self.rng, s.exclude_unanswered)
        template = TurnTemplate(tokenizer, trajs[0].model if trajs else "policy")
        tokens = [rollout_tokens(t, tokenizer, template) for t in trajs]
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "logprobs": [], "advantage": []}
        used = []
        for slot, src in enumerate(plan.slots):
            tk = tokens[src]
            idle = not plan.in_loss[slot] or (s.skip_zero_advantage and plan.advantages[slot] == 0.0)
            used.append(not idle)
            out["prompt_ids"].append(tk.prompt_ids)
            if idle and s.skip_zero_advantage:
                # two tokens, so the trainer's masked means (entropy, clip fractions) see a sequence, not a value
                out["completion_ids"].append([tokenizer.eos_token_id] * 2)
                out["env_mask"].append([0, 0])
                out["logprobs"].append([0.0, 0.0])
            else:
                out["completion_ids"].append(tk.completion_ids)
                out["env_mask"].append([0] * len(tk.env_mask) if idle else tk.env_mask)
                out["logprobs"].append(tk.logprobs)
            out["advantage"].append(float(plan.advantages[slot]))
        retokenized = sum(tk.retokenized for tk in tokens)
        if retokenized and not self._warned_retokenized:
            self._warned_retokenized = True
            logger.warning(
                "step %d: %d model turns carry no sampled token ids (the backend returned none); they are "
                "re-tokenized from text, which may differ from what was sampled (tokens/retokenized_share in the log)",
                step + 1,
                retokenized,
            )
        if any(lp is None for lp in out["logprobs"]):
            out["logprobs"] = None  # some model turns were re-tokenized: the trainer recomputes them all
        version = step if version is None else version
        figures = _figures(trajs, correct, rewards, plan, tokens, rollout_s, used, s.max_env_failures)
        figures["served"] = list(self.server.served) if self.server is not None else []
        figures["records"] = self._rollout_records(step, trajs, correct, rewards, plan, used, version)
        parts = self._gather(figures)  # every process's share of the batch, in one exchange
        self._count_failure(parts)
        if self._process()[0] == 0:  # one process writes the whole batch's rollouts
            with self.rollouts_path.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(rec, ensure_ascii=False) + "\n" for part in parts for rec in part["records"])
        self.last = self._stats(parts, step, version)
        return out

    def _count_failure(self, parts: list[dict[str, Any]]) -> None:
        """Count a batch in which not one group could be graded, decided on the whole batch (with
        several processes every one stops or none does), and reset the count otherwise.

        Raises:
            ModelError: this is the ``max_failed_steps``-th such batch in a row.
        """
        s = self.settings
        rows = [row for part in parts for row in part["rows"]]
        if len(rows) // s.group_size > sum(part["skipped"] for part in parts):  # a group was graded
            self._failed_steps = 0
            return
        self._failed_steps += 1
        if self._failed_steps >= s.max_failed_steps:
            env = sum(row["env_failed"] for row in rows)
            why = f" ({env} of the last batch's {len(rows)} rollouts had environment failures)" if env else ""
            raise ModelError(
                f"no group could be graded in {self._failed_steps} batches in a row{why}: the judge, "
                "the policy or the tool environment keeps failing; fix it and rerun the same command to resume"
            )

    # -- records --------------------------------------------------------------------------
    def _rollout_records(
        self,
        step: int,
        trajs: list[Trajectory],
        correct: list,
        rewards: list,
        plan: Any,
        used_slots: list[bool],
        version: int,
    ) -> list[dict[str, Any]]:
        """One record per rollout: the trajectory, its step, the ``policy_version`` that
        sampled it and its ``staleness`` (versions behind the update that trains on it),
        ``correct`` (on report tasks: the RACE score is at least 0.5), ``reward``, ``advantage``
        (``null`` when its group was skipped or replaced) and ``in_loss`` (its tokens entered
        the loss)."""
        G = self.settings.group_size
        adv = {
            src: a
            for src, a in zip(plan.slots, plan.advantages)
            if all(r is not None for r in rewards[src // G * G : src // G * G + G])
        }
        used = {src for src, keep in zip(plan.slots, used_slots) if keep}
        records = []
        for i, t in enumerate(trajs):
            rec = {
                "step": step + 1,
                "policy_version": version,
                "staleness": step - version,
                **t.to_dict(),
                "correct": correct[i],
                "reward": rewards[i],
                "advantage": adv.get(i),
                "in_loss": i in used,
            }
            if self.server is not None and len(self._where) == len(trajs):
                rec["server"] = self._where[i]
            records.append(rec)
        return records

    def _stats(self, parts: list[dict[str, Any]], step: int = 0, version: int | None = None) -> dict[str, float]:
        """The batch's figures for the step log from each process's :func:`_figures`."""
        rows = [row for part in parts for row in part["rows"]]
        rewards = [row["reward"] for row in rows]
        correct = [row["correct"] for row in rows]
        used = [u for part in parts for u in part["used"]]
        n = len(rows)
        G = self.settings.group_size
        known = [r for r in rewards if r is not None]
        graded = [c for c in correct if c is not None]
        groups = n // G
        env_failed = [row["env_failed"] for row in rows]
        model_s = sum(row["model_s"] for row in rows)
        tools_s = sum(row["tools_s"] for row in rows)
        share_tools = tools_s / (model_s + tools_s) if model_s + tools_s > 0 else 0.0
        rollout_s = max(part["rollout_s"] for part in parts)
        turns = sum(row["turns"] for row in rows)
        stats = {
            "reward/mean": sum(known) / len(known) if known else float("nan"),
            "reward/accuracy": sum(map(bool, graded)) / len(graded) if graded else float("nan"),
            "reward/ungraded": float(n - len(graded)),
            "groups/zero_spread_share": sum(part["zero_spread"] for part in parts) / groups,
            "groups/skipped": float(sum(part["skipped"] for part in parts)),
            "groups/duplicated": float(sum(part["duplicated"] for part in parts)),
            "groups/env_failed": float(sum(any(env_failed[g * G : g * G + G]) for g in range(groups))),
            "rollouts/env_failed": float(sum(env_failed)),
            "rollouts/in_loss_share": sum(used) / n,
            "rollouts/tool_calls": sum(row["tool_calls"] for row in rows) / n,
            "rollouts/repeated_calls": sum(row["repeated_calls"] for row in rows) / n,
            "rollouts/model_calls": sum(row["model_calls"] for row in rows) / n,
            "rollouts/response_tokens": sum(row["model_tokens"] for row in rows) / n,
            "tokens/retokenized_share": sum(row["retokenized"] for row in rows) / max(1, turns),
            "time/rollout_s": rollout_s,
            "policy/version": float(step if version is None else version),
            "policy/staleness": float(0 if version is None else step - version),
            "time/tools_s": rollout_s * share_tools,
            "time/generation_s": rollout_s * (1 - share_tools),
        }
        if len(parts) > 1:
            stats["processes"] = float(len(parts))
        for term, k in Counter(row["termination"] for row in rows).items():
            stats[f"termination/{term}"] = k / n
        if self.sync is not None and self.sync.version == step:
            stats.update({"sync/seconds": self.sync.last_sync_s, "sync/write_s": self.sync.last_write_s})
        if self.server is not None and len(self.server) > 1:  # each server's share of the batch and its reload
            stats["servers/live"] = float(len(self.server.live))
            served = [sum(counts) for counts in zip(*(part["served"] for part in parts))]  # every process's
            for i, (count, server) in enumerate(zip(served, self.server.servers)):
                stats[f"server/{i}/rollouts"] = float(count)
                if server.version == step:
                    stats[f"server/{i}/sync_s"] = server.reload_s
        return stats


def _figures(
    trajs: list[Trajectory],
    correct: list,
    rewards: list,
    plan: Any,
    tokens: list,
    rollout_s: float,
    used: list[bool],
    max_env_failures: int,
) -> dict[str, Any]:
    """What the step log needs of one process's share of a batch, small enough to gather from
    every process: a row per rollout, the plan's group counts, the slots in the loss and the
    seconds the share's rollouts took."""
    rows = [
        {
            "termination": t.termination,
            "env_failed": t.env_failed(max_env_failures),
            "model_s": t.timings["model_s"],
            "tools_s": t.timings["tools_s"],
            "tool_calls": t.num_tool_calls,
            "repeated_calls": repeated_tool_calls(t.tool_calls),
            "model_calls": t.num_model_calls,
            "correct": c,
            "reward": r,
            "model_tokens": tk.model_tokens,
            "retokenized": tk.retokenized,
            "turns": tk.turns,
        }
        for t, c, r, tk in zip(trajs, correct, rewards, tokens)
    ]
    return {
        "rows": rows,
        "used": list(used),
        "zero_spread": plan.zero_spread_groups,
        "skipped": plan.skipped_groups,
        "duplicated": plan.duplicated_groups,
        "rollout_s": rollout_s,
    }
