"""Consistent groups against real services (docs/design/groups.md): a 3-machine cloud with its
capturers and agents, `smile serve` (executor, API), a consumer with five sharings in one
group — users, tweets, their join, and two aggregates, with SLAs of 3–6 s — under random
INSERT/UPDATE/DELETE of both relations. Every snapshot the consumer takes with its own DSN
(one REPEATABLE READ transaction reading the five views) finds the five MVs at one TS (read
in the same snapshot, imported by an admin session) and each equal to its query run by
PostgreSQL on the relations as of that TS. A sharing outside the group, on the same machine,
is read the same way beside them: it is at its own TS (what a group fixes). Each member
joins aligned: a snapshot after each `201` finds it at the group's TS. A Hypothesis test
interleaves DML, waits for the executor's pushes, and reads."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.delta_capture.registry import delta_table, shadow_table, shadow_vertex
from smile.deploy import commands
from smile.deploy.install import stream_rows
from smile.operators import vertex_ts
from smile.operators.as_of import as_of_query
from smile.workload.driver import locate_relations
from tests.fix_api import Live, live_smile

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.services

TWEETS = 500  # 150 users
LEASE = 10**9
"""The lease this test holds on the bases' deltas (a reader at the epoch): the oracle rolls
each relation's shadow back to a snapshot's TS, which needs every delta row since."""
QUERIES = {
    "g_join": ("SELECT u.uid, u.screen_name, t.tid FROM users u, tweets t "
               "WHERE u.uid = t.uid AND u.uid <= 100", 3.0),
    "g_users": ("SELECT u.uid, u.screen_name, u.followers FROM users u WHERE u.uid <= 100",
                5.0),
    "g_tweets": ("SELECT t.tid, t.uid FROM tweets t WHERE t.uid <= 100", 4.0),
    # two aggregates: their steps leave temporary tables of the same names to their commit
    "g_per_user": ("SELECT t.uid, count(*) AS n FROM tweets t WHERE t.uid <= 100 "
                   "GROUP BY t.uid", 5.0),
    "g_langs": ("SELECT u.lang, count(*) AS n, sum(u.followers) AS f FROM users u "
                "WHERE u.uid <= 100 GROUP BY u.lang", 6.0),
}
SOLO = {"solo": ("SELECT t.tid, t.lang FROM tweets t WHERE t.uid > 100", 20.0)}
"""A sharing of the consumer's outside the group, on its machine, sharing no vertex a push of
the group advances (a vertex the group's pushes advance goes to the group's TS with them):
read beside the group, it is at its own TS."""
COLUMNS = {"users": {"uid": "bigint", "screen_name": "text", "lang": "text",
                     "followers": "integer", "created_at": "timestamptz"},
           "tweets": {"tid": "bigint", "uid": "bigint", "text": "text", "lang": "text",
                      "created_at": "timestamptz"}}
_n = itertools.count()


@dataclass
class Feed:
    live: Live
    dsn: str
    """The consumer's own."""
    machine: str
    """The group's."""
    tables: dict[str, str] = field(default_factory=dict)
    """Sharing → its view, grouped ones and the solo twins."""
    labels: dict[str, str] = field(default_factory=dict)
    """Sharing → its MV's vertex label (its TS key)."""
    where: dict[str, str] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    next_tid: itertools.count[int] = field(default_factory=lambda: itertools.count(10**9))

    def admin(self, machine: str) -> str:
        return self.live.topology.machine(machine).dsn


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_smile("groups", 480, 3, TWEETS) as handle:
        yield handle


@pytest.fixture(scope="module")
def feed(live: Live) -> Iterator[Feed]:
    where = locate_relations(live.topology)
    for rel in ("users", "tweets"):
        status, body = live.call("POST", "/relations", {"machine": where[rel],
                                                        "table": f"public.{rel}"})
        assert status == 201, body
        with psycopg.connect(live.topology.machine(where[rel]).dsn, autocommit=True) as conn:
            commands.lease(conn, LEASE)
    try:
        yield _submitted(live, where)
    finally:
        for rel in ("users", "tweets"):
            with psycopg.connect(live.topology.machine(where[rel]).dsn,
                                 autocommit=True) as conn:
                commands.release(conn, version=LEASE)


