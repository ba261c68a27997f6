"""SMILE for existing databases only: `smile up --machines 0` (here `LocalCloud.up(0)` and
`smile serve`) runs the catalog, the broker and the API and no machine of its own; an app's
database is attached with `smile machine add` (a bad DSN is one line and exit 2), published, a
sharing over it is kept exact under DML, and `smile machine remove` refuses while the sharing
reads it and, with `--withdraw`, detaches it leaving nothing of SMILE's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from smile.deploy.machines import leftovers
from tests.fix_app_db import AppCluster, app_cluster, bare_smile, caught_up

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fix_api import Live

pytestmark = [pytest.mark.services]
SQL = "SELECT uid, count(*) AS notes FROM notes GROUP BY uid"


@pytest.fixture(scope="module")
def bare() -> Iterator[Live]:
    with bare_smile("machines-only", 920, 0) as handle:
        yield handle


@pytest.fixture(scope="module")
def solo() -> Iterator[AppCluster]:
    with app_cluster("solo") as cluster:
        cluster.alter_system("wal_level", "logical")
        cluster.restart()
        with psycopg.connect(cluster.admin_dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE notes")
        with psycopg.connect(_dsn(cluster), autocommit=True) as conn:
            conn.execute("CREATE TABLE notes (id serial PRIMARY KEY, uid int, body text)")
            conn.execute("INSERT INTO notes (uid, body) SELECT i % 17, 'n' || i "
                         "FROM generate_series(1, 500) i")
        yield cluster


def _dsn(cluster: AppCluster) -> str:
    return cluster.dsn_as("admin", cluster.password, "notes")


def _smile(live: Live, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "smile.cli.main", *args], env=live.env,
                          capture_output=True, text=True, timeout=300, check=False)


def _mv_equals_query(cluster: AppCluster, mv: dict[str, Any]) -> tuple[int, int]:
    with psycopg.connect(_dsn(cluster)) as conn:
        want = Counter(conn.execute(SQL).fetchall())
        got = Counter(conn.execute(f"SELECT * FROM {mv['table']}").fetchall())
    return sum(got.values()), sum(((got - want) + (want - got)).values())


def test_smile_with_no_machine_of_its_own(bare: Live, solo: AppCluster) -> None:
    status, machines = bare.call("GET", "/machines")
    assert status == 200 and machines == [], machines
    bad = _smile(bare, "machine", "add", "solo", "--dsn",
                 solo.dsn_as("admin", "wrong", "notes"))
    assert bad.returncode == 2 and "connection" in bad.stderr and "Traceback" not in bad.stderr
    done = _smile(bare, "machine", "add", "solo", "--dsn", _dsn(solo), "--cores", "3",
                  "--price", "0.5")
    assert done.returncode == 0, done.stderr
    listed = _smile(bare, "machine", "list", "--json")
    (machine,) = json.loads(listed.stdout)
    assert (machine["name"], machine["origin"], machine["cores"], machine["price_per_hour"]) \
        == ("solo", "attached", 3.0, 0.5), machine
    status, doc = bare.call("POST", "/relations", {"machine": "solo", "table": "public.notes"})
    assert status == 201, doc
    status, doc = bare.call("POST", "/sharings", {"name": "per_uid", "sql": SQL,
                                                  "staleness_s": 5})
    assert status == 201 and doc["status"] == "admitted", doc
    sid, mv = doc["id"], doc["mv"]
    with psycopg.connect(_dsn(solo), autocommit=True) as conn:
        for i in range(60):
            conn.execute("INSERT INTO notes (uid, body) VALUES (%s, 'x')", (i % 23,))
            conn.execute("DELETE FROM notes WHERE id = %s", (i * 3 + 1,))
            conn.execute("UPDATE notes SET uid = uid + 1 WHERE id = %s", (i * 5 + 2,))
            time.sleep(0.05)
    caught_up(bare, sid)
    rows, diff = _mv_equals_query(solo, mv)
    assert rows >= 17 and diff == 0, (rows, diff)

    refused = _smile(bare, "machine", "remove", "solo")
    assert refused.returncode == 2 and "per_uid" in refused.stderr, refused.stderr
    removed = _smile(bare, "machine", "remove", "solo", "--withdraw")
    assert removed.returncode == 0, removed.stderr
    status, doc = bare.call("GET", f"/sharings/{sid}")
    assert doc["status"] == "withdrawn", doc
    assert leftovers(_dsn(solo)).empty(), leftovers(_dsn(solo))
    with psycopg.connect(_dsn(solo)) as conn:
        assert conn.execute("SELECT count(*) FROM notes").fetchone() == (500 + 60 - 60,)


def test_unalike_machines_carry_work_by_their_cores_and_price(bare: Live, solo: AppCluster
                                                              ) -> None:
    """Two apps' databases attached with their own cores — 8 and 1 — at the same price per
    machine: a core-second of the larger costs an eighth, so admission puts the joins,
    copies and MVs of sharings over both on it. `GET /machines` shows each one's cores,
    price and bound (cores × max_load), and the larger carrying more of the plan."""
    with app_cluster("big") as big:
        big.alter_system("wal_level", "logical")
        big.restart()
        with psycopg.connect(big.admin_dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE shop")
        big_dsn = big.dsn_as("admin", big.password, "shop")
        with psycopg.connect(big_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (oid serial PRIMARY KEY, uid int, amount int)")
            conn.execute("INSERT INTO orders (uid, amount) SELECT i % 17, i "
                         "FROM generate_series(1, 2000) i")
        for name, dsn, cores in (("big", big_dsn, "8"), ("small", _dsn(solo), "1")):
            done = _smile(bare, "machine", "add", name, "--dsn", dsn, "--cores", cores,
                          "--price", "0.34")
            assert done.returncode == 0, done.stderr
        for machine, table in (("big", "public.orders"), ("small", "public.notes")):
            status, doc = bare.call("POST", "/relations", {"machine": machine, "table": table})
            assert status == 201, doc
        stop = threading.Event()

        def traffic() -> None:  # the rates the plan's loads are predicted at
            with psycopg.connect(big_dsn, autocommit=True) as b, \
                    psycopg.connect(_dsn(solo), autocommit=True) as n:
                i = 0
                while not stop.is_set():
                    b.execute("INSERT INTO orders (uid, amount) VALUES (%s, 1)", (i % 17,))
                    n.execute("INSERT INTO notes (uid, body) VALUES (%s, 'x')", (i % 17,))
                    i += 1
                    time.sleep(0.02)

        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        time.sleep(5)
        ids = []
        for i, query in enumerate((
                "SELECT n.uid, n.body, o.amount FROM notes n JOIN orders o ON o.uid = n.uid",
                "SELECT n.uid, sum(o.amount) AS spent FROM notes n JOIN orders o "
                "ON o.uid = n.uid GROUP BY n.uid",
                "SELECT n.uid, count(*) AS notes FROM notes n GROUP BY n.uid")):
            status, doc = bare.call("POST", "/sharings", {"name": f"unalike_{i}", "sql": query,
                                                          "staleness_s": 10})
            assert status == 201 and doc["status"] == "admitted", doc
            ids.append(doc["id"])
        # past the predictions' few seconds of freshness (each call may refresh them), traffic
        # still on: until they put more of the load on the larger machine, or 30 s have passed
        deadline = time.monotonic() + 30
        while True:
            status, machines = bare.call("GET", "/machines")
            loads = {m["name"]: m["predicted_load"] for m in machines}
            if loads["big"] > loads["small"] or time.monotonic() > deadline:
                break
            time.sleep(1)
        stop.set()
        worker.join(10)
        by = {m["name"]: m for m in machines}
        assert (by["big"]["cores"], by["small"]["cores"]) == (8.0, 1.0), machines
        assert by["big"]["price_per_hour"] == by["small"]["price_per_hour"] == 0.34
        assert by["big"]["bound"] > 7 * by["small"]["bound"] > 0, machines
        assert by["big"]["predicted_load"] > by["small"]["predicted_load"], machines
        for sid in ids:
            status, doc = bare.call("GET", f"/sharings/{sid}")
            assert doc["mv"]["machine"] == "big", doc
        for name in ("big", "small"):
            assert _smile(bare, "machine", "remove", name, "--withdraw").returncode == 0
        assert leftovers(big_dsn).empty() and leftovers(_dsn(solo)).empty()
