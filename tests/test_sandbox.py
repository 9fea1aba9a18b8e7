"""The Python sandbox, run for real: every escape attempt must be blocked, and the limits must
stop runaway code quickly. Skipped (with the reason) only where bubblewrap cannot run."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import websailor
from websailor.errors import InvalidArgumentError
from websailor.sandbox import bubblewrap as sandbox
from websailor.sandbox.bubblewrap import (
    UID_BASE,
    UID_SPAN,
    UNSAFE_ENV,
    SandboxLimits,
    SandboxUnavailableError,
    ensure_sandbox,
    run_python,
    sandbox_status,
)
from websailor.tools.python_interpreter import PythonInterpreterTool

_why = sandbox_status()  # None when bubblewrap is found and its probe run works
pytestmark = [
    pytest.mark.sandbox,
    pytest.mark.skipif(_why is not None, reason=f"no working sandbox here: {_why}"),
]

#: Small limits so that runaway code is stopped within seconds.
FAST = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=512, processes=16, output_bytes=20_000, file_mb=1)
PROJECT = Path(websailor.__file__).resolve().parents[1]


def run(code: str, limits: SandboxLimits = FAST) -> sandbox.SandboxResult:
    return run_python(code, limits)


def probe_json(code: str) -> dict:
    """Run ``code`` (which fills the dict ``out``) and return ``out`` as printed in JSON."""
    result = run("import json\nout = {}\n" + code + "\nprint(json.dumps(out))")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def attempt(label: str, statement: str) -> str:
    """Code that runs ``statement`` and records ``out[label]`` = "ok" or the exception's name."""
    return (
        f"try:\n    {statement}\n    out[{label!r}] = 'ok'\n"
        f"except BaseException as e:\n    out[{label!r}] = type(e).__name__\n"
    )


