"""Watching a sandboxed run from the host: its output read up to a size cap and a wall-clock
deadline, its whole process group killed, and the resource limit that ended it named."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

from websailor.sandbox.limits import SandboxLimits


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group ``pgid``; a group already gone is no error."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def has_exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its process group stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def collect_output(proc: subprocess.Popen, limits: SandboxLimits, deadline: float) -> tuple[bytes, bytes, str | None]:
    """Read stdout and stderr until both close, the process exits, the deadline passes or the
    output passes ``output_bytes``. Returns (stdout, stderr, why the host killed it or None)."""
    assert proc.stdout is not None and proc.stderr is not None
    chunks: dict[int, list[bytes]] = {proc.stdout.fileno(): [], proc.stderr.fileno(): []}
    total = 0
    reason: str | None = None
    sel = selectors.DefaultSelector()
    for fd in chunks:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    open_pipes = set(chunks)
    exited = False
    try:
        while open_pipes or not exited:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = "wall-clock timeout"
                break
            if pidfd is None and not exited and has_exited(proc.pid):
                exited = True
                kill_group(proc.pid)  # stragglers that still hold the pipes (unsafe mode)
            for key, _ in sel.select(remaining if pidfd is not None else min(remaining, 0.05)):
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                    exited = True
                    kill_group(proc.pid)
                    continue
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    open_pipes.discard(key.fd)
                    continue
                room = limits.output_bytes - total
                chunks[key.fd].append(data[:room])
                total += min(len(data), room)
                if len(data) > room:
                    reason = "output limit"
                    break
            if reason:
                break
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()]), reason


def limit_reason(signum: int | None, cpu_used: float, stderr: str, limits: SandboxLimits) -> str | None:
    """Which resource limit ended a run that the host did not kill, if any."""
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu_used >= limits.cpu_s - 0.5):
        return "cpu time limit"
    if signum == signal.SIGXFSZ:
        return "file size limit"
    if signum == signal.SIGKILL:
        return "memory"
    last = stderr.rstrip().rsplit("\n", 1)[-1]
    if last.startswith("MemoryError"):
        return "memory"
    return None
