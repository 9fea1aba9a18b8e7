"""Constructive trajectories: the expert-free cold start (``traj build``, the default source).

Each synthesized QA item keeps the procedure that solves it in the local environment
(search the first hop's description, read its page, ..., open the answer's page). Here that
procedure is replayed as an agent trajectory in the protocol: every tool call is executed for
real against the local tools, so each observation is the actual tool output, and every step
carries a short thought; the trajectory ends with the correct answer. No LLM is involved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from websailor import __version__
from websailor.agent.prompt import system_prompt, tool_response
from websailor.agent.trajectory import ToolCallRecord, Trajectory
from websailor.errors import InputFormatError
from websailor.tools import Tool, execute_tool


def _turn(thought: str, name: str, arguments: dict) -> str:
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<think>\n{thought}\n</think>\n<tool_call>\n{call}\n</tool_call>"


def _thought(step: dict, i: int, answer_title: str) -> str:
    if step["action"] == "search":
        lead = "I start with the most specific clue I can look up" if i == 0 else "Next I look up another clue"
        return f"{lead}: {step['query']}."
    if step.get("url", "").endswith("/" + answer_title.replace(" ", "_")):
        return f"The clues point to {answer_title}. I open its page to check the remaining conditions."
    return "One of the results looks like the entity described. I read its page for what it is linked to."


def constructive_trajectory(item: dict, tools: Mapping[str, Tool], rollout: int = 0) -> Trajectory:
    """Replay ``item["procedure"]`` through ``tools`` (``search`` and ``visit``) as a
    trajectory that ends with ``<answer>item["answer"]</answer>``.

    Args:
        item: a QA item (``id``, ``question``, ``answer``, ``aliases``, ``procedure``).
        tools: the local tools, by name (:func:`websailor.tools.build_local_tools`).
        rollout: recorded in the trajectory.

    Raises:
        InputFormatError: the item has no procedure, or a step is neither a search nor a visit.
    """
    steps = item.get("procedure") or []
    if not steps:
        raise InputFormatError(f"item {item.get('id')!r} has no solution procedure to replay")
    t0 = time.perf_counter()
    traj = Trajectory(
        id=str(item["id"]),
        rollout=rollout,
        question=item["question"],
        answer={"answer": item["answer"], "aliases": list(item.get("aliases") or []), "parts": None},
        model="constructive",
        env="local",
        version=__version__,
    )
    traj.messages = [
        {"role": "system", "content": system_prompt(tools.values())},
        {"role": "user", "content": item["question"]},
    ]
    goal = f"what links this page to the entity asked about: {item['question']}"
    for i, step in enumerate(steps):
        if step.get("action") == "search":
            name, arguments = "search", {"query": [step["query"]]}
        elif step.get("action") == "visit":
            name, arguments = "visit", {"url": step["url"], "goal": goal}
        else:
            raise InputFormatError(f"item {item.get('id')!r} step {i + 1}: unknown action {step.get('action')!r}")
        t = time.perf_counter()
        result = execute_tool(tools, name, arguments)
        traj.tool_calls.append(ToolCallRecord(name, arguments, time.perf_counter() - t, result.error))
        traj.messages.append(
            {"role": "assistant", "content": _turn(_thought(step, i, item["answer"]), name, arguments)}
        )
        traj.messages.append({"role": "user", "content": tool_response(result.observation)})
    conclusion = (
        f"<think>\nEvery condition of the question fits {item['answer']}, and no other candidate meets "
        f"them all.\n</think>\n<answer>{item['answer']}</answer>"
    )
    traj.messages.append({"role": "assistant", "content": conclusion})
    traj.prediction = item["answer"]
    traj.termination = "answer"
    traj.num_tool_calls = len(traj.tool_calls)
    traj.num_model_calls = len(steps) + 1
    traj.timings = {
        "total_s": time.perf_counter() - t0,
        "model_s": 0.0,
        "tools_s": sum(c.latency_s for c in traj.tool_calls),
    }
    return traj


def build_constructive(
    items: list[dict],
    tools: Mapping[str, Tool],
    out,
    split: str = "train",
    progress: bool = True,
    transform=None,
    source: str = "constructive",
) -> tuple[int, int]:
    """Append a constructive trajectory for every item of ``split`` (``train``, ``test`` or
    ``all``) to ``out``, skipping items already there (resumable; the file is locked while
    written). ``transform`` (optional) edits each trajectory before it is written, e.g.
    short-CoT reconstruction; ``source`` is the trajectories' ``model`` field after it, and
    ``out`` must hold no other source's. Returns ``(written, skipped)``.

    Raises:
        InputFormatError: no item in that split, an item without a procedure, or ``out``
            holding lines that are not trajectory records.
        InvalidArgumentError: ``out`` holds trajectories of another source.
    """
    from functools import partial
    from pathlib import Path

    from websailor.agent.runner import append_new_trajectories

    chosen = [it for it in items if split == "all" or it.get("split") == split]
    if not chosen:
        raise InputFormatError(f"no QA items in split {split!r}")
    return append_new_trajectories(
        Path(out),
        [(str(it["id"]), partial(constructive_trajectory, it, tools)) for it in chosen],
        "constructive trajectories",
        progress,
        transform,
        source,
    )
