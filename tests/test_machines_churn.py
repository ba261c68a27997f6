"""An app's database attached and detached five times while sharings of Table 1 run under
tweet traffic (slow): each time it is attached (201), its table published, a sharing joining it
with the local cloud's `users` kept exact under DML, then detached with `withdraw=true` (204),
leaving nothing of SMILE's on it. Afterwards the running sharings have no violation and each
MV equals its query; no supervised program, catalog row or machine of the app is left."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import psycopg
import pytest

from smile.cloud.supervisor import Supervisor
from smile.dataset.sharings import table1
from smile.deploy.machines import leftovers
from smile.harness.traffic import Traffic
from smile.workload.driver import locate_relations
from tests.fix_api import Live, live_smile
from tests.fix_app_db import AppCluster, app_cluster, caught_up, oracle_diff, submit

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.spark]
RUNNING = ("S1", "S5", "S6", "S14", "S17")
PUBLISHED = ("users", "tweets", "socnet", "curloc", "loc")
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
    caught_up(live, doc["id"])
    home = {m.name: m.dsn for m in live.topology.machines} | {"shop": _dsn(app)}
    rows, diff = oracle_diff(home[doc["mv"]["machine"]],
                             {"users": sources["users"], "orders": _dsn(app)}, APP_SQL,
                             doc["mv"]["table"])
    assert rows > 0 and diff == 0, (i, rows, diff)
    status, body = live.call("DELETE", "/machines/shop?withdraw=true")
    assert status == 204, body
    assert leftovers(_dsn(app)).empty(), leftovers(_dsn(app))


def test_attach_and_detach_five_times_under_traffic(live: Live, app: AppCluster) -> None:
    where = locate_relations(live.topology)
    dsns = {m.name: m.dsn for m in live.topology.machines}
    sources = {rel: dsns[where[rel]] for rel in PUBLISHED}
    for rel in PUBLISHED:
        assert live.call("POST", "/relations", {"machine": where[rel],
                                                "table": f"public.{rel}"})[0] == 201
    specs = {s.name: s for s in table1() if s.name in RUNNING}
    ids, mvs = {}, {}
    traffic = Traffic(live.topology).start(20)
    try:
        for name, spec in specs.items():
            status, doc = submit(live, {"name": name, "sql": spec.sql, "staleness_s": 10})
            assert status == 201 and doc["status"] == "admitted", doc
            ids[name], mvs[name] = doc["id"], doc["mv"]
        for i in range(CYCLES):
            _one_cycle(live, app, sources, i)
            traffic.check()
    finally:
        traffic.stop()
    for name, spec in specs.items():
        body = caught_up(live, ids[name])
        assert body["status"] == "admitted" and body["violations"] == 0, body
        rows, diff = oracle_diff(dsns[mvs[name]["machine"]], sources, spec.sql,
                                 mvs[name]["table"])
        assert diff == 0, (name, rows, diff)
    status, machines = live.call("GET", "/machines")
    assert sorted(m["name"] for m in machines) == ["m1", "m2", "m3"], machines
    programs = Supervisor(live.settings.state_dir).programs
    assert not list(programs.glob("*-shop.conf"))
    assert all(r["machine"] != "shop" for r in live.call("GET", "/relations")[1])
