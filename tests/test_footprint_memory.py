"""Which connection of a cluster its own memory is in (`footprint.connection_memory`), and the
setting that bounds what a backend keeps for temporary tables (`footprint.setting_mb`), read
from a real cluster of the test cloud and this box's /proc: a connection that cycles temporary
tables, as DeltaToRel does, keeps their local buffers up to `temp_buffers` and no further —
the rise the long run's clusters showed on a fresh cloud (experiments/README.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from smile.experiments.footprint import connection_memory, daemon_pids, setting_mb

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = [pytest.mark.services,
              pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(),
                                 reason="needs /proc/PID/smaps_rollup")]

WHO = "smile-test-temp-tables"


def _cycle_temp_tables(conn: psycopg.Connection[object], rounds: int, mb: float) -> None:
    """`rounds` temporary tables of about `mb` MB each, each dropped at its commit."""
    rows = int(mb * 1024 * 1024 / 1000)
    for _ in range(rounds):
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE __t ON COMMIT DROP AS "
                         "SELECT repeat('x', 900) AS pad FROM generate_series(1, %s)", (rows,))


def test_a_connection_cycling_temp_tables_keeps_its_local_buffers_up_to_temp_buffers(
        cloud: CloudHandle) -> None:
    if cloud.local is None:
        pytest.skip("an external cloud's backends are not this box's processes")
    state_dir = str(cloud.settings.state_dir)
    machine = cloud.topology.machines[0]
    pools = setting_mb(cloud.topology, "temp_buffers")
    assert set(pools) == {"postgres catalog", *(f"postgres {m.name}"
                                                for m in cloud.topology.machines)}
    pool = pools[f"postgres {machine.name}"]
    assert pool == 8.0  # PostgreSQL's default, which the clusters keep
    caps = setting_mb(cloud.topology, "shared_memory_size")
    assert all(v > pool for v in caps.values())  # shared_buffers and friends: far more
    key = f"{machine.name} {WHO}"
    with psycopg.connect(machine.dsn, autocommit=True, application_name=WHO) as conn:
        before = connection_memory(cloud.topology, daemon_pids(state_dir))
        assert key in before  # named by its application_name, under its cluster
        assert all(k.split(" ", 1)[0] in {"catalog", *(m.name for m in cloud.topology.machines)}
                   for k in before)
        _cycle_temp_tables(conn, 3, 2.0)  # 2-MB tables, three times: one pool's worth
        small = connection_memory(cloud.topology, daemon_pids(state_dir))[key]
        _cycle_temp_tables(conn, 4, 6.0)  # 6-MB tables: more than a pool, spilled to disk
        full = connection_memory(cloud.topology, daemon_pids(state_dir))[key]
        _cycle_temp_tables(conn, 4, 6.0)  # and again: the pool is full, nothing more is kept
        again = connection_memory(cloud.topology, daemon_pids(state_dir))[key]
    # the local buffers come on top of what the connection had, up to the pool and no more
    assert small - before[key] >= 1.5, (before[key], small)
    assert full - before[key] >= 0.75 * pool, (before[key], full)
    assert full - before[key] <= pool + 2.0, (before[key], full)
    assert abs(again - full) <= 1.0, (full, again)
    # gone with its connection
    assert key not in connection_memory(cloud.topology, daemon_pids(state_dir))
