"""What the executor learns from the machines' own tables, and the one write a deploy needs of
them: every vertex's TS (to reconcile after a restart), the relations left stale, the
watermarks a fill starts from, how far retention pruned the deltas a new vertex will read,
and a durable flush before an old route goes.

The executor never opens a machine itself (docs/design/overview.md): these reads and that
flush are the statements it needs beside the commands it sends the agents, and they go
through here and `operators.vertex_ts`.

Must not: change a vertex's contents or TS (agents do, by command).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from smile.db import connect, connect_all
from smile.errors import AgentError
from smile.operators import retention, vertex_ts

if TYPE_CHECKING:
    import threading
    from collections.abc import Collection, Mapping

    import psycopg

    from smile.topology import MachineEndpoint, Topology

log = logging.getLogger("smile.deploy")
APP = "smile-executor"


def all_timestamps(machine: MachineEndpoint) -> tuple[dict[str, datetime], datetime] | None:
    """Every vertex TS on `machine` and when they were read (this host's clock); None when
    the machine cannot be read (its heartbeats will tell)."""
    at = datetime.now(UTC)
    try:
        with connect(machine.dsn, autocommit=True, what=machine.name,
                     application_name=APP) as conn:
            return vertex_ts.read_all(conn), at
    except Exception as exc:
        log.warning("cannot read the timestamps of %s: %s", machine.name, exc)
        return None


def timestamp(topology: Topology, machine: str, key: str) -> datetime | None:
    """TS of the vertex `key` on `machine`, None if it has none."""
    with connect(topology.machine(machine).dsn, autocommit=True, what=machine,
                 application_name=APP) as conn:
        return vertex_ts.read_many(conn, [key]).get(key)


def pruned(topology: Topology, deltas: Mapping[str, Collection[str]]) -> dict[str, datetime]:
    """How far retention pruned each delta of `deltas` (machine → delta keys) that was ever
    pruned, by key."""
    found: dict[str, datetime] = {}
    machines = [topology.machine(m) for m in sorted(m for m, keys in deltas.items() if keys)]
    with connect_all(machines, application_name=APP) as conns:
        for m, conn in conns.items():
            found |= retention.pruned(conn, deltas[m])
    return found


def await_watermarks(topology: Topology, bases: Mapping[str, Mapping[str, str]],
                     floor: datetime | None, timeout_s: float,
                     stop: threading.Event) -> tuple[str, datetime]:
    """The oldest watermark of these base deltas (machine → {TS key: label}) and its label,
    waiting (up to `timeout_s`) until it is at or past `floor`. AgentError when one has no
    watermark, or it does not get there in time."""
    labels = {key: label for keys in bases.values() for key, label in keys.items()}
    if not labels:
        raise AgentError("the new vertices read no base delta")
    deadline = time.monotonic() + timeout_s
    machines = [topology.machine(m) for m in sorted(bases)]
    with connect_all(machines, application_name=APP) as conns:
        while True:
            marks: dict[str, datetime] = {}
            for m, conn in conns.items():
                marks |= {labels[k]: t for k, t in vertex_ts.read_many(conn, bases[m]).items()}
            missing = sorted(set(labels.values()) - marks.keys())
            if missing:
                raise AgentError(f"{', '.join(missing)} have no watermark")
            low = min(marks, key=lambda s: marks[s])
            if floor is None or marks[low] >= floor:
                return low, marks[low]
            if time.monotonic() > deadline or stop.is_set():
                raise AgentError(f"deltas the new vertices read are pruned up to "
                                 f"{floor.isoformat()}, but {low} is complete only "
                                 f"up to {marks[low].isoformat()}")
            time.sleep(0.2)


def flush(topology: Topology, machines: Collection[str]) -> None:
    """Make everything committed on `machines` durable: operators commit asynchronously, and a
    transaction with an xid, committed synchronously, flushes all the WAL before it."""
    for m in sorted(machines):
        with connect(topology.machine(m).dsn, autocommit=True, what=m,
                     application_name=APP) as conn, conn.transaction():
            conn.execute("SELECT txid_current()")


class Sessions:
    """Long-lived autocommit sessions to the machines of a topology, by name, for periodic
    readers (the auditor, the rate monitor): each opened when first asked for, opened again
    after its server dropped it, all closed by `close`. `get` raises when a machine cannot be
    reached; the caller skips it this round."""

    def __init__(self, topology: Topology, application_name: str) -> None:
        self.topology = topology
        self.application_name = application_name
        self._conns: dict[str, psycopg.Connection[Any]] = {}

    def get(self, machine: str) -> psycopg.Connection[Any]:
        conn = self._conns.get(machine)
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            conn = connect(self.topology.machine(machine).dsn, autocommit=True, what=machine,
                           application_name=self.application_name)
            self._conns[machine] = conn
        return conn

    def drop(self, machine: str) -> None:
        """Forget `machine`'s session (it failed): the next `get` opens a new one."""
        conn = self._conns.pop(machine, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def staleness_marks(sessions: Sessions, mv: tuple[str, str], sources: list[tuple[str, str]]
                    ) -> tuple[datetime, list[datetime], list[datetime]]:
    """TS(MV), the sources' watermarks and each source machine's clock, read now from the
    machines: (machine, TS key) of the MV and of each source."""
    marks = [vertex_ts.read_with_clock(sessions.get(m), key) for m, key in sources]
    mv_ts, _ = vertex_ts.read_with_clock(sessions.get(mv[0]), mv[1])
    return mv_ts, [t for t, _ in marks], [c for _, c in marks]


def rows_between(sessions: Sessions, machine: str, table: tuple[str, str], lo: datetime,
                 hi: datetime) -> int:
    """Rows of a delta table on `machine` stamped in (lo, hi]."""
    return vertex_ts.slice_rows(sessions.get(machine), table, lo, hi)


def vertex_timestamp(sessions: Sessions, machine: str, key: str) -> datetime:
    """TS of the vertex with TS key `key` on `machine`."""
    return vertex_ts.read(sessions.get(machine), key)


def stale_vertices(sessions: Sessions, machine: str) -> list[str]:
    """The TS keys of the vertices `machine` holds stale: relations left so or emptied by a
    crash, deltas a crash emptied (docs/design/recompute.md, agents.md)."""
    return list(vertex_ts.read_stale(sessions.get(machine)))


def capture_gone(conn: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """The published tables of a machine that lost published columns (dropped or renamed;
    captured as NULL since): `schema.table` → those columns."""
    if conn.execute("SELECT to_regclass('_smile.capture_state')").fetchone() == (None,):
        return {}
    rows = conn.execute(
        "SELECT r.schema_name || '.' || r.table_name, s.gone FROM _smile.capture_state s "
        "JOIN _smile.captured_relations r USING (relid) WHERE s.error IS NULL "
        "AND cardinality(s.gone) > 0").fetchall()
    return {str(r[0]): list(r[1]) for r in rows}


def table_columns(conn: psycopg.Connection[Any], qualified: str) -> list[str]:
    """The columns table `schema.table` has now (none when it is gone)."""
    schema, table = qualified.split(".", 1)
    return [str(r[0]) for r in conn.execute(
        "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
        "c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (schema, table)).fetchall()]


def capture_errors(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """The published tables of a machine whose capture stopped (a schema change capture does
    not follow, the table dropped): `schema.table` → why, as the capturer recorded it."""
    if conn.execute("SELECT to_regclass('_smile.capture_state')").fetchone() == (None,):
        return {}  # nothing published there yet
    rows = conn.execute(
        "SELECT r.schema_name || '.' || r.table_name, s.error FROM _smile.capture_state s "
        "JOIN _smile.captured_relations r USING (relid) WHERE s.error IS NOT NULL").fetchall()
    return {str(r[0]): str(r[1]) for r in rows}

