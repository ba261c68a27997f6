"""Machines attached to a running SMILE and detached again (docs/design/machines.md).

The prerequisites of a database, decided from its answers (no database). Then, every part
real: a one-machine local SMILE (`smile serve` as its own process, capturer and agent under the
supervisor) and a PostgreSQL cluster an app's owner made — its own initdb, database `shop`
owned by `shop`, orders already in it, `wal_level = replica`. Attach → 422 naming `wal_level`
alone; fixed and restarted → 201; its table published; a sharing joining it with the local
cloud's `users` (its MV on the app's database, for a consumer) equals its query under DML;
detach → 409 naming the sharing; withdrawn; detach → 204, and SMILE's slot, publication,
schemas and consumers' roles are gone from the app's database while its rows are intact.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from smile.cloud.local import LocalCloud
from smile.cloud.supervisor import Supervisor
from smile.costmodel.time_model import TimeModel
from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.deploy.machines import leftovers
from smile.deploy.prereq_rules import RoleRights, Setting, Usage, problems
from smile.optimizer.admission import admit
from smile.optimizer.catalog import CatalogSnapshot, Machine
from smile.optimizer.global_plan import GlobalPlan
from smile.optimizer.load import assess
from smile.optimizer.sharing import Sharing
from tests.fix_app_db import (
    AppCluster,
    app_cluster,
    bare_smile,
    caught_up,
    oracle_diff,
    submit,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fix_api import Live

# -- prerequisites, decided from the database's answers -----------------------------------------

GOOD = {"wal_level": Setting("wal_level", "logical", "postmaster"),
        "max_replication_slots": Setting("max_replication_slots", "10", "postmaster"),
        "max_wal_senders": Setting("max_wal_senders", "10", "postmaster"),
        "track_commit_timestamp": Setting("track_commit_timestamp", "off", "postmaster")}
ALL_RIGHTS = RoleRights("smile", False, True, True, True)


def test_a_database_that_has_everything_has_no_problem() -> None:
    assert problems(GOOD, ALL_RIGHTS, Usage(0, 0), 150004) == []
    # a superuser needs no attribute of its own; commit timestamps are not needed
    assert problems(GOOD, RoleRights("postgres", True, False, False, False), Usage(8, 8),
                    160001) == []


def test_each_unmet_prerequisite_is_named_with_its_fix_and_restart() -> None:
    bad = GOOD | {"wal_level": Setting("wal_level", "replica", "postmaster",
                                       pending_restart=True),
                  "max_replication_slots": Setting("max_replication_slots", "4",
                                                   "postmaster")}
    found = problems(bad, RoleRights("app", False, False, False, False), Usage(3, 9), 140010)
    by_item = {p.item: p for p in found}
    assert list(by_item) == ["server_version", "wal_level", "max_replication_slots",
                             "max_wal_senders", "REPLICATION", "CREATEROLE", "CREATE"]
    assert "waits for a restart" in by_item["wal_level"].found
    assert by_item["wal_level"].restart and by_item["max_wal_senders"].restart
    assert "wal_level = logical" in by_item["wal_level"].fix
    assert by_item["max_replication_slots"].found == "4 with 3 replication slots in use"
    assert not by_item["REPLICATION"].restart
    assert by_item["REPLICATION"].fix == 'ALTER ROLE "app" REPLICATION'
    assert by_item["server_version"].found == "14.10"
    assert "then restart" in str(by_item["wal_level"])


# -- machines that are not alike -------------------------------------------------------------------


def _two_machines(cores: tuple[float, float], prices: tuple[float, float]) -> CatalogSnapshot:
    """The paper's relations on two machines at 20k tweets/s, with these cores and prices."""
    return replace(paper_catalog(machines=2, tweet_rate=20_000), machines=(
        Machine("m1", cpu_cores=cores[0], price_per_hour=prices[0]),
        Machine("m2", cpu_cores=cores[1], price_per_hour=prices[1])))


