"""Consumers' reads yield the CPU to SMILE's work (`smile/agent/reader_priority.py`, and the
local cloud's daemons' session, `procs.prioritize_session`): real processes have their
nice value raised only when they are children of the given postmaster and less nice than asked,
never lowered; on a real cluster a consumer role's backend is lowered and SMILE's own are not;
an agent on another host than its cluster touches nothing."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from smile.agent.reader_priority import ReaderPriority, lower, serves_here
from smile.cloud.procs import AUTOGROUP, parent_pid, prioritize_session
from smile.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fix_cloud import CloudHandle


def _nice(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def _sleeper(nice: int = 0) -> subprocess.Popen[bytes]:
    """A child `nice` nicer than this process, already so when this returns: `nice -n` sets
    it in the child after its start, which would race with the round under test."""
    child = subprocess.Popen(["nice", "-n", str(nice), "sleep", "60"])
    want, deadline = min(19, _nice(0) + nice), time.monotonic() + 10
    while _nice(child.pid) != want:
        assert time.monotonic() < deadline, f"the child never got to nice {want}"
        time.sleep(0.005)
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_only_children_of_the_postmaster_and_only_downwards(
        children: list[subprocess.Popen[bytes]]) -> None:
    base = _nice(0)  # the children start at this test's own nice value
    if base > 8:
        pytest.skip(f"this test runs at nice {base}: no room to lower its children")
    plain, already, stranger = _sleeper(), _sleeper(19 - base), _sleeper()
    children += [plain, already, stranger]
    gone = _sleeper()
    gone.kill()
    gone.wait()
    me = os.getpid()
    assert lower([plain.pid, already.pid, gone.pid], me, base + 10) == 1
    assert (_nice(plain.pid), _nice(already.pid)) == (base + 10, 19)
    assert lower([plain.pid], me, base + 10) == 0  # a second round finds it done
    assert lower([stranger.pid], me + 1, base + 10) == 0  # not a child of that "postmaster"
    assert _nice(stranger.pid) == base


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a round as another user")
def test_another_users_process_raises_permission_error(
        children: list[subprocess.Popen[bytes]]) -> None:
    """Not root, nor the processes' user: `lower` says so (the round logs it once). The
    round runs in a child that drops to `nobody`."""
    if _nice(0) >= 10:
        pytest.skip(f"this test runs at nice {_nice(0)}: its children are nicer than asked")
    target = _sleeper()
    children.append(target)
    nobody = pwd.getpwnam("nobody")
    me = os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit status
        code = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            lower([target.pid], me, 10)
        except PermissionError:
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 3
    assert _nice(target.pid) == _nice(0)


def test_nice_out_of_range_is_refused() -> None:
    for bad in (-1, 20):
        with pytest.raises(ConfigError, match="reader nice"):
            ReaderPriority(bad)


@contextmanager
def consumer_connection(dsn: str, role: str = "smile_c_prio_test"
                        ) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A connection as a consumer's role (`smile_c_…`) made for the test, dropped after."""
    password = "prio-test-pw"
    with psycopg.connect(dsn, autocommit=True) as admin:
        _drop(admin, role)
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(password)))
        admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(conninfo_to_dict(dsn)["dbname"]), sql.Identifier(role)))
        try:
            with psycopg.connect(make_conninfo(dsn, user=role, password=password)) as reader:
                yield reader
        finally:
            _drop(admin, role)


def _drop(admin: psycopg.Connection[tuple[Any, ...]], role: str) -> None:
    if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))  # its grants
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.services
def test_a_consumers_backend_yields_and_smiles_do_not(cloud: CloudHandle) -> None:
    dsn = cloud.topology.machines[0].dsn
    with consumer_connection(dsn) as reader, psycopg.connect(dsn, autocommit=True) as admin:
        reader_pid = reader.info.backend_pid
        base = _nice(parent_pid(reader_pid))  # the postmaster's: its backends start at it
        assert base < 10, f"the cluster runs at nice {base}"
        assert ReaderPriority(0)(admin) == 0  # off: nothing touched
        assert _nice(reader_pid) == base
        assert ReaderPriority(10)(admin) == 1
        assert _nice(reader_pid) == 10
        assert _nice(admin.info.backend_pid) == base
        assert ReaderPriority(10)(admin) == 0  # already lowered


@pytest.mark.services
def test_a_backend_is_known_by_its_clusters_data_directory(cloud: CloudHandle) -> None:
    """An agent acts only where its cluster's backend runs in the cluster's data directory
    on this host: a backend of m1 is not one of m2's, and a pid from another host's
    cluster (here: one that does not exist) is nobody's."""
    first, second = (psycopg.connect(m.dsn, autocommit=True)
                     for m in cloud.topology.machines[:2])
    with first, second:
        dirs = [str(c.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
                for c in (first, second)]
        pid = first.info.backend_pid
        assert serves_here(pid, dirs[0])
        assert not serves_here(pid, dirs[1])
        assert not serves_here(2**22 + 1, dirs[0])  # above pid_max's default: no such process


@pytest.mark.skipif(os.geteuid() != 0 or AUTOGROUP.read_text().strip() != "1",
                    reason="needs root and the kernel's grouping by session")
def test_a_sessions_scheduling_group_gets_the_nice_value(
        children: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    """`procs.prioritize_session` (the local cloud's daemons, `supervisor.DAEMONS_NICE`):
    the group of the process's own session, not the caller's; a kernel without the grouping
    is said to be so."""
    daemon = subprocess.Popen(["sleep", "60"], start_new_session=True)
    children.append(daemon)
    mine = Path("/proc/self/autogroup").read_text()
    assert prioritize_session(daemon.pid, -5) is None
    assert Path(f"/proc/{daemon.pid}/autogroup").read_text().split()[-1] == "-5"
    assert Path("/proc/self/autogroup").read_text() == mine
    off = tmp_path / "sched_autogroup_enabled"
    off.write_text("0\n")
    assert prioritize_session(daemon.pid, 5, off) == \
        "the kernel does not group processes by session"
    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    why = prioritize_session(gone.pid, -5)
    assert why is not None and str(gone.pid) in why
