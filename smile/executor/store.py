"""The executor's tables in the catalog database (`smile_catalog`): published relations,
consumers (hashed tokens), sharings (with their plan and admission figures), the push log (every
PUSH_DONE: the work done and the tuples moved) and the auditor's snapshots. The one durable
memory of the executor: after a restart it rebuilds everything from here and from the vertex
timestamps.

Must not: decide anything; it reads and writes rows.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from smile.db import connect
from smile.deploy.plan_store import DDL as PLANS_DDL  # the plan versions live beside
from smile.optimizer.plan import charged_tuples

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    import psycopg

DDL = PLANS_DDL + """
CREATE TABLE IF NOT EXISTS smile_catalog.relations (
    machine      text NOT NULL,
    table_name   text NOT NULL,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (machine, table_name)
);
CREATE TABLE IF NOT EXISTS smile_catalog.sharings (
    id                serial PRIMARY KEY,
    name              text NOT NULL,
    sql               text NOT NULL,
    staleness_s       float8 NOT NULL,
    penalty_per_tuple float8 NOT NULL,
    status            text NOT NULL,
    reason            text NOT NULL,
    decision          jsonb NOT NULL,
    cp_s              float8,
    cost_per_s        float8,
    resource_cost_per_s float8,
    mv_machine        text,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    withdrawn_at      timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS sharings_live_name ON smile_catalog.sharings (name)
    WHERE status IN ('admitted', 'installing');
ALTER TABLE smile_catalog.sharings ADD COLUMN IF NOT EXISTS pusher text NOT NULL DEFAULT 'main';
ALTER TABLE smile_catalog.sharings ADD COLUMN IF NOT EXISTS consumer text;
CREATE TABLE IF NOT EXISTS smile_catalog.consumers (
    name        text PRIMARY KEY,
    token_hash  text NOT NULL UNIQUE,
    admin       boolean NOT NULL,
    pg_password text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS smile_catalog.push_log (
    sharing  text NOT NULL,
    vertex   text NOT NULL,
    kind     text NOT NULL,
    to_ts    timestamptz NOT NULL,
    seconds  float8 NOT NULL,
    rows     bigint NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS machine text;
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS rows_in bigint;
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS bytes bigint;
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS cpu_seconds float8;
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS shared_by text[];
ALTER TABLE smile_catalog.push_log ADD COLUMN IF NOT EXISTS pushes bigint NOT NULL DEFAULT 1;
CREATE INDEX IF NOT EXISTS push_log_sharing ON smile_catalog.push_log (sharing, at);
CREATE INDEX IF NOT EXISTS push_log_shared_by ON smile_catalog.push_log USING gin (shared_by);
CREATE TABLE IF NOT EXISTS smile_catalog.audit (
    at            timestamptz NOT NULL,
    sharing       text NOT NULL,
    staleness_s   float8 NOT NULL,
    sla_s         float8 NOT NULL,
    sla_ok        boolean NOT NULL,
    violations    bigint NOT NULL,
    resource_cost float8 NOT NULL,
    penalty_cost  float8 NOT NULL,
    late_tuples   bigint NOT NULL,
    tuples_moved  bigint NOT NULL,
    work_s        float8 NOT NULL,
    mv_ts         timestamptz
);
CREATE INDEX IF NOT EXISTS audit_sharing ON smile_catalog.audit (sharing, at);
ALTER TABLE smile_catalog.audit ADD COLUMN IF NOT EXISTS capture_lag_s float8;
CREATE TABLE IF NOT EXISTS smile_catalog.options (
    key   text PRIMARY KEY,
    value jsonb NOT NULL
);
"""


@dataclass(frozen=True)
class SharingRow:
    id: int
    name: str
    sql: str
    staleness_s: float
    penalty_per_tuple: float
    status: str
    reason: str
    decision: dict[str, Any]
    cp_s: float | None
    cost_per_s: float | None
    resource_cost_per_s: float | None
    mv_machine: str | None
    created_at: datetime
    withdrawn_at: datetime | None
    pusher: str = "main"
    consumer: str | None = None
    """Who submitted it (None: before consumers existed)."""


@dataclass(frozen=True)
class ConsumerRow:
    name: str
    token_hash: str
    admin: bool
    pg_password: str
    """The password of its PostgreSQL role on the machines holding its MVs."""


_SHARING_COLS = ("id, name, sql, staleness_s, penalty_per_tuple, status, reason, decision, cp_s, "
                 "cost_per_s, resource_cost_per_s, mv_machine, created_at, withdrawn_at, pusher, "
                 "consumer")


BUSY_S = "coalesce(cpu_seconds, seconds)"
"""A push's CPU seconds: what the agent measured, its wall time where it measured none (an
older agent, a Spark join, a database on another host)."""
_WINDOW = ("AND (%s::timestamptz IS NULL OR at >= %s) AND (%s::timestamptz IS NULL OR "
           "at <= %s)")
"""Rows of one life of a sharing's name (a withdrawn name can be taken again)."""
MEMBERS = "coalesce(shared_by, ARRAY[sharing])"
"""The sharings a push-log row's vertex was pushed for: in a shared push, every member that
needed it (`shared_by`, the one it is logged as first); else the one it is logged as."""


def share_of(sharings: str) -> str:
    """SQL: the part of a push-log row that falls to the sharings of the text[] expression
    `sharings`. A vertex pushed once for k sharings is split k ways, so a sharing taken along
    pays its part of what it rode on, and the due one not the whole; over all the members, the
    parts add up to the row.

    >>> share_of("%s")[:40]
    '((SELECT count(*) FROM unnest(coalesce(s'
    """
    return (f"((SELECT count(*) FROM unnest({MEMBERS}) AS m WHERE m = ANY({sharings}))::float8"
            f" / cardinality({MEMBERS}))")


def with_parts(sharings: str, where: str = "") -> str:
    """SQL: a FROM item of the push-log rows with a part for the sharings of the text[]
    expression `sharings` (each side of the test served by an index: the btree on `sharing`,
    the GIN on `shared_by`), and `where` (`AND …`), each with that part as `part`: computed
    once a row, however many sums take it (`OFFSET 0` keeps the planner from pulling the
    subquery up and computing the part in each sum). `sharings` is spelled out three times,
    in the order of a query's parameters: the part, then the test twice."""
    return (f"(SELECT *, {share_of(sharings)} AS part FROM smile_catalog.push_log WHERE"
            f" ((shared_by IS NULL AND sharing = ANY({sharings})) OR shared_by && {sharings})"
            f" {where} OFFSET 0) AS parted")


def in_spans(names: str, los: str, his: str) -> str:
    """SQL: a FROM item of the push-log rows that advanced a sharing inside its span: for the
    i-th of the text[] expression `names`, the rows pushed for it (it is a member, `MEMBERS`)
    to a point in (`los`[i], `his`[i]] (timestamptz[] expressions), each with its part of the
    row as `part` (a k-th for k members: `share_of` for one of them). A row two measured
    sharings share is there once for each whose span holds it. A cost so taken covers exactly
    the pushes that moved the sharing's MV from `lo` to `hi`, where a window of log time also
    takes pushes whose data fell outside it (one more or less of a 40-s sharing's in a
    minute moves its figure by a half)."""
    return (f"(SELECT p.*, 1.0::float8 / cardinality({MEMBERS}) AS part"
            f" FROM unnest({names}, {los}, {his}) AS span(name, lo, hi)"
            " JOIN smile_catalog.push_log AS p ON p.to_ts > span.lo AND p.to_ts <= span.hi"
            " AND ((p.shared_by IS NULL AND p.sharing = span.name)"
            " OR p.shared_by @> ARRAY[span.name]) OFFSET 0) AS parted")


class CatalogStore:
    """One connection to the catalog, for one thread. A connection the catalog dropped (it
    restarted) is opened again at the next use: the call that found it dead fails, the next
    one works."""

    _ready: ClassVar[set[str]] = set()
    _ready_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, catalog_dsn: str) -> None:
        self.dsn = catalog_dsn
        self._closed = False
        self._conn: psycopg.Connection[Any] = connect(catalog_dsn, autocommit=True,
                                                      what="catalog")
        # the tables are made once per process: DDL from concurrent requests deadlocks
        with CatalogStore._ready_lock:
            if catalog_dsn not in CatalogStore._ready:
                self._conn.execute(DDL.encode())
                CatalogStore._ready.add(catalog_dsn)

    @property
    def conn(self) -> psycopg.Connection[Any]:
        if self._conn.broken or (self._conn.closed and not self._closed):
            self._conn.close()
            self._conn = connect(self.dsn, autocommit=True, what="catalog")
        return self._conn

    def close(self) -> None:
        self._closed = True
        self._conn.close()

    # relations
    def add_relation(self, machine: str, table: str) -> None:
        self.conn.execute("INSERT INTO smile_catalog.relations (machine, table_name) "
                          "VALUES (%s, %s) ON CONFLICT DO NOTHING", (machine, table))

    def relations(self) -> list[tuple[str, str]]:
        return [(m, t) for m, t in self.conn.execute(
            "SELECT machine, table_name FROM smile_catalog.relations ORDER BY 1, 2").fetchall()]

    def remove_relation(self, machine: str, table: str) -> bool:
        cur = self.conn.execute("DELETE FROM smile_catalog.relations WHERE machine = %s AND "
                                "table_name = %s", (machine, table))
        return cur.rowcount > 0

    # consumers
    def option(self, key: str) -> Any:
        """An admin's setting (None when never set)."""
        row = self.conn.execute("SELECT value FROM smile_catalog.options WHERE key = %s",
                                (key,)).fetchone()
        return None if row is None else row[0]

    def set_option(self, key: str, value: Any) -> None:
        self.conn.execute("INSERT INTO smile_catalog.options VALUES (%s, %s) ON CONFLICT (key) "
                          "DO UPDATE SET value = excluded.value", (key, json.dumps(value)))

    def add_consumer(self, name: str, token_hash: str, admin: bool, pg_password: str) -> bool:
        """False when the name is taken."""
        cur = self.conn.execute(
            "INSERT INTO smile_catalog.consumers (name, token_hash, admin, pg_password) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO NOTHING",
            (name, token_hash, admin, pg_password))
        return cur.rowcount > 0

    def set_token(self, name: str, token_hash: str) -> None:
        self.conn.execute("UPDATE smile_catalog.consumers SET token_hash = %s WHERE name = %s",
                          (token_hash, name))

    def consumer(self, *, name: str | None = None,
                 token_hash: str | None = None) -> ConsumerRow | None:
        row = self.conn.execute(
            "SELECT name, token_hash, admin, pg_password FROM smile_catalog.consumers "
            "WHERE name = %s OR token_hash = %s", (name, token_hash)).fetchone()
        return ConsumerRow(*row) if row else None

    # sharings
    def add_sharing(self, name: str, sql: str, staleness_s: float, penalty: float, status: str,
                    reason: str, decision: dict[str, Any], cp_s: float | None = None,
                    cost_per_s: float | None = None, resource_cost_per_s: float | None = None,
                    mv_machine: str | None = None, pusher: str = "main",
                    consumer: str | None = None) -> int:
        row = self.conn.execute(
            "INSERT INTO smile_catalog.sharings (name, sql, staleness_s, penalty_per_tuple, "
            "status, reason, decision, cp_s, cost_per_s, resource_cost_per_s, mv_machine, "
            "pusher, consumer) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "RETURNING id",
            (name, sql, staleness_s, penalty, status, reason, json.dumps(decision), cp_s,
             cost_per_s, resource_cost_per_s, mv_machine, pusher, consumer)).fetchone()
        assert row is not None
        return int(row[0])

    def set_status(self, sharing_id: int, status: str, reason: str | None = None) -> None:
        self.conn.execute(
            "UPDATE smile_catalog.sharings SET status = %s, reason = coalesce(%s, reason), "
            "withdrawn_at = CASE WHEN %s = 'withdrawn' THEN clock_timestamp() "
            "ELSE withdrawn_at END WHERE id = %s", (status, reason, status, sharing_id))

    def set_figures(self, sharing_id: int, cp_s: float, cost_per_s: float,
                    resource_cost_per_s: float, mv_machine: str) -> None:
        """A sharing planned again: its critical path, dollars and MV machine now."""
        self.conn.execute(
            "UPDATE smile_catalog.sharings SET cp_s = %s, cost_per_s = %s, "
            "resource_cost_per_s = %s, mv_machine = %s WHERE id = %s",
            (cp_s, cost_per_s, resource_cost_per_s, mv_machine, sharing_id))

    def update_decision(self, sharing_id: int, decision: dict[str, Any]) -> None:
        self.conn.execute("UPDATE smile_catalog.sharings SET decision = %s WHERE id = %s",
                          (json.dumps(decision), sharing_id))

    def sharings(self, status: str | None = None) -> list[SharingRow]:
        where, args = ("WHERE status = %s", (status,)) if status else ("", ())
        rows = self.conn.execute(
            f"SELECT {_SHARING_COLS} FROM smile_catalog.sharings {where} ORDER BY id",
            args).fetchall()
        return [SharingRow(*r) for r in rows]

    def sharing(self, sharing_id: int) -> SharingRow | None:
        row = self.conn.execute(
            f"SELECT {_SHARING_COLS} FROM smile_catalog.sharings WHERE id = %s",
            (sharing_id,)).fetchone()
        return SharingRow(*row) if row else None

    # push log
    def log_push(self, sharing: str, vertex: str, kind: str, to_ts: datetime, seconds: float,
                 rows: int, machine: str | None = None, rows_in: int | None = None,
                 nbytes: int | None = None, cpu_s: float | None = None,
                 shared_by: Sequence[str] = ()) -> None:
        """One PUSH_DONE: rows written (tuples moved), rows read, bytes moved between
        machines, and the agent's operator seconds: wall and, where it measured them, CPU.
        `shared_by`: in a shared push, every sharing that needed the vertex (`sharing` among
        them), whose parts `work` and the dollars split it into (`share_of`)."""
        members = list(dict.fromkeys((sharing, *shared_by)))
        self.conn.execute("INSERT INTO smile_catalog.push_log (sharing, vertex, kind, to_ts, "
                          "seconds, rows, machine, rows_in, bytes, cpu_seconds, shared_by) "
                          "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                          (sharing, vertex, kind, to_ts, seconds, rows, machine, rows_in, nbytes,
                           cpu_s, members if len(members) > 1 else None))

    def busy(self, since: datetime, cpu: bool = False) -> dict[str, float]:
        """Operator seconds each machine's agent reported since `since` (the push log): wall
        seconds, what the load model predicts; with `cpu`, the CPU seconds they took
        (`BUSY_S`)."""
        return {m: float(s) for m, s in self.conn.execute(
            f"SELECT machine, sum({BUSY_S if cpu else 'seconds'}) FROM smile_catalog.push_log"
            " WHERE at >= %s AND machine IS NOT NULL GROUP BY machine", (since,)).fetchall()}

    def busy_by_vertex(self, since: datetime) -> dict[tuple[str, str], float]:
        """Operator seconds reported since `since` per (machine, vertex written)."""
        return {(m, v): float(s) for m, v, s in self.conn.execute(
            "SELECT machine, vertex, sum(seconds) FROM smile_catalog.push_log WHERE at >= %s"
            " AND machine IS NOT NULL GROUP BY machine, vertex", (since,)).fetchall()}

    def pushes_by_vertex(self, since: datetime) -> dict[tuple[str, str], tuple[int, float]]:
        """(pushes, tuples) reported since `since` per (machine, vertex written), the tuples
        counted as the time model charges them (`charged_tuples`). For a
        `since` within the last day: an older hour rolled up by `compact` is one row."""
        out: dict[tuple[str, str], tuple[int, float]] = {}
        for m, v, kind, n, rows, rows_in in self.conn.execute(
                "SELECT machine, vertex, kind, count(*), coalesce(sum(rows), 0), "
                "coalesce(sum(rows_in), 0) FROM smile_catalog.push_log WHERE at >= %s "
                "AND machine IS NOT NULL GROUP BY machine, vertex, kind", (since,)).fetchall():
            pushes, before = out.get((m, v), (0, 0.0))
            out[(m, v)] = (pushes + int(n), before + charged_tuples(kind, rows, rows_in))
        return out

    def work(self, sharing: str, since: datetime | None = None,
             until: datetime | None = None) -> tuple[float, int]:
        """(operator seconds, tuples moved) of a sharing's pushes (within [since, until]: a
        name can be reused once withdrawn); of a vertex pushed once for k sharings, its part,
        a k-th (`share_of`)."""
        row = self.conn.execute(
            "SELECT coalesce(sum(seconds * part), 0), coalesce(round(sum(rows * part)), 0) "
            f"FROM {with_parts('ARRAY[%s]::text[]', _WINDOW)}",
            (sharing, sharing, sharing, since, since, until, until)).fetchone()
        return (float(row[0]), int(row[1])) if row else (0.0, 0)

    def pushes_by_path(self, sharing: str, mv: str, since: datetime | None = None,
                       until: datetime | None = None) -> dict[str, int]:
        """How many pushes of a sharing's MV (vertex label `mv`) recomputed it and how many
        applied its delta (within [since, until]); rows rolled up by `compact` count the
        pushes they stand for."""
        got = dict(self.conn.execute(
            "SELECT kind = 'recompute', sum(pushes) FROM smile_catalog.push_log "
            f"WHERE sharing = %s AND vertex = %s {_WINDOW} GROUP BY 1",
            (sharing, mv, since, since, until, until)).fetchall())
        return {"incremental": int(got.get(False, 0)), "recompute": int(got.get(True, 0))}

    def compact(self, before: datetime) -> tuple[int, int]:
        """Roll up what is older than `before`, so the history grows with time, not with
        pushes: the push log to one row per (sharing, vertex, machine, hour) with the sums of
        its seconds, rows and bytes (`work`, `busy` and the dollars built on them stay exact);
        the audit to the last snapshot of each sharing and hour (its figures are running
        totals, so only the fine staleness curve goes). Returns the rows removed from each."""
        with self.conn.transaction():
            pushed = self.conn.execute(
                "WITH many AS (SELECT sharing, vertex, kind, machine, shared_by,"
                " date_trunc('hour', at) AS h FROM smile_catalog.push_log WHERE at < %(before)s"
                " GROUP BY 1, 2, 3, 4, 5, 6 HAVING count(*) > 1), "  # hours already rolled stay
                # and so do hours in which a life of the name began or ended (a withdrawn name
                # can be taken again): rows of two lives are never merged
                "lives AS (SELECT name, date_trunc('hour', created_at) AS h FROM"
                " smile_catalog.sharings UNION SELECT name, date_trunc('hour', withdrawn_at)"
                " FROM smile_catalog.sharings WHERE withdrawn_at IS NOT NULL), "
                "old AS (DELETE FROM smile_catalog.push_log p USING many m"
                " WHERE p.at < %(before)s AND p.sharing = m.sharing AND p.vertex = m.vertex"
                " AND p.kind = m.kind AND p.machine IS NOT DISTINCT FROM m.machine"
                " AND p.shared_by IS NOT DISTINCT FROM m.shared_by"
                " AND date_trunc('hour', p.at) = m.h AND NOT EXISTS (SELECT 1 FROM lives l"
                " WHERE l.name = m.sharing AND l.h = m.h) RETURNING p.*), "
                "rolled AS (INSERT INTO smile_catalog.push_log (sharing, vertex, kind, to_ts, "
                " seconds, rows, at, machine, rows_in, bytes, cpu_seconds, shared_by, pushes)"
                " SELECT sharing, vertex, kind, max(to_ts), sum(seconds), sum(rows), max(at),"
                f" machine, sum(rows_in), sum(bytes), sum({BUSY_S}), shared_by, sum(pushes)"
                " FROM old"
                " GROUP BY sharing, vertex, kind, machine, shared_by,"
                " date_trunc('hour', at) RETURNING 1) "
                "SELECT (SELECT count(*) FROM old) - (SELECT count(*) FROM rolled)",
                {"before": before}).fetchone()
            audited = self.conn.execute(
                "DELETE FROM smile_catalog.audit a WHERE a.at < %s AND EXISTS ("
                " SELECT 1 FROM smile_catalog.audit b WHERE b.sharing = a.sharing"
                " AND date_trunc('hour', b.at) = date_trunc('hour', a.at) AND b.at > a.at)"
                " AND NOT EXISTS (SELECT 1 FROM smile_catalog.sharings s WHERE s.name = a.sharing"
                " AND date_trunc('hour', a.at) IN (date_trunc('hour', s.created_at),"
                " date_trunc('hour', s.withdrawn_at)))",
                (before,)).rowcount
        return (int(pushed[0]) if pushed else 0), audited

    # audit
    def add_audit(self, **row: Any) -> None:
        cols = sorted(row)
        self.conn.execute(
            f"INSERT INTO smile_catalog.audit ({', '.join(cols)}) "
            f"VALUES ({', '.join(['%s'] * len(cols))})", [row[c] for c in cols])

    def last_audit(self, sharing: str, since: datetime | None = None,
                   until: datetime | None = None) -> dict[str, Any] | None:
        cur = self.conn.execute(f"SELECT * FROM smile_catalog.audit WHERE sharing = %s {_WINDOW} "
                                "ORDER BY at DESC LIMIT 1", (sharing, since, since, until, until))
        row = cur.fetchone()
        if row is None or cur.description is None:
            return None
        return {d.name: v for d, v in zip(cur.description, row, strict=True)}

    def audit_series(self, sharing: str, limit: int = 720, since: datetime | None = None,
                     until: datetime | None = None) -> list[dict[str, Any]]:
        cur = self.conn.execute(
            f"SELECT * FROM (SELECT * FROM smile_catalog.audit WHERE sharing = %s {_WINDOW} "
            "ORDER BY at DESC LIMIT %s) x ORDER BY at",
            (sharing, since, since, until, until, limit))
        assert cur.description is not None
        names = [d.name for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
