"""oskit.py — the few Linux process controls the judge uses, through ctypes, each a no-op
elsewhere.

- `die_with_parent(sig)`: PR_SET_PDEATHSIG, so a child never outlives the process that started
  it;
- `become_subreaper()`: PR_SET_CHILD_SUBREAPER, so orphans of our children (a double-forked
  daemon) are re-parented to us, and `kill_descendants` can find and stop them;
- `not_dumpable()`: PR_SET_DUMPABLE 0, so other processes of the same user cannot open our
  /proc/<pid>/fd, /environ or /mem (the pipes and the key of the results channel);
- `enter_sandbox(...)`: a user, mount and PID namespace where the whole file system is read-only
  (except a private scratch folder), no process outside can be seen or signalled, and no
  capability is left.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

LINUX = sys.platform.startswith("linux")
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 36
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
}
VIRTUAL = ("/proc", "/sys", "/dev")  # kernel file systems: left as they are
SCRATCH = "/dev/shm"  # replaced by a private tmpfs inside the sandbox

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, value: int) -> bool:
    return LINUX and libc().prctl(option, value, 0, 0, 0) == 0


def die_with_parent(sig: int = signal.SIGKILL, expected_parent: int | None = None) -> None:
    """Get `sig` when the parent ends; if it already has (we were re-parented), act on it
    now."""
    prctl(PR_SET_PDEATHSIG, int(sig))
    if expected_parent is not None and os.getppid() != expected_parent:
        os.kill(os.getpid(), sig)


def become_subreaper() -> None:
    prctl(PR_SET_CHILD_SUBREAPER, 1)


def not_dumpable() -> None:
    prctl(PR_SET_DUMPABLE, 0)


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux: read from /proc; elsewhere none are
    known)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def kill_descendants(root: int | None = None, rounds: int = 20) -> int:
    """SIGKILL every process below `root` (default: us), reaping our own children; returns how
    many."""
    root = os.getpid() if root is None else root
    killed = 0
    for _ in range(rounds):
        stack, found = [root], []
        while stack:
            for child in children_of(stack.pop()):
                found.append(child)
                stack.append(child)
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        reap()
    return killed


def reap() -> None:
    """Collect every finished child of ours, so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---------------------------------------------------------------- the zygote's control socket


def send_line(sock, message: dict, fds: list[int] = ()) -> None:
    """One JSON line on a stream socket, with file descriptors attached to its first byte."""
    import json
    import socket

    data = (json.dumps(message) + "\n").encode()
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    sock.sendall(data[sent:])


def recv_line(sock) -> tuple[dict | None, list[int]]:
    """The next JSON line and the descriptors that came with it; (None, []) once the peer has
    closed."""
    import json
    import socket

    data, fds, _, _ = socket.recv_fds(sock, 65536, 4)
    while data and not data.endswith(b"\n"):
        more = sock.recv(65536)
        if not more:
            break
        data += more
    return (json.loads(data) if data else None), list(fds)


# ---------------------------------------------------------------- the namespace sandbox


def unshare_namespaces() -> None:
    """New user, mount and PID namespaces (the next fork is PID 1 of the new one), our ids
    mapped to themselves."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc().unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def lock_down(tmp_size: str = "64m") -> None:
    """Inside the new namespaces: every file system read-only, a private scratch tmpfs and
    /proc, no capabilities."""
    c = libc()
    _check(c.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    with open("/proc/self/mountinfo", "rb") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        point = fields[4].decode().encode("latin-1").decode("unicode_escape").encode()
        if point.decode(errors="replace").startswith(VIRTUAL):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for option in fields[5].decode().split(","):
            flags |= MOUNT_FLAGS.get(
                option, 0
            )  # a locked flag must be kept, or the remount is refused
        _check(c.mount(None, point, None, flags, None), f"remount {point.decode()} read-only")
    if os.path.isdir(
        SCRATCH
    ):  # a private scratch folder ($TMPDIR): /tmp itself stays visible, read-only
        _check(
            c.mount(
                b"tmpfs",
                SCRATCH.encode(),
                b"tmpfs",
                MS_NOSUID | MS_NODEV,
                f"size={tmp_size}".encode(),
            ),
            f"mount {SCRATCH}",
        )
    c.mount(
        b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None
    )  # optional: hides outside pids
    _check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    drop_capabilities()


def drop_capabilities() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    _check(
        libc().capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "drop capabilities"
    )
