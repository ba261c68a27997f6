"""The local cloud against real services: health, status JSON, idempotence, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import stomp

from smile.cloud.broker import stomp_handshake
from smile.cloud.local import LocalCloud
from smile.cloud.procs import AUTOGROUP, pid_alive
from smile.cloud.supervisor import DAEMONS_NICE
from tests.fix_cloud import CloudHandle, fresh_state_dir, throwaway_settings

pytestmark = pytest.mark.services


def _smile(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smile.cli.main", *args], capture_output=True, text=True,
        env=(os.environ | (env or {})), timeout=120, check=False,
    )


def test_status_json_shows_every_service_healthy(cloud: CloudHandle) -> None:
    if cloud.local is None:
        pytest.skip("external services")
    done = _smile("cloud", "status", "--json", "--state-dir", str(cloud.settings.state_dir))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [m["name"] for m in doc["machines"]] == ["m1", "m2", "m3"]
    assert all(m["healthy"] and m["dsn"].startswith("postgresql://") for m in doc["machines"])
    assert doc["catalog"]["healthy"] and doc["broker"]["healthy"]
    assert doc["broker"]["stomp_url"].startswith("stomp://127.0.0.1:")


def test_machines_are_logical_replication_ready(cloud: CloudHandle) -> None:
    for machine in cloud.topology.machines:
        with psycopg.connect(machine.dsn) as conn:
            settings = dict(conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('wal_level', 'track_commit_timestamp', 'max_replication_slots', "
                "'listen_addresses', 'server_version_num')"
            ).fetchall())
        assert settings["wal_level"] == "logical"
        assert settings["track_commit_timestamp"] == "on"
        assert int(settings["max_replication_slots"]) >= 16
        assert settings["listen_addresses"] == "127.0.0.1"
        assert settings["server_version_num"].startswith("15")


def test_machines_are_separate_servers(cloud: CloudHandle) -> None:
    ids = set()
    for machine in [*cloud.topology.machines]:
        with psycopg.connect(machine.dsn) as conn:
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
            assert row is not None
            ids.add(row[0])
    with psycopg.connect(cloud.topology.catalog_dsn) as conn:
        row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
        assert row is not None
        ids.add(row[0])
    assert len(ids) == len(cloud.topology.machines) + 1


def test_broker_carries_stomp_messages(cloud: CloudHandle) -> None:
    host, port = cloud.topology.broker_url.removeprefix("stomp://").split(":")
    received: list[str] = []

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_message(self, frame: stomp.utils.Frame) -> None:
            received.append(frame.body)

    conn = stomp.Connection12([(host, int(port))])
    conn.set_listener("t", Listener())
    conn.connect(wait=True)
    conn.subscribe("/queue/smile.test", id="1", ack="auto")
    conn.send("/queue/smile.test", body="hello", receipt="r1")
    import time

    deadline = time.monotonic() + 10
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    conn.disconnect()
    assert received == ["hello"]


def test_up_is_idempotent(cloud: CloudHandle) -> None:
    if cloud.local is None:
        pytest.skip("external services")
    before = cloud.local.pids()
    status = cloud.local.up(3, daemons=False)
    assert status.healthy
    assert sorted(cloud.local.pids()) == sorted(before)  # nothing restarted


def test_up_refuses_fewer_machines(cloud: CloudHandle) -> None:
    if cloud.local is None:
        pytest.skip("external services")
    from smile.errors import ConfigError

    with pytest.raises(ConfigError, match="already has 3 machines"):
        cloud.local.up(2)


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmd and pid_alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


def test_down_leaves_no_process_and_up_keeps_data() -> None:
    state = fresh_state_dir("smile-down-")
    settings = throwaway_settings(state, port_offset=100)
    cloud = LocalCloud(settings)
    try:
        status = cloud.up(1)
        assert status.healthy
        assert sorted(d.name for d in status.daemons) == ["agent-m1", "capture-m1"]
        pids = cloud.pids()
        assert len(pids) == 5  # catalog, m1, broker, m1's capturer and agent
        with psycopg.connect(status.machines[0].url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        cloud.down()
        assert not any(pid_alive(p) for p in pids)
        assert _processes_mentioning(str(state)) == []
        assert not stomp_handshake("127.0.0.1", int(status.broker.url.rsplit(":", 1)[1]))  # type: ignore[union-attr]
        again = cloud.up(1)  # restart keeps the data directory
        assert again.healthy
        with psycopg.connect(again.machines[0].url) as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]
    finally:
        cloud.down(purge=True)
    assert _processes_mentioning(str(state)) == []
    assert not state.exists()


def test_a_daemon_that_dies_is_restarted_and_counted() -> None:
    """The capturers and agents run under supervisord; a SIGKILLed agent is back
    with a new pid within seconds, and `smile cloud status` says it restarted once and how it
    ended; `down` stops supervisord too."""
    state = fresh_state_dir("smile-supervised-")
    cloud = LocalCloud(throwaway_settings(state, port_offset=150))
    try:
        status = cloud.up(1)
        assert status.healthy
        first = next(d for d in status.daemons if d.name == "agent-m1")
        assert first.pid is not None and first.restarts == 0
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            now = next(d for d in cloud.status().daemons if d.name == "agent-m1")
            if now.pid is not None and now.pid != first.pid:
                break
            assert time.monotonic() < deadline, "the agent was not restarted"
            time.sleep(0.2)
        assert now.restarts == 1 and "SIGKILL" in now.last_exit, now
        if os.geteuid() == 0:  # a negative nice needs root: the daemons before the clusters
            assert os.getpriority(os.PRIO_PROCESS, now.pid) == DAEMONS_NICE  # a restart's too
            if AUTOGROUP.read_text().strip() == "1":
                group = Path(f"/proc/{now.pid}/autogroup").read_text().split()
                assert group[-1] == str(DAEMONS_NICE), group
                # the runner's own group; empty where it is the kernel's root group, which is
                # no session's (CI's runner): either way not the daemons'
                mine = Path("/proc/self/autogroup").read_text().split()
                assert mine[:1] != group[:1], (mine, group)
        done = _smile("cloud", "status", "--json", "--state-dir", str(state))
        daemons = {d["name"]: d for d in json.loads(done.stdout)["daemons"]}
        assert daemons["agent-m1"]["restarts"] == 1
        assert daemons["capture-m1"]["restarts"] == 0 and daemons["capture-m1"]["healthy"]
    finally:
        cloud.down(purge=True)
    assert _processes_mentioning(str(state)) == []


def test_cli_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    done = _smile("--state-dir", str(empty), "data", "load", "--tweets", "10")
    assert done.returncode == 2
    assert "smile cloud up" in done.stderr and "Traceback" not in done.stderr
    done = _smile("workload", "run", "--rate", "1", "--duration", "1",
                  env={"SMILE_BROKER_URL": "tcp://nope"})
    assert done.returncode == 2
    assert "broker_url" in done.stderr and "Traceback" not in done.stderr
    done = _smile("cloud", "up", "--machines", "-1", "--state-dir", str(empty))
    assert done.returncode == 2 and "at least 0" in done.stderr
