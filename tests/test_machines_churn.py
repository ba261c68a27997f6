"""An app's database attached and detached five times while Table 1 runs under tweet traffic
(slow): the nine relations published, each of the 25 sharings submitted at the paper's SLA
(§9.3's mix) and every one admission admits kept running — at least `MIN_ADMITTED`; the others
are printed with their reasons. Each cycle the app's database is attached (201), its table
published, a sharing joining it with the local cloud's `users` kept exact under DML without a
violation, then detached with `withdraw=true` (204), leaving nothing of SMILE's on it.
Afterwards every running sharing of Table 1 has no violation and its MV equals its query; no
supervised program, catalog row, admitted sharing or machine of the app is left."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from smile.cloud.supervisor import Supervisor
from smile.dataset.relations import RELATIONS
from smile.dataset.sharings import paper_sla, table1
from smile.deploy.machines import leftovers
from smile.harness.traffic import Traffic
from smile.workload.driver import locate_relations
from tests.fix_api import Live, live_smile
from tests.fix_app_db import AppCluster, app_cluster, caught_up, oracle_diff, submit

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.spark]
MIN_ADMITTED = 20
"""Of Table 1's 25: a 2-core box shared by three machines may have no room for a few."""
APP_SQL = "SELECT u.uid, o.amount FROM users u JOIN orders o ON o.uid = u.uid"
CYCLES = 5


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_smile("churn", 940, 3, 5000) as handle:
        yield handle


@pytest.fixture(scope="module")
def app(live: Live) -> Iterator[AppCluster]:
    where = locate_relations(live.topology)
    home = {m.name: m.dsn for m in live.topology.machines}[where["users"]]
    with app_cluster("churn") as cluster:
        cluster.alter_system("wal_level", "logical")
        cluster.restart()
        with psycopg.connect(home) as conn:
            uids = [r[0] for r in conn.execute("SELECT uid FROM users ORDER BY uid LIMIT 50")]
        with psycopg.connect(cluster.admin_dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        with psycopg.connect(_dsn(cluster), autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (oid serial PRIMARY KEY, uid bigint, amount int)")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO orders (uid, amount) VALUES (%s, %s)",
                                [(uids[i % len(uids)], i) for i in range(200)])
        yield cluster


def _dsn(cluster: AppCluster) -> str:
    return cluster.dsn_as("admin", cluster.password, "shop")


def _one_cycle(live: Live, app: AppCluster, sources: dict[str, str], i: int) -> None:
    status, doc = live.call("POST", "/machines", {"name": "shop", "dsn": _dsn(app)})
    assert status == 201, doc
    status, doc = live.call("POST", "/relations", {"machine": "shop",
                                                   "table": "public.orders"})
    assert status == 201, doc
    status, doc = submit(live, {"name": f"app_join_{i}", "sql": APP_SQL, "staleness_s": 10})
    assert status == 201 and doc["status"] == "admitted", doc
    stop = threading.Event()

    def dml() -> None:
        with psycopg.connect(_dsn(app), autocommit=True) as conn:
            n = 0
            while not stop.wait(0.05):
                n += 1
                conn.execute("UPDATE orders SET amount = amount + 1 WHERE oid = %s",
                             (n % 200 + 1,))
                conn.execute("INSERT INTO orders (uid, amount) SELECT uid, %s FROM orders "
                             "WHERE oid = %s", (n, n % 200 + 1))

    worker = threading.Thread(target=dml)
    worker.start()
    time.sleep(8)
    stop.set()
    worker.join(30)
    body = caught_up(live, doc["id"])
    assert body["status"] == "admitted" and body["violations"] == 0, (i, body)
    home = {m.name: m.dsn for m in live.topology.machines} | {"shop": _dsn(app)}
    rows, diff = oracle_diff(home[doc["mv"]["machine"]],
                             {"users": sources["users"], "orders": _dsn(app)}, APP_SQL,
                             doc["mv"]["table"])
    assert rows > 0 and diff == 0, (i, rows, diff)
    status, body = live.call("DELETE", "/machines/shop?withdraw=true")
    assert status == 204, body
    assert leftovers(_dsn(app)).empty(), leftovers(_dsn(app))


def _submit_table1(live: Live) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Table 1 submitted at the paper's SLAs: each admitted sharing's document, and why each
    other one was refused. One refused for want of room is tried once more after the others
    (the idle cores the local machines share come and go), not for long as `submit` does: on
    a full box that would spend minutes on each."""
    specs = {s.name: s for s in table1()}
    admitted: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}

    def one(name: str) -> None:
        status, doc = live.call("POST", "/sharings", {
            "name": name, "sql": specs[name].sql, "staleness_s": paper_sla(name)})
        if status == 201 and doc["status"] == "admitted":
            admitted[name] = doc
            refused.pop(name, None)
        else:
            assert status == 422, (name, status, doc)
            refused[name] = str(doc.get("reason") or doc.get("detail") or doc)

    for name in specs:
        one(name)
    roomless = [n for n, why in refused.items() if "no room" in why or "capacity" in why]
    if roomless:
        time.sleep(10)
    for name in roomless:
        one(name)
    return admitted, refused


def test_attach_and_detach_five_times_under_traffic(live: Live, app: AppCluster) -> None:
    started = time.monotonic()
    where = locate_relations(live.topology)
    dsns = {m.name: m.dsn for m in live.topology.machines}
    sources = {rel: dsns[where[rel]] for rel in RELATIONS}
    for rel in RELATIONS:
        assert live.call("POST", "/relations", {"machine": where[rel],
                                                "table": f"public.{rel}"})[0] == 201
    specs = {s.name: s for s in table1()}
    traffic = Traffic(live.topology).start(20)
    try:
        running, refused = _submit_table1(live)
        print(f"\nTable 1: {len(running)} of {len(specs)} admitted; refused: "
              + ("; ".join(f"{n}: {why}" for n, why in refused.items()) or "none"))
        assert len(running) >= MIN_ADMITTED, refused
        for i in range(CYCLES):
            _one_cycle(live, app, sources, i)
            traffic.check()
    finally:
        traffic.stop()
    with ThreadPoolExecutor(len(running)) as pool:  # one moment of quiet for all of them
        bodies = dict(zip(running, pool.map(
            lambda name: caught_up(live, running[name]["id"], paper_sla(name) + 90),
            running), strict=True))
    late = {name: (body["status"], body["violations"]) for name, body in bodies.items()
            if body["status"] != "admitted" or body["violations"] != 0}
    inexact: dict[str, tuple[int, int]] = {}
    for name, doc in running.items():
        mv = doc["mv"]
        rows, diff = oracle_diff(dsns[mv["machine"]],
                                 {rel: sources[rel] for rel in specs[name].relations},
                                 specs[name].sql, mv["table"])
        if diff:
            inexact[name] = (rows, diff)
    print(f"violations: {late or 'none'}; MVs differing from their query: "
          f"{inexact or 'none'}; {time.monotonic() - started:.0f} s")
    assert not late and not inexact, (late, inexact)
    machines = live.call("GET", "/machines")[1]
    assert sorted(m["name"] for m in machines) == ["m1", "m2", "m3"], machines
    programs = Supervisor(live.settings.state_dir).programs
    assert not list(programs.glob("*-shop.conf"))
    assert all(r["machine"] != "shop" for r in live.call("GET", "/relations")[1])
    sharings = live.call("GET", "/sharings")[1]
    assert not [s for s in sharings
                if s["name"].startswith("app_join_") and s["status"] == "admitted"], sharings
