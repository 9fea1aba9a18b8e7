"""``PythonInterpreter``: run the model's Python code in the sandbox and show what it printed.

The agent passes the code written between ``<code>`` and ``</code>`` in its tool call as
``arguments["code"]`` (see :mod:`websailor.agent.parse`); the code runs in
:func:`websailor.sandbox.bubblewrap.run_python`, isolated from the host and the network.
"""

from __future__ import annotations

import re
from typing import Any

from websailor.errors import InvalidArgumentError
from websailor.sandbox import SandboxLimits, SandboxResult, ensure_sandbox, run_python
from websailor.tools.base import Tool

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*[ \t]*\n(.*?)\n?[ \t]*```\s*$", re.S)


def _limit_text(killed: str, limits: SandboxLimits) -> str:
    """``killed`` as the line the model reads, with the limit that was hit."""
    described = {
        "wall-clock timeout": f"wall-clock timeout of {limits.wall_s:g} s",
        "cpu time limit": f"CPU time limit of {limits.cpu_s:g} s",
        "output limit": f"output limit of {limits.output_bytes} bytes",
        "memory": f"memory limit of {limits.memory_mb} MB",
        "file size limit": f"file size limit of {limits.file_mb} MB",
    }
    return described.get(killed, killed)


def _shorten(text: str, limit: int) -> str:
    """Cut ``text`` to about ``limit`` characters, keeping its head (2/3) and tail (1/3, where
    tracebacks end), with a note saying how many characters were cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :]}"


def format_result(result: SandboxResult, limits: SandboxLimits, max_chars: int) -> str:
    """The observation for one run: ``stdout:`` and ``stderr:`` blocks (only non-empty ones),
    cut to ``max_chars`` characters, then notes on truncation, the limit that stopped the code
    (``Killed: wall-clock timeout of 20 s``) and a non-zero exit status."""
    parts = []
    if result.stdout:
        parts.append(f"stdout:\n{result.stdout}")
    if result.stderr:
        parts.append(f"stderr:\n{result.stderr}")
    text = "\n".join(p.rstrip("\n") for p in parts)
    if not text:
        text = (
            "The code printed nothing before it was stopped."
            if result.killed
            else "The code printed nothing. Use print() to show the values you need."
        )
    notes = []
    if len(text) > max_chars:
        notes.append(
            f"Note: the output was {len(text)} characters long; {len(text) - max_chars} characters "
            f"in the middle were cut."
        )
        text = _shorten(text, max_chars)
    if result.truncated:
        notes.append(f"Note: the program printed more than {limits.output_bytes} bytes; the rest was discarded.")
    if result.killed == "memory" and result.exit_code == 1:  # a MemoryError, shown in stderr
        notes.append(f"Note: the code ran out of memory (the limit is {limits.memory_mb} MB).")
    elif result.killed:
        notes.append(f"Killed: {_limit_text(result.killed, limits)}")
    elif result.exit_code:
        notes.append(f"Exit code: {result.exit_code}")
    stderr = result.stderr
    if any(
        m in stderr
        for m in (
            "Network is unreachable",
            "Connection refused",
            "Name or service not known",
            "Temporary failure in name resolution",
        )
    ):
        notes.append("Note: the sandbox has no network; fetch pages with the visit tool instead.")
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "Popen" in stderr or "Thread" in stderr):
        notes.append(f"Note: the sandbox allows at most {limits.processes} processes.")
    return "\n".join([text] + notes)


class PythonInterpreterTool(Tool):
    """Run Python code in the sandbox; the observation is what it printed.

    Args:
        limits: resource limits of each run (see :class:`~websailor.sandbox.limits.SandboxLimits`).
        allow_unsafe: without a working bubblewrap, run the code with resource limits only
            (``WEBSAILOR_UNSAFE_PYTHON=1`` does the same).
        max_observation_chars: longer observations are cut in the middle, with a note.

    Raises:
        SandboxUnavailableError: at construction, when there is no working sandbox and unsafe
            mode was not allowed.
    """

    name = "PythonInterpreter"
    description = (
        "Execute Python code in a sandbox and return what it prints (stdout and stderr). Use it for "
        "calculations, data processing and checking facts with code. Always print() the values you want to "
        "see: only printed output comes back. The sandbox has the standard library, numpy, scipy and sympy, "
        "and no internet access; each call starts fresh. Put the code between <code> and </code> inside the "
        "tool call, for example:\n"
        "<tool_call>\n"
        '{"name": "PythonInterpreter", "arguments": {}}\n'
        "<code>\n"
        "print(sum(range(10)))\n"
        "</code>\n"
        "</tool_call>"
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": "The Python code to run (written between <code> and </code>); print() the results.",
            }
        },
        "required": ["code"],
    }

    def __init__(
        self, limits: SandboxLimits = SandboxLimits(), allow_unsafe: bool = False, max_observation_chars: int = 10_000
    ) -> None:
        if max_observation_chars <= 0:
            raise InvalidArgumentError(f"max_observation_chars must be positive, got {max_observation_chars}")
        ensure_sandbox(allow_unsafe)  # fail now, not at the first call
        self.limits = limits
        self.allow_unsafe = allow_unsafe
        self.max_observation_chars = max_observation_chars

    def coerce(self, arguments: dict[str, Any]) -> dict[str, Any]:
        code = arguments.get("code")
        if isinstance(code, str):
            m = _FENCE.match(code)
            if m:  # a Markdown code fence around the code
                arguments["code"] = m.group(1)
        return arguments

    def forward(self, code: str) -> str:
        if not code.strip():
            raise InvalidArgumentError("the code is empty: put the Python code between <code> and </code>")
        result = run_python(code, self.limits, allow_unsafe=self.allow_unsafe)
        return format_result(result, self.limits, self.max_observation_chars)


__all__ = ["PythonInterpreterTool", "format_result"]
