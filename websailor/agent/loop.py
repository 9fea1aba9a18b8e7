"""The ReAct loop: prompt, generate, parse, act, observe, repeat; budgets are explicit branches."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from websailor import __version__
from websailor.agent.parse import Action, parse_turn
from websailor.agent.prompt import FINAL_ANSWER_NUDGE, system_prompt, tool_response
from websailor.agent.summarize import SUMMARY_REQUEST, Summary, resumed_task, summary_text
from websailor.agent.trajectory import ToolCallRecord, Trajectory, env_failure_summary
from websailor.errors import ContextLengthError, InvalidArgumentError, ModelError, ServiceDown
from websailor.models.base import ChatModel, Generation, SamplingParams
from websailor.reports.prompt import REPORT_NUDGE
from websailor.text import clean_text
from websailor.tools import Tool, execute_tool
from websailor.tools.base import FORMAT_ERROR, ToolResult


@dataclass
class AgentConfig:
    """Budgets and sampling of the agent. Defaults are the WebSailor-V2 / Tongyi DeepResearch
    evaluation setup (arXiv 2509.13305 and the released inference code).

    Attributes:
        max_calls: model calls per question (paper: 100).
        max_context_tokens: context budget (paper: 128k); the model's own limit caps it.
        answer_nudge_tokens: from this many tokens of context (scaled with the cap above) the
            model is told to stop calling tools and answer (paper: about 110k of 128k).
        timeout_s: wall-clock limit per question (paper setup: 150 minutes); ``None``: the
            model's own (:attr:`ChatModel.question_timeout_s`).
        max_format_errors: consecutive unparsable turns before ``format_error``.
        max_tokens_per_turn: completion tokens per model call (paper configs: 8,192); ``None``:
            the model's own budget (:attr:`ChatModel.turn_tokens`; 256 for the embedded model).
        sampling: temperature 0.85, top-p 0.95, presence penalty 1.1.
        seed: base seed; each (question id, rollout) gets its own derived seed.
        task: ``qa`` (a short answer) or ``report`` (a cited Markdown report: the report
            prompt, at least :data:`REPORT_TURN_TOKENS` a turn unless ``max_tokens_per_turn``
            is set, and the report's citations
            parsed into the trajectory's ``report``; docs/reports.md).
        summarize_at: the share of the context (0 to 1, below the nudge's share) from which
            the turns after the task are replaced by a summary the model writes (ReSum, arXiv
            2509.13313; :mod:`websailor.agent.summarize`); ``None``: never (the paper's QA
            setup, which only nudges).
        max_summaries: summaries per rollout; after that the nudge ends the rollout as before.
    """

    max_calls: int = 100
    max_context_tokens: int = 128_000
    answer_nudge_tokens: int = 110_000
    timeout_s: float | None = None
    max_format_errors: int = 3
    max_tokens_per_turn: int | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    task: str = "qa"
    summarize_at: float | None = None
    max_summaries: int = 3

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise InvalidArgumentError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        nudge = self.answer_nudge_tokens / self.max_context_tokens
        if self.summarize_at is not None and not 0 < self.summarize_at < nudge:
            raise InvalidArgumentError(
                f"summarize_at must be a share of the context above 0 and below the answer nudge's "
                f"({nudge:.2f}), got {self.summarize_at!r}"
            )
        if self.max_summaries < 0:
            raise InvalidArgumentError(f"max_summaries must be at least 0, got {self.max_summaries!r}")


#: What the agent can be asked for: a short answer, or a cited report.
TASKS = ("qa", "report")
#: The least completion budget of a turn on a report task (the report is one turn).
REPORT_TURN_TOKENS = 2048
#: The share of the context at which a report task summarizes by default (ReSum's trigger; 70%:
#: about 90k of 128k tokens, before the nudge at about 110k).
REPORT_SUMMARIZE_AT = 0.7


StepCallback = Callable[[int, Action, ToolResult | None], None]


def assistant_message(text: str, gen: Generation) -> dict:
    """The recorded assistant turn: ``content`` (the reply's text, stripped), its
    ``finish_reason``, and, when the backend returned them, the sampled ``token_ids`` and
    their ``logprobs`` (docs/agent.md, "Trajectory record")."""
    msg: dict = {"role": "assistant", "content": text.strip(), "finish_reason": gen.finish_reason}
    if gen.token_ids is not None:
        msg["token_ids"] = list(gen.token_ids)
        if gen.logprobs is not None:
            msg["logprobs"] = [round(float(x), 6) for x in gen.logprobs]
    return msg


class Agent:
    """Runs questions with a model and tools.

    Args:
        model: any :class:`ChatModel`.
        tools: tools by name (or a sequence of tools).
        config: budgets and sampling.
        env: the environment's name, recorded in trajectories (``local``, ``web``).
        env_settings: the environment's observation settings that are not the paper's
            (:attr:`websailor.tools.environment.ToolEnvironment.settings`), recorded in
            trajectories.
    """

    def __init__(
        self,
        model: ChatModel,
        tools: Mapping[str, Tool] | Sequence[Tool],
        config: AgentConfig | None = None,
        env: str = "local",
        env_settings: Mapping[str, int] | None = None,
    ) -> None:
        self.model = model
        self.tools = dict(tools) if isinstance(tools, Mapping) else {t.name: t for t in tools}
        self.config = config or AgentConfig()
        self.env = env
        self.env_settings = dict(env_settings or {})

    def seed_for(self, qid: str, rollout: int) -> int:
        return (self.config.seed * 1_000_003 + zlib.crc32(f"{qid}/{rollout}".encode())) % 2**31

    def run(
        self, question: str, id: str = "q", rollout: int = 0, answer: object = None, on_step: StepCallback | None = None
    ) -> Trajectory:
        """Answer ``question``; never raises for model, tool or format failures (they end the
        trajectory with a recorded ``termination``), except a service declared down.

        Args:
            question: the question (cleaned of invalid Unicode).
            id, rollout: recorded in the trajectory; with the config's seed they fix the
                sampling seed of every model call.
            answer: the gold answer, recorded as is.
            on_step: called after each turn with (turn number, parsed action, tool result).

        Raises:
            InvalidArgumentError: the question is empty.
            ServiceDown: the model server or the tool server was declared down
                (:mod:`websailor.breaker`): the rollout is cut, and a batch stops.
        """
        if not isinstance(question, str) or not question.strip():
            raise InvalidArgumentError("the question is empty")
        cfg = self.config
        timeout_s = cfg.timeout_s if cfg.timeout_s is not None else self.model.question_timeout_s
        turn_tokens = cfg.max_tokens_per_turn if cfg.max_tokens_per_turn is not None else self.model.turn_tokens
        t0 = time.perf_counter()
        seed = self.seed_for(id, rollout)
        question = clean_text(question)
        traj = self._start(question, id, rollout, answer, seed)
        if cfg.task == "report" and cfg.max_tokens_per_turn is None:
            turn_tokens = max(turn_tokens, REPORT_TURN_TOKENS)
        limit = min(cfg.max_context_tokens, self.model.max_context)
        traj.sampling = self._sampling_record(turn_tokens, limit)
        nudge_at = limit * cfg.answer_nudge_tokens // cfg.max_context_tokens
        summarize_at = None if cfg.summarize_at is None else int(limit * cfg.summarize_at)
        nudged = False
        bad_turns = 0
        context = 0  # tokens of the conversation so far (estimated for the newest observation)
        while True:
            if traj.num_model_calls >= cfg.max_calls:
                traj.termination = "max_calls"
                break
            if time.perf_counter() - t0 > timeout_s:
                traj.termination = "timeout"
                break
            if context >= limit:
                traj.termination = "context"
                break
            if summarize_at is not None and context >= summarize_at and len(traj.summaries) < cfg.max_summaries:
                context = self._summarize(
                    traj, seed, context, limit, turn_tokens, timeout_s - (time.perf_counter() - t0)
                )
            params = replace(
                cfg.sampling,
                seed=seed + traj.num_model_calls,
                max_tokens=min(turn_tokens, limit - context),
                timeout_s=timeout_s - (time.perf_counter() - t0),
            )
            gen = self._call_model(traj, params, lambda: time.perf_counter() - t0 >= timeout_s)
            if gen is None:
                break
            traj.num_model_calls += 1
            traj.tokens["prompt"] += gen.prompt_tokens
            traj.tokens["completion"] += gen.completion_tokens
            context = gen.prompt_tokens + gen.completion_tokens
            if gen.prompt_tokens >= limit:  # the prompt alone fills the context (e.g. a huge question)
                traj.termination = "context"
                break
            text = clean_text(gen.text)  # no lone surrogates from a misbehaving server
            traj.messages.append(assistant_message(text, gen))
            action = parse_turn(text, tools=bool(self.tools))
            if action.answer is not None:
                traj.prediction, traj.termination = action.answer, "answer"
                if on_step:
                    on_step(traj.num_model_calls, action, None)
                break
            if nudged:  # told to answer, and did not
                traj.termination = "context"
                break
            result = self._act(action, traj)
            if on_step:
                on_step(traj.num_model_calls, action, result)
            if action.error:
                bad_turns += 1
                if bad_turns >= cfg.max_format_errors:
                    traj.termination = "format_error"
                    break
            else:
                bad_turns = 0
            observation = tool_response(result.observation) if action.tool_call else result.observation
            context += len(observation) // 3  # about 3 characters a token, until the next call counts it
            can_summarize = summarize_at is not None and len(traj.summaries) < cfg.max_summaries
            if context >= nudge_at and not nudged and not can_summarize:
                observation += "\n\n" + (REPORT_NUDGE if cfg.task == "report" else FINAL_ANSWER_NUDGE)
                nudged = True
            traj.messages.append({"role": "user", "content": observation})
        if cfg.task == "report":
            from websailor.reports.citations import parse_report, visited_urls

            traj.report = parse_report(traj.prediction, visited_urls(traj.tool_calls)).to_dict()
        traj.timings["total_s"] = time.perf_counter() - t0
        return traj

    def _sampling_record(self, turn_tokens: int, limit: int) -> dict[str, Any]:
        """What the trajectory records of its sampling and budgets (:attr:`Trajectory.sampling`):
        the config's sampling, its call budget, and the turn and context budgets in effect."""
        return {
            **self.config.sampling.distribution(),
            "max_calls": self.config.max_calls,
            "max_tokens_per_turn": turn_tokens,
            "max_context_tokens": limit,
        }

    def _start(self, question: str, id: str, rollout: int, answer: object, seed: int) -> Trajectory:
        """A new trajectory of ``question``: the system prompt (with the tools) and the question."""
        traj = Trajectory(
            id=id,
            rollout=rollout,
            question=question,
            answer=answer,
            model=self.model.name,
            env=self.env,
            env_settings=dict(self.env_settings),
            seed=seed,
            version=__version__,
            task=self.config.task,
        )
        traj.messages = [
            {"role": "system", "content": system_prompt(self.tools.values(), task=self.config.task)},
            {"role": "user", "content": question},
        ]
        return traj

    def _call_model(
        self, traj: Trajectory, params: SamplingParams, out_of_time: Callable[[], bool]
    ) -> Generation | None:
        """The model's next turn, or ``None`` with ``traj.termination`` and ``traj.error`` set
        when the call failed (``out_of_time()``: whether the question's time has run out).

        Raises:
            ServiceDown: the model server was declared down (the rollout is not kept).
        """
        tm = time.perf_counter()
        try:
            gen = self.model.chat(traj.messages, params)
            if not isinstance(gen, Generation):  # a backend that breaks its contract: no silent end
                raise TypeError(f"the model's chat returned a {type(gen).__name__}, not a Generation")
            return gen
        except ContextLengthError as e:  # the server refused a conversation longer than its context
            traj.termination, traj.error = "context", str(e)
        except ModelError as e:
            # the question's time ran out in a failed request: the policy's timeout, unless the
            # model never answered this rollout at all (a server that hangs says nothing
            # about the policy: the rollout is a model error, never graded, rerun on resume)
            timed_out = out_of_time() and traj.num_model_calls > 0
            traj.termination, traj.error = ("timeout" if timed_out else "model_error"), str(e)
        except ServiceDown:  # the model server was declared down: the run stops, this rollout is not kept
            raise
        except Exception as e:  # a backend bug must not stop the batch
            traj.termination, traj.error = "model_error", f"{type(e).__name__}: {e}"
        finally:
            traj.timings["model_s"] += time.perf_counter() - tm
        return None

    def _summarize(
        self, traj: Trajectory, seed: int, context: int, limit: int, turn_tokens: int, time_left_s: float
    ) -> int:
        """Replace the turns after the task by a summary the model writes (ReSum, arXiv
        2509.13313, section 3); record it in ``traj.summaries`` with what it replaced. A model
        error or an empty summary is recorded and replaces nothing. Returns the context's
        tokens afterwards (estimated at 3 characters a token until the next call counts them)."""
        record = Summary(call=traj.num_model_calls, context_tokens=context)
        try:
            return self._summary_into(traj, record, seed, context, limit, turn_tokens, time_left_s)
        finally:
            traj.summaries.append(record.to_dict())

    def _summary_into(
        self,
        traj: Trajectory,
        record: Summary,
        seed: int,
        context: int,
        limit: int,
        turn_tokens: int,
        time_left_s: float,
    ) -> int:
        room = limit - context - len(SUMMARY_REQUEST) // 3
        if len(traj.messages) <= 2 or room < 64:
            record.error = "nothing to summarize" if len(traj.messages) <= 2 else "no room left in the context"
            return context
        params = replace(
            self.config.sampling,
            seed=seed + 1_000_003 * (len(traj.summaries) + 1),
            max_tokens=min(turn_tokens, room),
            timeout_s=time_left_s,
        )
        tm = time.perf_counter()
        try:
            gen = self.model.chat([*traj.messages, {"role": "user", "content": SUMMARY_REQUEST}], params)
        except ServiceDown:
            raise
        except Exception as e:  # the rollout goes on without a summary; the nudge still ends it
            record.error = f"{type(e).__name__}: {e}"
            return context
        finally:
            traj.timings["model_s"] += time.perf_counter() - tm
        traj.tokens["prompt"] += gen.prompt_tokens
        traj.tokens["completion"] += gen.completion_tokens
        record.prompt_tokens, record.completion_tokens = gen.prompt_tokens, gen.completion_tokens
        text = summary_text(clean_text(gen.text))
        if not text:
            record.error = "the model wrote an empty summary"
            return context
        record.text = text
        record.replaced = traj.messages[2:]
        traj.messages = [traj.messages[0], {"role": "user", "content": resumed_task(traj.question, text)}]
        return sum(len(m["content"]) for m in traj.messages) // 3

    def _act(self, action: Action, traj: Trajectory) -> ToolResult:
        """Run the turn's tool call, or turn its format error into feedback."""
        if action.tool_call is None:
            return ToolResult(action.error or "", action.error, FORMAT_ERROR if action.error else None)
        call = action.tool_call
        args = dict(call.arguments)
        if call.code is not None:
            args.setdefault("code", call.code)
        tt = time.perf_counter()
        try:
            result = execute_tool(self.tools, call.name, args)
        except ServiceDown:  # the tool server was declared down: the run stops
            raise
        except Exception as e:  # a tool bug becomes an observation, not a crash
            result = ToolResult(
                f"[{call.name}] Error: the tool failed ({type(e).__name__}: {e})", f"{type(e).__name__}: {e}"
            )
        latency = time.perf_counter() - tt
        traj.timings["tools_s"] += latency
        traj.num_tool_calls += 1
        env_failures = list(result.env_failures) or None
        traj.tool_calls.append(ToolCallRecord(call.name, call.arguments, round(latency, 6), result.error, env_failures))
        if env_failures:
            traj.env_failures = env_failure_summary(traj.tool_calls)
        if action.warnings:
            result = ToolResult(
                "\n".join(action.warnings) + "\n" + result.observation, result.error, result.kind, result.env_failures
            )
        return result
