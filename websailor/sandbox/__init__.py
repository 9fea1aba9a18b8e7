"""The sandbox for untrusted Python: bubblewrap namespaces, a seccomp filter, resource limits.

:func:`run_python` runs code isolated from the host and the network
(:mod:`websailor.sandbox.bubblewrap`); :mod:`websailor.sandbox.seccomp` builds the system-call
filter it loads, :mod:`websailor.sandbox.limits` holds the limits and the result of a run, and
:mod:`websailor.sandbox.supervise` watches a run from the host. The agent's ``PythonInterpreter`` tool
(:mod:`websailor.tools.python_interpreter`) is its one user in the package.
"""

from websailor.sandbox.bubblewrap import UNSAFE_ENV, SandboxUnavailableError, ensure_sandbox, run_python, sandbox_status
from websailor.sandbox.limits import SandboxLimits, SandboxResult

__all__ = [
    "UNSAFE_ENV",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "ensure_sandbox",
    "run_python",
    "sandbox_status",
]
