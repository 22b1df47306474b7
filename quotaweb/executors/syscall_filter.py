"""The seccomp filter of the command sandbox (docs/executors.md, Isolation): a job may not
make namespaces or mounts of its own.

Inside its sandbox a job runs as an unprivileged user, but the kernel still lets an
unprivileged process create a user namespace, in which it is root, and mount file systems
there (`unshare -Urm`).  That reaches no file the sandbox hides, but it is the kernel
surface most privilege escalations have come through, and a job never needs it.  bubblewrap's
own `--disable-userns` needs a user namespace around the sandbox, which ours has not (the
job user must be a real user of the host), so bubblewrap is given this filter instead
(`--seccomp FD`).  It refuses, with EPERM:

- unshare() and setns(), and clone() asking for any new namespace;
- mount(), umount2(), pivot_root() and the new mount API (open_tree, move_mount, fsopen,
  fsconfig, fsmount, fspick, mount_setattr);
- every system call of another ABI than the host's own (32-bit x86 and x32 on x86-64),
  where the numbers above would mean other calls.

clone3() answers ENOSYS: its flags sit in memory a filter cannot read, and the C library
then falls back to clone(), whose flags it can.  Everything else is allowed.

The program is classic BPF, written out here rather than built with libseccomp, so the
sandbox needs no library beyond bubblewrap.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16

# Classic BPF opcodes (linux/bpf_common.h).
LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000

# The namespace flags of clone() (linux/sched.h); CLONE_NEWTIME is clone3()'s and
# unshare()'s only (its bit is the exit signal's in clone()).
CLONE_NEW_NAMESPACES = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                        | 0x20000000 | 0x40000000)
X32_SYSCALL_BIT = 0x40000000


@dataclass(frozen=True)
class Abi:
    audit_arch: int
    clone: int
    clone3: int
    refused: tuple[int, ...]  # unshare, setns, mount and friends
    x32: bool = False


# The new mount API's numbers are the same on every architecture.
NEW_MOUNT_API = (428, 429, 430, 431, 432, 433, 442)
ABIS = {
    # unshare, setns, mount, umount2, pivot_root
    "x86_64": Abi(0xC000003E, clone=56, clone3=435, refused=(272, 308, 165, 166, 155,
                                                             *NEW_MOUNT_API), x32=True),
    "aarch64": Abi(0xC00000B7, clone=220, clone3=435, refused=(97, 268, 40, 39, 41,
                                                               *NEW_MOUNT_API)),
}


class UnknownArchitecture(Exception):
    """No filter is written for this machine's system call numbers."""


def _instruction(code: int, jump_true: int, jump_false: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jump_true, jump_false, k)


Jump = int | str  # a distance, or the name of a verdict at the program's end
VERDICTS = {"allow": SECCOMP_RET_ALLOW, "refuse": SECCOMP_RET_ERRNO | errno.EPERM,
            "nosys": SECCOMP_RET_ERRNO | errno.ENOSYS}


def program(machine: str | None = None) -> bytes:
    """The filter for `machine` (default: this one), as bubblewrap reads it (struct
    sock_filter after struct sock_filter)."""
    name = machine or platform.machine()
    abi = ABIS.get(name)
    if abi is None:
        raise UnknownArchitecture(f"no system call filter is written for {name}")
    code: list[tuple[int, Jump, Jump, int]] = [
        (LD_W_ABS, 0, 0, ARCH_OFFSET),
        (JEQ_K, 0, "refuse", abi.audit_arch),  # another ABI's numbers mean other calls
        (LD_W_ABS, 0, 0, NR_OFFSET),
    ]
    if abi.x32:
        code.append((JGE_K, "refuse", 0, X32_SYSCALL_BIT))
    code += [(JEQ_K, "refuse", 0, number) for number in abi.refused]
    code += [
        (JEQ_K, "nosys", 0, abi.clone3),
        (JEQ_K, 0, "allow", abi.clone),
        (LD_W_ABS, 0, 0, ARG0_OFFSET),  # clone's flags (their low 32 bits)
        (JSET_K, "refuse", "allow", CLONE_NEW_NAMESPACES),
    ]
    # The verdicts follow the code in VERDICTS' order; a jump counts from the next one.
    at = {verdict: len(code) + index for index, verdict in enumerate(VERDICTS)}

    def distance(index: int, target: Jump) -> int:
        return at[target] - index - 1 if isinstance(target, str) else target

    instructions = [_instruction(op, distance(i, yes), distance(i, no), k)
                    for i, (op, yes, no, k) in enumerate(code)]
    instructions += [_instruction(RET_K, 0, 0, value) for value in VERDICTS.values()]
    return b"".join(instructions)