def sandbox_uid_processes() -> list[int]:
    """Host pids running as a root-mode sandbox uid."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                uid = os.stat(entry.path).st_uid
            except OSError:
                continue
            if UID_BASE <= uid < UID_BASE + UID_SPAN:
                pids.append(int(entry.name))
    return pids


# ---------------------------------------------------------------------------- what works


def test_prints_come_back() -> None:
    result = run("print('hello')\nprint(6 * 7)")
    assert result.stdout == "hello\n42\n"
    assert (result.stderr, result.exit_code, result.killed, result.truncated) == ("", 0, None, False)
    assert 0 < result.seconds < FAST.wall_s


def test_numpy_scipy_sympy_import() -> None:
    code = (
        "import numpy as np, scipy.special, sympy\n"
        "print(int(np.arange(10).sum()), round(float(scipy.special.gamma(5))), sympy.factorint(360))"
    )
    result = run_python(code, SandboxLimits(wall_s=30))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "45 24 {2: 3, 3: 2, 5: 1}"


def test_stderr_and_traceback_come_back() -> None:
    result = run("import sys\nprint('to err', file=sys.stderr)\nprint('out')\nraise ValueError('boom')")
    assert result.stdout == "out\n"
    assert result.stderr.startswith("to err\nTraceback (most recent call last):")
    assert 'File "/sandbox/main.py", line 4' in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: boom")
    assert (result.exit_code, result.killed) == (1, None)


def test_working_dir_is_writable_and_removed_afterwards(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real_mkdtemp = sandbox.tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", recording_mkdtemp)
    result = run(
        "import os\nos.makedirs('sub/dir')\nopen('sub/dir/f.txt', 'w').write('data')\n"
        "print(os.getcwd(), open('/sandbox/sub/dir/f.txt').read())\nos.chmod('sub', 0)"
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "/sandbox data\n"
    assert len(made) == 1 and not os.path.exists(made[0])


def test_runs_in_parallel_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run(f"print({i} * 10)"), range(4)))
    assert [r.stdout for r in results] == [f"{i * 10}\n" for i in range(4)]


# ---------------------------------------------------------------------------- escapes blocked


def test_network_is_unreachable() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        out = probe_json(
            "import socket\n"
            + attempt("connect", f"socket.create_connection(('127.0.0.1', {port}), timeout=2)")
            + attempt("dns", "socket.getaddrinfo('example.com', 80)")
            + attempt("public", "socket.create_connection(('1.1.1.1', 53), timeout=2)")
            + "out['interfaces'] = [name for _, name in socket.if_nameindex()]\n"
        )
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever connected to the host's server
    finally:
        server.close()
    assert out["connect"] == "ConnectionRefusedError"
    assert out["dns"] == "gaierror"
    assert out["public"] in ("OSError", "TimeoutError", "ConnectionRefusedError")
    assert out["interfaces"] == ["lo"]


def test_host_files_are_invisible() -> None:
    paths = {
        "passwd": "/etc/passwd",
        "init": str(PROJECT / "websailor" / "__init__.py"),
        "pyproject": str(PROJECT / "pyproject.toml"),
        "shadow": "/etc/shadow",
    }
    code = "".join(attempt(k, f"open({p!r}).read()") for k, p in paths.items())
    code += attempt("import", "import websailor")
    code += "import os\nout['root'] = sorted(os.listdir('/'))\n"
    code += attempt("project_dir", f"os.listdir({str(PROJECT)!r})")
    out = probe_json(code)
    assert {k: out[k] for k in paths} == {k: "FileNotFoundError" for k in paths}
    assert out["import"] == "ModuleNotFoundError"
    assert out["project_dir"] == "FileNotFoundError"
    assert not {"etc", "home", "work", "tmp", "var"} & set(out["root"])


def test_writes_outside_the_working_dir_fail(tmp_path: Path) -> None:
    name = f"websailor-escape-{os.getpid()}-{time.monotonic_ns()}"
    targets = {
        "tmp": f"/tmp/{name}",
        "usr": f"/usr/{name}",
        "root": f"/{name}",
        "cwd": os.path.join(os.getcwd(), name),
        "host_tmp": str(tmp_path / name),
        "python": os.path.join(os.path.realpath(os.__file__ + "/.."), name),
    }
    out = probe_json("".join(attempt(k, f"open({p!r}, 'w').write('x')") for k, p in targets.items()))
    assert all(v != "ok" for v in out.values()), out
    assert out["usr"] in ("OSError", "PermissionError")  # read-only file system
    for path in targets.values():
        assert not os.path.exists(path)
    assert list(tmp_path.iterdir()) == []


def test_no_privileges_inside() -> None:
    out = probe_json(
        "import os, socket\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
        "out['nnp'] = status['NoNewPrivs'].strip(); out['eff'] = status['CapEff'].strip()\n"
        "out['uid'] = os.getuid(); out['host'] = socket.gethostname()\n"
        "out['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    )
    assert out["nnp"] == "1"
    assert int(out["eff"], 16) == 0
    assert out["host"] == "sandbox"
    assert len(out["pids"]) <= 3  # only the sandbox's own processes are visible
    if ensure_sandbox() == "root":
        assert UID_BASE <= out["uid"] < UID_BASE + UID_SPAN


def test_process_count_is_capped() -> None:
    if os.geteuid() == 0 and ensure_sandbox() != "root":
        pytest.skip("root without privileged bubblewrap: RLIMIT_NPROC cannot apply")
    code = (
        "import os, signal, time\nkids = []\n"
        "for _ in range(100):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(10)\n        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(len(kids))\n"
        "for pid in kids:\n    os.kill(pid, signal.SIGKILL)\n    os.waitpid(pid, 0)\n"
    )
    result = run(code)
    assert result.exit_code == 0, result.stderr
    assert FAST.processes - 3 <= int(result.stdout) < FAST.processes


def test_fork_bomb_is_stopped() -> None:
    if os.geteuid() == 0 and ensure_sandbox() != "root":
        pytest.skip("root without privileged bubblewrap: RLIMIT_NPROC cannot apply")
    start = time.monotonic()
    result = run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    assert time.monotonic() - start < FAST.wall_s + 3
    assert result.killed in ("cpu time limit", "wall-clock timeout")
    deadline = time.monotonic() + 3
    while sandbox_uid_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_uid_processes() == []  # nothing of the sandbox survives on the host


def test_huge_allocation_raises_memory_error() -> None:
    result = run("data = bytearray(10 * 1024 ** 3)\nprint('allocated')")
    assert result.stdout == ""
    assert result.stderr.rstrip().endswith("MemoryError")
    assert (result.exit_code, result.killed) == (1, "memory")


def test_infinite_loop_is_killed() -> None:
    result = run("while True:\n    pass")
    assert result.killed in ("cpu time limit", "wall-clock timeout")
    assert result.seconds < FAST.wall_s + 1


def test_sleep_is_killed_by_the_wall_clock() -> None:
    result = run_python("import time\nprint('before')\ntime.sleep(60)", SandboxLimits(cpu_s=2, wall_s=1.5))
    assert (result.killed, result.timed_out, result.exit_code) == ("wall-clock timeout", True, None)
    assert result.stdout == "before\n"
    assert result.seconds < 3


def test_printing_a_gigabyte_is_cut_and_killed() -> None:
    start = time.monotonic()
    result = run("import sys\nline = 'x' * 65535 + '\\n'\nfor _ in range(16384):\n    sys.stdout.write(line)\n")
    assert (result.killed, result.truncated, result.exit_code) == ("output limit", True, None)
    assert len(result.stdout.encode()) + len(result.stderr.encode()) == FAST.output_bytes
    assert time.monotonic() - start < 3


def test_large_file_write_fails() -> None:
    result = run("open('big.bin', 'wb').write(b'0' * (2 * 1024 * 1024))")
    assert result.exit_code == 1
    assert "File too large" in result.stderr


# ---------------------------------------------------------------------------- unsafe mode


def test_without_bwrap_unsafe_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    with pytest.raises(SandboxUnavailableError) as err:
        run_python("print(1)")
    message = str(err.value)
    assert "bubblewrap" in message and "allow_unsafe=True" in message and f"{UNSAFE_ENV}=1" in message
    with pytest.raises(SandboxUnavailableError):
        PythonInterpreterTool()


def test_unsafe_mode_runs_with_limits_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    monkeypatch.setattr(sandbox, "_warned_unsafe", False)
    monkeypatch.delenv(UNSAFE_ENV, raising=False)
    logger = logging.getLogger("websailor.sandbox.bubblewrap")
    logger.addHandler(caplog.handler)
    try:
        result = run_python("print('unsafe ok')", FAST, allow_unsafe=True)
    finally:
        logger.removeHandler(caplog.handler)
    assert result.stdout == "unsafe ok\n"
    assert any(r.levelno == logging.WARNING and "UNSAFE" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv(UNSAFE_ENV, "1")
    memory = run_python("bytearray(10 * 1024 ** 3)", FAST)  # the env var opts in too; limits still apply
    assert memory.killed == "memory"
    assert run_python("while True:\n    pass", SandboxLimits(cpu_s=1, wall_s=4)).killed == "cpu time limit"


# ---------------------------------------------------------------------------- the tool


def test_tool_schema_and_observation() -> None:
    tool = PythonInterpreterTool(FAST)
    assert tool.schema()["name"] == "PythonInterpreter"
    assert tool.parameters["required"] == ["code"]
    assert tool({"code": "import sys\nprint('a')\nprint('b', file=sys.stderr)"}) == "stdout:\na\nstderr:\nb"
    assert tool({"code": "print(2)"}) == "stdout:\n2"
    assert "printed nothing" in tool({"code": "x = 1"}) and "print()" in tool({"code": "x = 1"})
    assert tool({"code": "```python\nprint(3)\n```"}) == "stdout:\n3"
    failed = tool({"code": "import sys\nsys.exit(3)"})
    assert failed.endswith("Exit code: 3")


def test_tool_errors_and_limits() -> None:
    tool = PythonInterpreterTool(SandboxLimits(cpu_s=2, wall_s=1.5), max_observation_chars=200)
    empty = tool.execute({"code": "  \n"})
    assert empty.error and "code is empty" in empty.observation
    assert tool.execute({}).error  # 'code' is required
    long = tool({"code": "print('x' * 1000)"})
    assert "characters in the middle were cut" in long and "characters cut ...]" in long
    assert len(long) < 400
    slow = tool({"code": "import time\ntime.sleep(30)"})
    assert slow.endswith("Killed: wall-clock timeout of 1.5 s")
    with pytest.raises(InvalidArgumentError):
        SandboxLimits(cpu_s=0)
    assert "ran out of memory (the limit is 512 MB)" in PythonInterpreterTool(FAST)({"code": "bytearray(10**10)"})
    flood = PythonInterpreterTool(FAST)({"code": "while True:\n    print('y' * 1000)"})
    assert "Killed: output limit of 20000 bytes" in flood and "the rest was discarded" in flood


# ---------------------------------------------------------------------------- found by the breaker


def test_namespaces_and_mounts_are_refused() -> None:
    """A user + mount namespace would let the code mount a tmpfs and fill host memory past
    the address-space limit; the seccomp filter refuses them (threads and forks still work)."""
    out = probe_json(
        "import ctypes, os, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "out['unshare'] = libc.unshare(0x10000000 | 0x00020000) == -1 and ctypes.get_errno()\n"
        "out['mount'] = libc.mount(b'none', b'/sandbox', b'tmpfs', 0, None) == -1 and ctypes.get_errno()\n"
        "try:\n    os.memfd_create('x')\n    out['memfd'] = 'ok'\nexcept OSError as e:\n    out['memfd'] = e.errno\n"
        "out['shmget'] = libc.shmget(0, 1 << 20, 0o1600) == -1 and ctypes.get_errno()\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join(); out['thread'] = 'ok'\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nout['fork'] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
    )
    assert out == {"unshare": 1, "mount": 1, "memfd": 1, "shmget": 1, "thread": "ok", "fork": 7}  # EPERM


def test_seccomp_program_shape() -> None:
    from websailor.sandbox.seccomp import sandbox_filter

    program = sandbox_filter("x86_64")
    assert program is not None and len(program) % 8 == 0
    assert sandbox_filter("aarch64") is not None and sandbox_filter("sparc") is None


def test_working_dir_is_capped_in_size_and_never_on_the_host_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real_mkdtemp = sandbox.tempfile.mkdtemp
    monkeypatch.setattr(sandbox.tempfile, "mkdtemp", lambda *a, **k: made.append(real_mkdtemp(*a, **k)) or made[-1])
    limits = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=512, processes=16, output_bytes=20_000, file_mb=16, disk_mb=40)
    result = run_python("import os\nfor i in range(10):\n    open(f'f{i}', 'wb').write(b'x' * (8 << 20))\n", limits)
    assert "No space left on device" in result.stderr
    deep = run_python(
        "import os\np = 'd'\nfor i in range(3000):\n    os.mkdir(p)\n    os.chdir(p)\nprint('deep')", limits
    )
    assert deep.stdout == "deep\n"
    assert made and not any(os.path.exists(m) for m in made)