def _admit_table1(catalog: CatalogSnapshot) -> tuple[GlobalPlan, int]:
    plan, admitted = GlobalPlan(), 0
    for spec in table1():
        done = admit(plan, catalog, Sharing(spec.name, spec.sql, 10.0, 0.001))
        if done.admitted:
            plan, admitted = done.plan, admitted + 1
    return plan, admitted


def test_admission_fills_the_larger_machine_more_and_dollars_follow_prices() -> None:
    """An 8-core machine beside a 1-core one (the same price per core): Table 1 at 20k
    tweets/s is admitted whole, the larger machine carrying more, the smaller within its
    bound; two 1-core machines admit fewer. A machine's dearer price raises what its edges
    cost, the other's stay."""
    big = _two_machines((8.0, 1.0), (8 * 0.34, 0.34))
    plan, admitted = _admit_table1(big)
    load = assess(plan, big, TimeModel()).machine_load
    assert admitted == len(table1())
    assert load["m1"] > load["m2"] and load["m2"] <= big.machine("m2").cpu_bound + 1e-9
    _, small_admitted = _admit_table1(_two_machines((1.0, 1.0), (0.34, 0.34)))
    assert small_admitted < admitted
    dearer = replace(big, machines=(big.machines[0], replace(big.machines[1],
                                                              price_per_hour=0.68)))
    costs = {name: assess(plan, c, TimeModel()).edge_cost for name, c in
             (("same", big), ("dearer", dearer))}
    on = {name: {m: sum(v for e, v in c.items() if e.dst.machine == m) for m in ("m1", "m2")}
          for name, c in costs.items()}
    assert on["dearer"]["m1"] == pytest.approx(on["same"]["m1"])
    # its CPU at twice the price; the bytes it moves and stores at the cloud's prices
    assert 1.5 * on["same"]["m2"] < on["dearer"]["m2"] <= 2 * on["same"]["m2"] + 1e-12, on


# -- an app's own database, attached and detached live --------------------------------------------

SHOP_PW = "shop-owner-pw"
ORDERS = 300
SQL = ("SELECT u.uid, u.screen_name, o.oid, o.amount FROM users u JOIN orders o "
       "ON o.uid = u.uid")


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with bare_smile("machines", 900, 1) as handle:
        yield handle


