"""Process and port helpers for the local cloud: liveness, waiting, stopping, privilege drop.

Must not: know what PostgreSQL or ActiveMQ are.
"""

from __future__ import annotations

import os
import pwd
import signal
import socket
import subprocess
import time
from pathlib import Path

from smile.errors import CloudError


def stat_fields(pid: int) -> list[str]:
    """The fields of `/proc/<pid>/stat` after the command name (state first, then the parent's
    pid, …; `proc(5)` numbers them from 3), or [] when the process is gone. The name is
    skipped by its closing parenthesis: it may hold spaces and parentheses itself."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat.rsplit(")", 1)[1].split()


def parent_pid(pid: int) -> int:
    """The pid of a process's parent (0 when the process is gone)."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields else 0


AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")


def prioritize_session(pid: int, nice: int, autogroup: Path = AUTOGROUP) -> str | None:
    """Give the scheduling group of `pid`'s session the nice value `nice`, where the kernel
    groups processes by session (`sched(7)`, "The autogroup feature"): each session then
    shares the CPU as one process would, so a session of a few mostly idle daemons waits
    behind every busy session for each slice it needs, whatever their own nice values.
    Returns None when done, else why not (no such grouping, not permitted, the process gone).
    """
    try:
        if autogroup.read_text().strip() != "1":
            return "the kernel does not group processes by session"
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError as exc:
        return f"cannot set the priority of session of {pid}: {exc.strerror or exc}"
    return None


def pid_alive(pid: int | None) -> bool:
    """True if a process with this pid exists and is not a zombie."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def read_pidfile(path: Path) -> int | None:
    """The pid in `path`, if the file names a live process."""
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def stop_pid(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds; returns once the process is gone."""
    if not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def service_user() -> str | None:
    """The user PostgreSQL must run as: `postgres` when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise CloudError(
            "running as root but there is no `postgres` user: install postgresql-15 (Debian)"
        ) from exc
    return "postgres"


def as_service_user(argv: list[str]) -> list[str]:
    user = service_user()
    return ["runuser", "-u", user, "--", *argv] if user else argv


def give_to_service_user(path: Path, mode: int = 0o700) -> None:
    """Make `path` owned by the service user (when root) with `mode`."""
    user = service_user()
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(mode)


def run(argv: list[str], what: str, timeout: float = 60.0) -> str:
    """Run a command to completion; a non-zero exit raises CloudError with its output."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )
    except FileNotFoundError as exc:
        raise CloudError(f"{what}: {argv[0]} not found; run the README's install command") from exc
    except subprocess.TimeoutExpired as exc:
        raise CloudError(f"{what}: timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        out = (done.stdout + done.stderr).strip()[-2000:]
        raise CloudError(f"{what} failed (exit {done.returncode}): {out}")
    return done.stdout


def free_port(start: int, taken: set[int] | None = None) -> int:
    """The first port at or above `start` that nobody listens on and is not in `taken`."""
    taken = taken or set()
    for port in range(start, min(start + 2000, 65535)):
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise CloudError(f"no free TCP port at or above {start}")