def _submitted(live: Live, where: dict[str, str]) -> Feed:
    """The group's sharings submitted by a consumer of its own, each joining the group
    aligned with the others by its `201` (a snapshot then); the refusals; the same queries
    outside the group on the same machine."""
    status, body = live.call("POST", "/consumers", {"name": "app1"})
    assert status == 201, body
    token = body["token"]
    made: dict[str, Any] = {}
    f: Feed | None = None
    for name, (query, sla) in QUERIES.items():
        status, made[name] = live.call("POST", "/sharings", {
            "name": name, "sql": query, "staleness_s": sla, "group": "feed"}, token)
        assert status == 201 and made[name]["status"] == "admitted", made[name]
        if f is None:
            f = Feed(live, made[name]["mv"]["dsn"], made[name]["mv"]["machine"], where=where)
        f.tables[name] = made[name]["mv"]["table"]
        f.labels[name] = live.call("GET", "/plan")[1]["mvs"][name]
        assert made[name]["mv"]["machine"] == f.machine
        check(f, *snapshot(f, list(f.tables)))  # a member joins aligned
    assert f is not None
    for row in made.values():  # GET shows the group
        status, got = live.call("GET", f"/sharings/{row['id']}", token=token)
        assert status == 200 and got["group"] == "feed" and got["mv"]["machine"] == f.machine
    other = next(m.name for m in live.topology.machines if m.name != f.machine)
    status, body = live.call("POST", "/sharings", {
        "name": "g_far", "sql": QUERIES["g_users"][0], "staleness_s": 5, "group": "feed",
        "mv_machine": other}, token)
    assert status == 422 and f"has its MVs on {f.machine}" in body["detail"], body
    status, body = live.call("POST", "/sharings", {
        "name": "g_typo", "sql": QUERIES["g_users"][0], "staleness_s": 5, "groop": "feed"},
        token)
    assert status == 422, body
    for name, (query, sla) in SOLO.items():  # outside any group, beside it
        status, body = live.call("POST", "/sharings", {
            "name": name, "sql": query, "staleness_s": sla, "mv_machine": f.machine}, token)
        assert status == 201, body
        f.tables[name] = body["mv"]["table"]
        f.labels[name] = live.call("GET", "/plan")[1]["mvs"][name]
    return f


# -- what the consumer sees ----------------------------------------------------------------------
def snapshot(f: Feed, names: list[str]) -> tuple[dict[str, datetime], dict[str, Counter[Any]]]:
    """One transaction of the consumer's own reading the views of `names`; the TS of each MV
    as that same snapshot has it (exported by the consumer, imported by an admin session)."""
    with psycopg.connect(f.dsn) as mine, psycopg.connect(f.admin(f.machine)) as su:
        mine.isolation_level = su.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        row = mine.execute("SELECT pg_export_snapshot()").fetchone()
        assert row is not None
        rows = {n: Counter(mine.execute(f"SELECT * FROM {f.tables[n]}").fetchall())
                for n in names}
        su.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(row[0])))
        ts = vertex_ts.read_many(su, [f.labels[n] for n in names])
        mine.rollback()
        su.rollback()
    return {n: ts[f.labels[n]] for n in names}, rows


def oracle(f: Feed, t: datetime) -> dict[str, Counter[Any]]:
    """Each grouped sharing's query, run by PostgreSQL on users and tweets as of `t` (rolled
    from their shadows with their deltas, gathered on the MV's machine)."""
    schema = f"oracle_{next(_n)}"
    with ExitStack() as stack:
        home = stack.enter_context(psycopg.connect(f.admin(f.machine), autocommit=True))
        home.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            for rel, cols in COLUMNS.items():
                src = stack.enter_context(psycopg.connect(f.admin(f.where[rel]),
                                                          autocommit=True))
                home.execute(sql.SQL("CREATE TABLE {} ({})").format(
                    sql.Identifier(schema, rel), sql.SQL(", ").join(
                        sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(kind))
                        for c, kind in cols.items())))
                query = as_of_query(rel=("_smile", shadow_table("public", rel)),
                                    rel_vertex=shadow_vertex("public", rel),
                                    delta=("_smile", delta_table("public", rel)),
                                    columns=list(cols), t=t)
                stream_rows(src, query, home, sql.Identifier(schema, rel), list(cols))
            home.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            return {n: Counter(home.execute(q).fetchall()) for n, (q, _) in QUERIES.items()}
        finally:
            home.execute("SET search_path = public")
            home.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def check(f: Feed, ts: dict[str, datetime], rows: dict[str, Counter[Any]]) -> datetime:
    """The snapshot's MVs at one TS, each equal to its query at it; that TS."""
    assert len(set(ts.values())) == 1, ts
    t = next(iter(ts.values()))
    want = oracle(f, t)
    for name, got in rows.items():
        assert got == want[name], (name, t, got - want[name], want[name] - got)
    return t