@pytest.fixture(scope="module")
def shop(live: Live) -> Iterator[AppCluster]:
    """The app's cluster: database `shop` owned by role `shop`, with orders of the local
    cloud's users in it."""
    with app_cluster("app") as cluster:
        with psycopg.connect(live.topology.machines[0].dsn) as m1:
            uids = [r[0] for r in m1.execute("SELECT uid FROM users ORDER BY uid LIMIT 100")]
        with psycopg.connect(cluster.admin_dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE shop LOGIN PASSWORD '{SHOP_PW}'")
            conn.execute("CREATE DATABASE shop OWNER shop")
        with psycopg.connect(cluster.dsn_as("shop", SHOP_PW, "shop"), autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (oid serial PRIMARY KEY, uid bigint NOT NULL, "
                         "amount numeric(10, 2) NOT NULL, note text)")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO orders (uid, amount) VALUES (%s, %s)",
                                [(uids[i % len(uids)], i % 97 + 0.5) for i in range(ORDERS)])
        yield cluster


def _shop_dsn(cluster: AppCluster) -> str:
    """SMILE's DSN of the app's database: the cluster's superuser, the app's database."""
    return cluster.dsn_as("admin", cluster.password, "shop")


def _dml(cluster: AppCluster, live: Live, stop: threading.Event) -> int:
    """Inserts, updates and deletes on the app's orders, and updates of the local users,
    until `stop`; returns the rounds done."""
    rounds = 0
    with psycopg.connect(cluster.dsn_as("shop", SHOP_PW, "shop"), autocommit=True) as shop, \
            psycopg.connect(live.topology.machines[0].dsn, autocommit=True) as m1:
        uids = [r[0] for r in shop.execute("SELECT DISTINCT uid FROM orders ORDER BY uid")]
        while not stop.is_set():
            uid = uids[rounds % len(uids)]
            shop.execute("INSERT INTO orders (uid, amount) VALUES (%s, %s)", (uid, rounds))
            shop.execute("UPDATE orders SET amount = amount + 1 WHERE oid = %s",
                         (rounds % ORDERS + 1,))
            shop.execute("DELETE FROM orders WHERE oid = (SELECT min(oid) FROM orders "
                         "WHERE oid %% 7 = %s)", (rounds % 7,))
            m1.execute("UPDATE users SET screen_name = screen_name || 'x' WHERE uid = %s",
                       (uids[(rounds * 3) % len(uids)],))
            rounds += 1
            stop.wait(0.05)
    return rounds


def _attach_refused_then_accepted(live: Live, shop: AppCluster) -> None:
    body = {"name": "shop", "dsn": _shop_dsn(shop), "cores": 4, "price_per_hour": 1.5}
    status, doc = live.call("POST", "/machines", body)
    assert status == 422, doc
    assert [p["item"] for p in doc["problems"]] == ["wal_level"], doc
    assert doc["problems"][0]["restart"] and "logical" in doc["problems"][0]["fix"]
    shop.alter_system("wal_level", "logical")
    shop.restart()
    status, doc = live.call("POST", "/machines", body)
    assert status == 201, doc
    assert doc == {"name": "shop", "origin": "attached", "cores": 4.0, "price_per_hour": 1.5}
    status, doc = live.call("POST", "/machines", body | {"name": "shop2"})
    assert status == 409 and "already" in doc["detail"], doc
    status, doc = live.call("POST", "/machines", body)
    assert status == 409, doc
    status, machines = live.call("GET", "/machines")
    assert status == 200, machines
    by_name = {m["name"]: m for m in machines}
    assert by_name["m1"]["origin"] == "local" and by_name["shop"]["origin"] == "attached"
    assert by_name["shop"]["cores"] == 4.0 and by_name["shop"]["price_per_hour"] == 1.5
    assert by_name["shop"]["healthy"], by_name["shop"]
    daemons = {d.name: d for d in LocalCloud(live.settings).status().daemons}
    assert daemons["agent-shop"].healthy and daemons["capture-shop"].healthy, daemons
    status, rels = live.call("GET", "/relations")
    assert all(r["machine"] != "shop" for r in rels), rels  # nothing published by itself


def _published_with_consumer(live: Live, consumer: str) -> dict[str, Any]:
    """m1's users and the app's orders published, and a consumer `consumer` made: its doc."""
    for machine, table in (("m1", "public.users"), ("shop", "public.orders")):
        status, doc = live.call("POST", "/relations", {"machine": machine, "table": table})
        assert status == 201, doc
    status, app = live.call("POST", "/consumers", {"name": consumer})
    assert status == 201, app
    return dict(app)


@pytest.mark.services
def test_an_apps_database_attached_shared_and_detached(live: Live, shop: AppCluster) -> None:
    _attach_refused_then_accepted(live, shop)
    app = _published_with_consumer(live, "shopapp")
    status, doc = submit(live, {"name": "user_orders", "sql": SQL, "staleness_s": 10,
                                 "mv_machine": "shop"}, token=app["token"])
    assert status == 201 and doc["status"] == "admitted", doc
    sid, mv = doc["id"], doc["mv"]
    assert mv["machine"] == "shop" and "smile_c_shopapp" in mv["dsn"]
    with psycopg.connect(_shop_dsn(shop)) as conn:  # the app's roles keep PUBLIC's rights
        assert conn.execute(
            "SELECT has_database_privilege('public', 'shop', 'CONNECT'), "
            "has_database_privilege('public', 'postgres', 'CONNECT'), "
            "has_schema_privilege('public', 'public', 'USAGE'), "
            "has_schema_privilege('public', 'smile_mv', 'USAGE')").fetchone() == (
                True, True, True, False)
    with psycopg.connect(mv["dsn"]) as conn:  # the consumer reads its view, not the app's
        assert conn.execute("SELECT count(*) FROM smile_mv.user_orders").fetchone() is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM public.orders")
    stop = threading.Event()
    box: list[int] = []
    worker = threading.Thread(target=lambda: box.append(_dml(shop, live, stop)))
    worker.start()
    time.sleep(15)  # DML on both machines, the sharing kept by lazy pushes
    stop.set()
    worker.join(30)
    assert box and box[0] > 20, box
    body = caught_up(live, sid)
    rows, diff = oracle_diff(_shop_dsn(shop), {"users": live.topology.machines[0].dsn,
                                               "orders": _shop_dsn(shop)}, SQL, mv["table"])
    assert rows > ORDERS // 2 and diff == 0, (rows, diff)
    assert body["violations"] == 0, body
    with psycopg.connect(_shop_dsn(shop)) as conn:
        before = conn.execute("SELECT count(*), sum(amount), max(oid) FROM orders").fetchone()

    status, doc = live.call("DELETE", "/machines/shop")
    assert status == 409 and "user_orders" in doc["detail"], doc
    status, doc = live.call("DELETE", f"/sharings/{sid}", token=app["token"])
    assert status == 200 and doc["status"] == "withdrawn", doc
    status, doc = live.call("DELETE", "/machines/shop")
    assert status == 204, doc

    status, machines = live.call("GET", "/machines")
    assert [m["name"] for m in machines] == ["m1"], machines
    status, rels = live.call("GET", "/relations")
    assert {r["machine"] for r in rels} == {"m1"}, rels
    assert leftovers(_shop_dsn(shop)).empty(), leftovers(_shop_dsn(shop))
    sup = Supervisor(live.settings.state_dir)
    assert not (sup.programs / "agent-shop.conf").exists()
    assert sup.state("capture-shop").pid is None and sup.state("agent-shop").pid is None
    assert not any(d.name.endswith("-shop") for d in LocalCloud(live.settings).status().daemons)
    with psycopg.connect(shop.dsn_as("shop", SHOP_PW, "shop")) as conn:  # the app's, intact
        after = conn.execute("SELECT count(*), sum(amount), max(oid) FROM orders").fetchone()
        conn.execute("INSERT INTO orders (uid, amount) VALUES (1, 1)")  # and still its own
    assert after == before


@pytest.mark.services
def test_a_machine_lost_for_good_is_reported_and_can_be_detached(live: Live,
                                                                shop: AppCluster) -> None:
    """The app's database attached, read by a sharing and holding another's MV, then lost for
    good: the password SMILE connects with changed, its sessions cut. `GET /machines` says it
    is unhealthy and why, with what to do; a sharing that does not need it is admitted and
    withdrawn meanwhile, one that does refused at once; detaching it is refused while
    sharings use it,
    then (with `withdraw=true`) forgets it at once, withdraws them and says what stays on it;
    a sharing that does not use it goes on; SMILE's objects come off by the SQL the docs
    give."""
    with psycopg.connect(shop.admin_dsn()) as conn:  # as the test before leaves it
        logical = conn.execute("SHOW wal_level").fetchone() == ("logical",)
    if not logical:
        shop.alter_system("wal_level", "logical")
        shop.restart()
    body = {"name": "shop", "dsn": _shop_dsn(shop), "cores": 2, "price_per_hour": 1.0}
    status, doc = live.call("POST", "/machines", body)
    assert status == 201, doc
    app = _published_with_consumer(live, "lostapp")
    status, reads = submit(live, {"name": "lost_orders", "sql": SQL, "staleness_s": 10,
                                  "mv_machine": "m1"}, token=app["token"])
    assert status == 201 and reads["status"] == "admitted", reads
    status, there = submit(live, {"name": "orders_there", "sql": "SELECT o.oid FROM orders o",
                                  "staleness_s": 10, "mv_machine": "shop"}, token=app["token"])
    assert status == 201 and there["status"] == "admitted", there
    status, other = submit(live, {"name": "users_only", "staleness_s": 10,
                                  "sql": "SELECT u.uid, u.screen_name FROM users u"},
                           token=app["token"])
    assert status == 201 and other["status"] == "admitted", other

    rotated = "rotated-" + shop.password
    with psycopg.connect(shop.admin_dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER ROLE admin PASSWORD '{rotated}'")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE pid <> pg_backend_pid() AND usename = 'admin'")
    try:
        deadline = time.monotonic() + 60
        while True:
            status, machines = live.call("GET", "/machines")
            lost = next(m for m in machines if m["name"] == "shop")
            if not lost["healthy"] and lost["lost"]:
                break
            assert time.monotonic() < deadline, lost
            time.sleep(1)
        assert "password authentication failed" in lost["unreachable"], lost
        assert "password was changed" in lost["lost"] and "detach" in lost["lost"], lost
        assert next(m for m in machines if m["name"] == "m1")["lost"] is None
        # a plan change that does not need it goes on; one that does is refused at once
        started = time.monotonic()
        status, more = submit(live, {"name": "users_more", "staleness_s": 10, "sql":
                                     "SELECT u.uid FROM users u WHERE u.uid % 2 = 0"},
                              token=app["token"])
        assert status == 201 and more["status"] == "admitted", more
        status, doc = live.call("DELETE", f"/sharings/{more['id']}", token=app["token"])
        assert status == 200 and doc["status"] == "withdrawn", doc
        status, doc = submit(live, {"name": "orders_more", "sql": "SELECT o.uid FROM orders o",
                                    "staleness_s": 10, "mv_machine": "m1"}, token=app["token"])
        assert status == 502 and "needs ['shop']" in str(doc), doc
        assert time.monotonic() - started < 60, time.monotonic() - started

        status, doc = live.call("DELETE", "/machines/shop")
        assert status == 409 and "lost_orders" in doc["detail"], doc
        assert "orders_there" in doc["detail"], doc
        started = time.monotonic()
        status, doc = live.call("DELETE", "/machines/shop?withdraw=true")
        assert status == 200, doc
        assert time.monotonic() - started < 60  # no deploy waited for the lost agent
        assert doc["withdrawn"] == ["lost_orders", "orders_there"], doc
        assert "password authentication failed" in doc["unreachable"]
        assert "smile_capture" in doc["left"], doc
        status, machines = live.call("GET", "/machines")
        assert [m["name"] for m in machines] == ["m1"], machines
        for sid in (reads["id"], there["id"]):
            status, row = live.call("GET", f"/sharings/{sid}", token=app["token"])
            assert row["status"] == "withdrawn", row
        sup = Supervisor(live.settings.state_dir)
        assert sup.state("capture-shop").pid is None and sup.state("agent-shop").pid is None
        with psycopg.connect(live.topology.machines[0].dsn) as conn:
            conn.execute("UPDATE users SET screen_name = screen_name || 'y' WHERE uid = "
                         "(SELECT min(uid) FROM users)")
            conn.commit()
        body_other = caught_up(live, other["id"])  # it goes on
        assert body_other["status"] == "admitted", body_other
        status, doc = live.call("DELETE", f"/sharings/{other['id']}", token=app["token"])
        assert status == 200 and doc["status"] == "withdrawn", doc
    finally:
        with psycopg.connect(shop.dsn_as("admin", rotated, "postgres"), autocommit=True) as conn:
            conn.execute(f"ALTER ROLE admin PASSWORD '{shop.password}'")
    with psycopg.connect(_shop_dsn(shop), autocommit=True) as conn:  # as configuration.md says
        conn.execute("SELECT pg_drop_replication_slot('smile_capture')")
        conn.execute("DROP PUBLICATION IF EXISTS smile_pub")
        conn.execute("DROP SCHEMA IF EXISTS smile_mv, _smile CASCADE")
        for (role,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname LIKE "
                                    "'smile\\_c\\_%'").fetchall():
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')
    assert leftovers(_shop_dsn(shop)).empty(), leftovers(_shop_dsn(shop))


@pytest.mark.services
def test_unpublishing_leaves_nothing_in_the_apps_way(live: Live) -> None:
    """A table with a column of the app's own enum, published while the capturer runs and
    changes flow, then un-published: it leaves the publication, its ΔR and R̂ go, the app
    drops its table and then its type, and capture of the other tables goes on."""
    m1 = live.topology.machines[0]
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        conn.execute("CREATE TABLE moods (uid bigint, feel mood)")
        conn.execute("INSERT INTO moods VALUES (1, 'ok'), (2, 'sad')")
    for table in ("users", "moods"):
        status, doc = live.call("POST", "/relations", {"machine": "m1",
                                                       "table": f"public.{table}"})
        assert status == 201, doc
    stop = threading.Event()

    def churn() -> None:
        with psycopg.connect(m1.dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute("INSERT INTO moods VALUES (3, 'ok')")
                conn.execute("UPDATE users SET followers = followers + 1 WHERE uid = "
                             "(SELECT min(uid) FROM users)")
                stop.wait(0.02)

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        time.sleep(2)
        status, doc = live.call("DELETE", "/relations/m1/public.moods")
        assert status == 204, doc
    finally:
        stop.set()
        worker.join(10)
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_publication_tables WHERE tablename = "
                            "'moods'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = '_smile' AND "
                            "tablename LIKE 'public__moods__%%'").fetchone() == (0,)
        conn.execute("DROP TABLE moods")
        conn.execute("DROP TYPE mood")  # nothing of SMILE's depends on it
        before = conn.execute("SELECT rows_captured FROM _smile.capture_state s JOIN "
                              "_smile.captured_relations r USING (relid) WHERE "
                              "r.table_name = 'users'").fetchone()
        conn.execute("UPDATE users SET followers = followers + 1 WHERE uid = "
                     "(SELECT min(uid) FROM users)")
        deadline = time.monotonic() + 30
        while True:  # the capturer carries on with users
            after = conn.execute("SELECT rows_captured FROM _smile.capture_state s JOIN "
                                 "_smile.captured_relations r USING (relid) WHERE "
                                 "r.table_name = 'users'").fetchone()
            if after is not None and before is not None and after[0] > before[0]:
                break
            assert time.monotonic() < deadline, (before, after)
            time.sleep(0.5)


def _mv_vs_query(live: Live, mv: dict[str, Any], query: str) -> tuple[int, int]:
    """(rows in the MV, rows differing from `query` run on m1, where its tables are)."""
    with psycopg.connect(live.topology.machines[0].dsn) as conn:
        want = Counter(conn.execute(query).fetchall())
        got = Counter(conn.execute(f"SELECT * FROM {mv['table']}").fetchall())
    return sum(got.values()), sum(((got - want) + (want - got)).values())


@pytest.mark.services
def test_schema_changes_under_live_sharings(live: Live) -> None:
    """A column added to a table a sharing reads, TRUNCATE, and a column it does not read
    dropped: the sharing stays exact. A column it reads renamed: it is `failed` within its
    SLA, with the reason; a new sharing reading it is refused, one reading the table's other
    columns admitted and exact; a sharing over another table stays exact throughout. A
    column a sharing reads retyped: it is planned again under its id, and exact. Their SLA is
    short (each check waits for a push past the moment the changes stopped)."""
    sla = 5
    m1 = live.topology.machines[0]
    items_sql = "SELECT i.uid, i.qty FROM items i WHERE i.qty > 0"
    tags_sql = "SELECT g.uid, g.tag FROM tags g"
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (uid bigint, qty int, label text)")
        conn.execute("CREATE TABLE tags (uid bigint, tag text)")
        conn.execute("INSERT INTO items SELECT i % 13, i % 5, 'l' FROM generate_series(1, 200) i")
        conn.execute("INSERT INTO tags SELECT i % 7, 't' || i FROM generate_series(1, 50) i")
    ids, mvs = {}, {}
    for table, name, query in (("items", "S_items", items_sql), ("tags", "S_tags", tags_sql)):
        status, doc = live.call("POST", "/relations", {"machine": "m1", "table": f"public.{table}"})
        assert status == 201, doc
        status, doc = submit(live, {"name": name, "sql": query, "staleness_s": sla})
        assert status == 201 and doc["status"] == "admitted", doc
        ids[name], mvs[name] = doc["id"], doc["mv"]

    def exact() -> None:
        for name, query in (("S_items", items_sql), ("S_tags", tags_sql)):
            body = caught_up(live, ids[name])
            assert body["status"] == "admitted", body
            rows, diff = _mv_vs_query(live, mvs[name], query)
            assert diff == 0, (name, rows, diff)

    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE items ADD COLUMN extra int DEFAULT 1")
        conn.execute("INSERT INTO items VALUES (1, 3, 'n', 5), (2, 4, 'n', 6)")
        conn.execute("UPDATE items SET qty = qty + 1, extra = 2 WHERE uid = 3")
        conn.execute("DELETE FROM items WHERE uid = 4")
        conn.execute("INSERT INTO tags VALUES (1, 'after')")
    exact()
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE items")
        conn.execute("INSERT INTO items VALUES (5, 2, 'm', 1), (6, 0, 'm', 1)")
    exact()
    with psycopg.connect(m1.dsn, autocommit=True) as conn:  # a column it does not read
        conn.execute("ALTER TABLE items DROP COLUMN label")
        conn.execute("INSERT INTO items VALUES (8, 2, 1), (9, 3, 1)")
        conn.execute("UPDATE items SET qty = qty + 1 WHERE uid = 5")
        conn.execute("DELETE FROM items WHERE uid = 9")
    exact()
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE items RENAME COLUMN qty TO quantity")
        conn.execute("INSERT INTO items VALUES (7, 1, 1)")
        conn.execute("INSERT INTO tags VALUES (2, 'later')")
    deadline = time.monotonic() + sla + 5  # its SLA, and the capturer's and watcher's rounds
    while True:
        status, body = live.call("GET", f"/sharings/{ids['S_items']}")
        if body["status"] == "failed":
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
    assert "['qty']" in body["reason"] and "public.items" in body["reason"], body
    assert "dropped, renamed or retyped" in body["reason"] and "withdraw it" in body["reason"], body
    body = caught_up(live, ids["S_tags"])
    assert body["status"] == "admitted" and _mv_vs_query(live, mvs["S_tags"], tags_sql)[1] == 0
    # a new sharing over the lost column is refused up front, over the others admitted
    status, doc = submit(live, {"name": "S_qty", "sql": items_sql, "staleness_s": sla})
    assert status == 422 and "['qty'] of items (on m1), which were dropped" in str(doc), doc
    uids_sql = "SELECT i.uid FROM items i"
    status, doc = submit(live, {"name": "S_uids", "sql": uids_sql, "staleness_s": sla})
    assert status == 201 and doc["status"] == "admitted", doc
    ids["S_uids"] = doc["id"]
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items VALUES (10, 1, 1)")
        conn.execute("DELETE FROM items WHERE uid = 5")
    assert caught_up(live, doc["id"])["status"] == "admitted"
    assert _mv_vs_query(live, doc["mv"], uids_sql)[1] == 0
    # a column it reads retyped: the table still answers it, so it is planned again, exact
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE tags ALTER COLUMN tag TYPE varchar(40)")
        conn.execute("INSERT INTO tags VALUES (3, 'retyped')")
    deadline = time.monotonic() + sla + 30
    while True:
        status, body = live.call("GET", f"/sharings/{ids['S_tags']}")
        if body["status"] == "admitted" and "planned again" in body["reason"]:
            break
        assert body["status"] in ("admitted", "installing"), body
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
    assert "['tag'] of public.tags (on m1) changed type" in body["reason"], body
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("UPDATE tags SET tag = tag || '!' WHERE uid = 1")
        conn.execute("INSERT INTO tags VALUES (4, 'after retype')")
    body = caught_up(live, ids["S_tags"])
    assert body["status"] == "admitted" and body["violations"] == 0, body
    rows, diff = _mv_vs_query(live, body["mv"], tags_sql)
    assert rows > 50 and diff == 0, (rows, diff)
    assert _mv_vs_query(live, doc["mv"], uids_sql)[1] == 0
    for name in ids:
        assert live.call("DELETE", f"/sharings/{ids[name]}")[0] == 200
