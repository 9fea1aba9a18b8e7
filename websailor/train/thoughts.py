"""Short-CoT reconstruction (WebSailor V1, arXiv 2507.02592, Sec. 3.3; reused for the V2 cold
start): a second model writes a concise thought for every step of a trajectory, given the
history so far, the action taken and the observation it returned. The actions and
observations stay as they are; only the ``<think>`` part of each assistant turn changes.

Long, meandering reasoning of an expert model is costly to imitate and teaches a student
little; the rewritten thoughts keep the decision logic in a sentence or three.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from websailor.agent.parse import parse_turn, split_thought
from websailor.agent.trajectory import Trajectory
from websailor.log import get_logger
from websailor.models.base import ChatModel, SamplingParams
from websailor.text import truncate

logger = get_logger(__name__)

#: Instructions for the thought writer (our own wording).
THOUGHT_PROMPT = """You edit the working notes of a research agent that answers questions by searching and reading web pages.

Below are the question, what the agent did before this step, the action it took at this step and the result that action returned.
Write the agent's thought just before this action: one to three short sentences in the first person that say what the agent knows so far and why this action is the sensible next move.
The thought comes before the result, so it must not state facts that only the result reveals; the result is shown only so that the thought fits what happened.
Reply with the thought alone: no tags, no quotes, no preamble."""


@dataclass
class ThoughtSettings:
    """Sampling of the thought writer and how much context it sees.

    Attributes:
        max_tokens: longest thought in tokens.
        temperature: sampling temperature (low: faithful, short thoughts).
        observation_chars: each past or current observation is cut to this many characters
            in the writer's prompt (never in the trajectory).
        max_words: a thought longer than this is rejected and the original one kept.
    """

    max_tokens: int = 160
    temperature: float = 0.3
    observation_chars: int = 1200
    max_words: int = 120


def _action_text(content: str) -> str:
    """The assistant turn without its thought (read as :func:`split_thought` reads it): the tool
    call or the answer."""
    return split_thought(content)[1].strip()


def _step_prompt(traj: Trajectory, turn: int, cfg: ThoughtSettings) -> list[dict[str, str]]:
    msgs = traj.messages
    lines = [f"Question: {traj.question}", "", "Earlier steps:"]
    earlier = [i for i in range(turn) if msgs[i]["role"] == "assistant"]
    if not earlier:
        lines.append("(none: this is the first step)")
    for n, i in enumerate(earlier, 1):
        lines.append(f"{n}. action: {_action_text(msgs[i]['content'])}")
        if i + 1 < len(msgs) and msgs[i + 1]["role"] == "user":
            lines.append(f"   result: {truncate(' '.join(msgs[i + 1]['content'].split()), cfg.observation_chars)}")
    lines += ["", f"Action at this step: {_action_text(msgs[turn]['content'])}"]
    if turn + 1 < len(msgs) and msgs[turn + 1]["role"] == "user":
        lines.append(f"Its result: {truncate(' '.join(msgs[turn + 1]['content'].split()), cfg.observation_chars)}")
    else:
        lines.append("(This is the final answer; there is no result.)")
    return [{"role": "system", "content": THOUGHT_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


def _clean(text: str, cfg: ThoughtSettings) -> str | None:
    text = re.sub(r"</?think>", "", text).strip().strip('"').strip()
    if not text or len(text.split()) > cfg.max_words or "<tool_call>" in text or "<answer>" in text:
        return None
    return text


def rewrite_thoughts(traj: Trajectory, model: ChatModel, cfg: ThoughtSettings | None = None) -> tuple[Trajectory, int]:
    """A copy of ``traj`` whose assistant turns carry thoughts written by ``model``; the steps go
    to the model concurrently.

    A turn whose action does not parse, or whose new thought is empty or too long, keeps its
    original thought. Returns ``(trajectory, turns rewritten)``.

    Raises:
        ModelError: the thought writer failed (an endpoint down): nothing is written for this
            trajectory, so a rerun picks it up again.
    """
    cfg = cfg or ThoughtSettings()
    turns = [
        i for i, m in enumerate(traj.messages) if m["role"] == "assistant" and parse_turn(m["content"]).error is None
    ]
    if not turns:
        return traj, 0
    params = SamplingParams(temperature=cfg.temperature, max_tokens=cfg.max_tokens, stop=[])
    # one call per step, all in flight at once: a local model batches them, an endpoint serves them in parallel
    with ThreadPoolExecutor(max_workers=min(8, len(turns)), thread_name_prefix="thought") as pool:
        replies = list(pool.map(lambda i: model.chat(_step_prompt(traj, i, cfg), params), turns))
    messages = [dict(m) for m in traj.messages]
    done = 0
    for i, reply in zip(turns, replies):
        thought = _clean(reply.text, cfg)
        if thought is None:
            continue
        messages[i]["content"] = f"<think>\n{thought}\n</think>\n{_action_text(messages[i]['content'])}"
        done += 1
    if done < len(turns):
        logger.debug("%s: %d of %d thoughts kept as they were", traj.id, len(turns) - done, len(turns))
    return replace(traj, messages=messages, model=rewritten_source(traj.model, model)), done


def rewritten_source(source: str, writer: ChatModel) -> str:
    """The ``model`` field of a trajectory of ``source`` whose thoughts ``writer`` rewrote."""
    return f"{source} (thoughts: {getattr(writer, 'name', 'model')})"


class ThoughtRewriter:
    """:func:`rewrite_thoughts` with a fixed writer, as a trajectory transform for the
    builders (``transform=``, ``rewrite=``)."""

    def __init__(self, writer: ChatModel, cfg: ThoughtSettings | None = None) -> None:
        self.writer = writer
        self.cfg = cfg or ThoughtSettings()

    def __call__(self, traj: Trajectory) -> Trajectory:
        return rewrite_thoughts(traj, self.writer, self.cfg)[0]

    def source(self, source: str) -> str:
        """The ``model`` field that trajectories of ``source`` get from this rewriter."""
        return rewritten_source(source, self.writer)