# -- what the apps do ----------------------------------------------------------------------------
def dml(f: Feed, op: tuple[Any, ...]) -> None:
    rel = "users" if op[0] in ("rename", "toggle_user") else "tweets"
    with psycopg.connect(f.admin(f.where[rel]), autocommit=True) as conn:
        if op[0] == "rename":
            conn.execute("UPDATE users SET screen_name = %s, followers = followers + 1 "
                         "WHERE uid = %s", (op[2], op[1]))
        elif op[0] == "toggle_user":
            if conn.execute("DELETE FROM users WHERE uid = %s", (op[1],)).rowcount == 0:
                conn.execute("INSERT INTO users VALUES (%s, %s, 'en', 0, now())",
                             (op[1], f"back{op[1]}"))
        elif op[0] == "tweet":
            conn.execute("INSERT INTO tweets VALUES (%s, %s, 'hi', 'en', now())",
                         (next(f.next_tid), op[1]))
        elif op[0] == "move":
            conn.execute("UPDATE tweets SET uid = %s WHERE tid = (SELECT tid FROM tweets "
                         "ORDER BY tid OFFSET %s LIMIT 1)", (op[2], op[1]))
        else:
            conn.execute("DELETE FROM tweets WHERE tid = (SELECT tid FROM tweets ORDER BY tid "
                         "OFFSET %s LIMIT 1)", (op[1],))


uids = st.integers(1, 150)
ops = st.one_of(
    st.tuples(st.just("rename"), uids, st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("toggle_user"), uids),
    st.tuples(st.just("tweet"), uids),
    st.tuples(st.just("move"), st.integers(0, 400), uids),
    st.tuples(st.just("drop"), st.integers(0, 400)),
)


def test_every_snapshot_of_the_group_is_at_one_ts_and_exact(feed: Feed) -> None:
    stop = threading.Event()

    def traffic() -> None:
        rng = random.Random(11)
        while not stop.wait(0.03):
            dml(feed, _random_op(rng))

    began = datetime.now(UTC)
    runner = threading.Thread(target=traffic, daemon=True)
    runner.start()
    grouped, solo = list(QUERIES), list(SOLO)
    taken: list[tuple[dict[str, datetime], dict[str, Counter[Any]]]] = []
    apart = 0
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ts, rows = snapshot(feed, grouped + solo)
            taken.append(({n: ts[n] for n in grouped}, {n: rows[n] for n in grouped}))
            apart += len({ts[n] for n in solo} | {ts[n] for n in grouped}) > 1
            time.sleep(0.2)
    finally:
        stop.set()
        runner.join(10)
    seen = sorted({check(feed, ts, rows) for ts, rows in taken})
    print(f"{len(taken)} snapshots, {len(seen)} group timestamps, all aligned and exact; "
          f"an MV outside the group at another TS in {apart}")
    assert len(seen) >= 5, seen  # the group was pushed all along
    assert 2 * apart >= len(taken)  # an MV outside it is at its own TS
    steps = mv_steps(feed, began)
    for name, (pushes, ms) in sorted(steps.items()):
        print(f"  {name}: {pushes} pushes of its MV, {ms:.1f} ms each")
    counts = [steps[n][0] for n in QUERIES]
    assert min(counts) > 0 and max(counts) - min(counts) <= 1, steps  # every push: all of them


def mv_steps(f: Feed, since: datetime) -> dict[str, tuple[int, float]]:
    """Per sharing, its MV's pushes since `since` in the push log, and their mean seconds."""
    with psycopg.connect(f.live.topology.catalog_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT vertex, count(*), avg(seconds) FROM smile_catalog.push_log "
            "WHERE at >= %s AND vertex = ANY(%s) GROUP BY vertex",
            (since, list(f.labels.values()))).fetchall()
    by_label = {label: (int(n), 1000 * float(s)) for label, n, s in rows}
    return {name: by_label.get(label, (0, 0.0)) for name, label in f.labels.items()}


def _random_op(rng: random.Random) -> tuple[Any, ...]:
    kind = rng.choice(["rename", "toggle_user", "tweet", "tweet", "move", "drop"])
    uid = rng.randint(1, 150)
    return {"rename": ("rename", uid, rng.choice("abc")), "toggle_user": ("toggle_user", uid),
            "tweet": ("tweet", uid), "move": ("move", rng.randint(0, 400), uid),
            "drop": ("drop", rng.randint(0, 400))}[kind]


@settings(max_examples=6, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.one_of(ops, st.tuples(st.just("read")),
                                st.tuples(st.just("wait"), st.floats(0.0, 2.5))),
                      min_size=3, max_size=14))
def test_pushes_and_reads_interleaved(feed: Feed, steps: list[tuple[Any, ...]]) -> None:
    """Whatever the DML, and however reads fall between the executor's pushes (a 3-s SLA:
    a push every second or two), each read sees the group at one TS, exactly."""
    for step in [*steps, ("wait", 1.5), ("read",)]:
        if step[0] == "read":
            check(feed, *snapshot(feed, list(QUERIES)))
        elif step[0] == "wait":
            time.sleep(step[1])
        else:
            dml(feed, step)
