"""A small seccomp filter for the Python sandbox: the code may not create namespaces,
mount file systems, make memory-backed files or System V shared memory, or use io_uring, bpf,
keyctl, userfaultfd or perf events.

Without it, sandboxed code could ``unshare(CLONE_NEWUSER | CLONE_NEWNS)`` and mount a tmpfs of
its own, or fill ``memfd`` files or ``shmget`` segments, and so hold host memory past the
address-space limit (shared memory is not counted by ``RLIMIT_AS``). bubblewrap loads the filter (``--seccomp FD``) just before it runs the
launcher, and it holds for every process the code starts.

The program is classic BPF as ``struct sock_filter`` records (``<HBBI``): check the
architecture, load the syscall number, return ``EPERM`` for the listed calls and for
``clone`` with any ``CLONE_NEW*`` flag, ``ENOSYS`` for ``clone3`` (whose flags sit in memory a
filter cannot read; glibc then falls back to ``clone``), and allow everything else.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF instruction classes and fields (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
# seccomp return values (linux/seccomp.h)
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
# offsets in struct seccomp_data
_NR, _ARCH, _ARG0 = 0, 4, 16
#: Every CLONE_NEW* flag (namespace creation through clone).
CLONE_NEW_FLAGS = 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00020000 | 0x00000080

#: Per machine: audit architecture, x32 bit (x86_64 only), clone, clone3 and the denied calls
#: (unshare, setns, mount, umount2, pivot_root, fsopen, fsmount, open_tree, move_mount,
#: io_uring_setup, bpf, keyctl, add_key, request_key, userfaultfd, perf_event_open,
#: memfd_create, memfd_secret, shmget).
_ARCHES = {
    "x86_64": (
        0xC000003E,
        0x40000000,
        56,
        435,
        (272, 308, 165, 166, 155, 430, 432, 428, 429, 425, 321, 250, 248, 249, 323, 298, 319, 447, 29),
    ),
    "aarch64": (
        0xC00000B7,
        None,
        220,
        435,
        (97, 268, 40, 39, 41, 430, 432, 428, 429, 425, 280, 219, 217, 218, 282, 241, 279, 447, 194),
    ),
}


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def sandbox_filter(machine: str | None = None) -> bytes | None:
    """The filter program for ``machine`` (default: this one), or ``None`` where the syscall
    table is not known (the sandbox then runs without it)."""
    spec = _ARCHES.get(machine or platform.machine())
    if spec is None:
        return None
    arch, x32, clone, clone3, denied = spec
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    prog = [_ins(_LD_W_ABS, _ARCH), _ins(_JEQ_K, arch, jt=1), _ins(_RET_K, _KILL_PROCESS), _ins(_LD_W_ABS, _NR)]
    if x32 is not None:  # the x32 ABI numbers syscalls from 0x40000000: refuse them all
        prog += [_ins(_JGE_K, x32, jf=1), _ins(_RET_K, eperm)]
    for nr in denied:
        prog += [_ins(_JEQ_K, nr, jf=1), _ins(_RET_K, eperm)]
    prog += [_ins(_JEQ_K, clone3, jf=1), _ins(_RET_K, enosys)]
    prog += [
        _ins(_JEQ_K, clone, jf=3),
        _ins(_LD_W_ABS, _ARG0),
        _ins(_JSET_K, CLONE_NEW_FLAGS, jf=1),
        _ins(_RET_K, eperm),
    ]
    prog += [_ins(_RET_K, _ALLOW)]
    return b"".join(prog)
