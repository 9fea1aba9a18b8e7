"""Importing ChatML agent trajectories in the Tongyi / WebDancer layout (``traj build --source import``).

Each line: ``{"messages": [system, user, assistant, user, ...], "answer", "functions", ...}``.
The first user message holds the tool instructions and ends with ``User: <question>``;
assistant turns carry ``<think>``, ``<tool_call>`` or ``<answer>``; tool results come back as
user turns wrapped in ``<tool_response>``. They become our :class:`Trajectory` records: our
system prompt listing the file's own tool schemas, the question as the user turn, and the
assistant and tool turns unchanged.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from websailor.agent.parse import parse_turn
from websailor.agent.prompt import SYSTEM_TEMPLATE
from websailor.agent.trajectory import Trajectory
from websailor.errors import InputFormatError
from websailor.judge.gold import Gold

_QUESTION = re.compile(r"\n\s*User:\s*(.+)\s*$", re.S)


def _schemas(functions: list) -> str:
    out = []
    for f in functions or []:
        if isinstance(f, dict):
            out.append(
                json.dumps(
                    {
                        "name": f.get("name_for_model") or f.get("name"),
                        "description": f.get("description_for_model") or f.get("description", ""),
                        "parameters": f.get("parameters", {}),
                    },
                    ensure_ascii=False,
                )
            )
    return "\n".join(out)


def _flatten(answer):
    if isinstance(answer, (list, tuple)):
        return [x for a in answer for x in _flatten(a)]
    return [answer]


def import_chatml(rec: dict, where: str, id: str) -> Trajectory:
    """One ChatML record as a trajectory.

    Raises:
        InputFormatError: no messages, roles that do not alternate (system, user, then
            assistant and tool-response turns in turn, ending with the assistant), no
            ``User:`` question, or no gold answer; ``where`` names the line.
    """
    msgs = rec.get("messages")
    if not isinstance(msgs, list) or len(msgs) < 3 or not all(isinstance(m, dict) for m in msgs):
        raise InputFormatError(f"{where}: 'messages' must be a list of at least system, user and assistant turns")
    for i, m in enumerate(msgs, start=1):
        if not isinstance(m.get("content"), str):
            raise InputFormatError(f"{where}: message {i} has {type(m.get('content')).__name__} content; text expected")
    if not isinstance(rec.get("functions", []), list):
        raise InputFormatError(f"{where}: 'functions' must be a list of tool schemas")
    roles = [m.get("role") for m in msgs]
    expected = ["system", "user"] + ["assistant" if i % 2 == 0 else "user" for i in range(len(msgs) - 2)]
    if roles != expected or roles[-1] != "assistant":
        raise InputFormatError(
            f"{where}: the messages do not alternate as system, user, assistant, user, ..., "
            f"assistant (got {', '.join(map(str, roles[:8]))}{' ...' if len(roles) > 8 else ''})"
        )
    m = _QUESTION.search(str(msgs[1].get("content", "")))
    if not m or not m.group(1).strip():
        raise InputFormatError(f"{where}: the first user turn has no 'User: <question>' at its end")
    try:
        gold = Gold.parse([a for a in _flatten(rec.get("answer")) if a is not None])
    except ValueError as e:
        raise InputFormatError(f"{where}: {e}") from None
    for i, turn in enumerate(msgs[3::2], start=1):
        if not str(turn.get("content", "")).lstrip().startswith("<tool_response>"):
            raise InputFormatError(f"{where}: tool turn {i} is not wrapped in <tool_response>")
    date = re.search(r"\d{4}-\d{2}-\d{2}", str(msgs[0].get("content", "")))
    system = SYSTEM_TEMPLATE.format(tools=_schemas(rec.get("functions")), date=date.group(0) if date else "unknown")
    traj = Trajectory(id=id, rollout=0, question=m.group(1).strip(), answer=gold.to_dict(), model="imported", env="web")
    traj.messages = [{"role": "system", "content": system}, {"role": "user", "content": traj.question}]
    traj.messages += [{"role": t["role"], "content": str(t.get("content", ""))} for t in msgs[2:]]
    actions = [parse_turn(t["content"]) for t in msgs[2::2]]
    traj.num_model_calls = len(actions)
    traj.num_tool_calls = sum(a.tool_call is not None for a in actions)
    traj.prediction = actions[-1].answer
    traj.termination = "answer" if traj.prediction is not None else "format_error"
    return traj


def read_chatml(path: str | Path) -> list[Trajectory]:
    """Every record of a ChatML JSONL file, converted; ids are ``<file stem>-<line>``.

    Raises:
        InputFormatError: a missing or empty file, or a bad record (see :func:`import_chatml`).
    """
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"{path} does not exist or is not a file")
    out = []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputFormatError(f"{path}: not UTF-8 text (byte {e.start}); expected ChatML JSONL") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputFormatError(f"{path} line {lineno}: not JSON ({e.msg})") from None
        if not isinstance(rec, dict):
            raise InputFormatError(f"{path} line {lineno}: expected a JSON object")
        out.append(import_chatml(rec, f"{path} line {lineno}", f"{path.stem}-{lineno}"))
    if not out:
        raise InputFormatError(f"{path}: no trajectories (the file is empty)")
    return out


def import_chatml_file(
    path: str | Path, out: str | Path, progress: bool = True, transform=None, source: str = "imported"
) -> tuple[int, int]:
    """Convert a ChatML file (:func:`read_chatml`) and append the trajectories ``out`` does
    not hold yet, each through ``transform`` if given (``source``: their ``model`` field
    after it; ``out`` must hold no other source's). Returns ``(written, skipped)``.

    Raises:
        InputFormatError: see :func:`read_chatml`; or ``out`` is not a JSONL file.
    """
    from websailor.agent.runner import append_new_trajectories

    trajs = read_chatml(path)
    return append_new_trajectories(
        Path(out), [(t.id, lambda t=t: t) for t in trajs], "imported trajectories", progress, transform, source
    )
