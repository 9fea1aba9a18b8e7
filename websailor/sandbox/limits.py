"""The resource limits of one sandboxed run and what the run produced."""

from __future__ import annotations

from dataclasses import dataclass

from websailor.errors import InvalidArgumentError


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
        cpu_s: CPU seconds per process (``RLIMIT_CPU``; SIGXCPU then SIGKILL one second later).
        wall_s: wall-clock seconds for the whole run; the sandbox is killed after that.
        memory_mb: address space per process in MiB (``RLIMIT_AS``; allocations past it raise
            ``MemoryError``).
        processes: tasks (processes and threads) the sandbox may hold at once (``RLIMIT_NPROC``;
            the launcher and bubblewrap's init count too).
        output_bytes: stdout plus stderr bytes kept; past that the sandbox is killed.
        file_mb: largest file the code may write, in MiB (``RLIMIT_FSIZE``).
        disk_mb: size of the working directory, a memory-backed tmpfs inside the sandbox, in
            MiB (all files together; nothing the code writes reaches the host's disk).

    Raises:
        InvalidArgumentError: a limit is not positive.
    """

    cpu_s: float = 10
    wall_s: float = 20
    memory_mb: int = 1024
    processes: int = 32
    output_bytes: int = 100_000
    file_mb: int = 64
    disk_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s", "memory_mb", "processes", "output_bytes", "file_mb", "disk_mb"):
            if not getattr(self, name) > 0:
                raise InvalidArgumentError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass
class SandboxResult:
    """What one run produced.

    Attributes:
        stdout: what the code printed (decoded as UTF-8, bad bytes replaced), at most
            ``output_bytes`` bytes together with ``stderr``.
        stderr: its standard error, tracebacks included.
        exit_code: exit status; ``128 + N`` when signal ``N`` ended it; ``None`` when the host
            killed it (wall clock, output limit).
        timed_out: the wall-clock limit was reached.
        truncated: the output passed ``output_bytes`` and was cut there.
        killed: which limit ended the run, if one did: ``"wall-clock timeout"``,
            ``"output limit"``, ``"cpu time limit"``, ``"memory"`` (``MemoryError`` or a
            SIGKILL not explained by the CPU limit), ``"file size limit"``.
        seconds: wall-clock duration of the run in seconds.
    """

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False
    truncated: bool = False
    killed: str | None = None
    seconds: float = 0.0
