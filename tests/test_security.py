"""Security against a live SMILE (2 machines, `smile serve` as its own process): tokens, what a
consumer may see and do, the PostgreSQL role behind the DSN it is handed (reads its own MV and
nothing else), bounds on input, publishing that cannot pull a relation from under a sharing,
the adversarial SQL corpus over HTTP (each a 4xx; the server stays up; no object appears in
any database), and many dashboards polling at once while sharings come and go (every request
answered, none with a 5xx, each within the dashboard's 15 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.api import client
from tests.adversarial_sql import REFUSED
from tests.fix_api import Live, live_smile

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.services, pytest.mark.spark]

RELATIONS = ("users", "tweets", "socnet")
ALICE_SQL = ("SELECT u.uid, u.screen_name, s.uid2 FROM users u, socnet s WHERE s.uid = u.uid")
BOB_SQL = "SELECT u.uid, u.followers FROM users u WHERE u.followers > 10"


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_smile("security", 500, 2, 2000) as handle:
        where = {"users": "m1", "tweets": "m2", "socnet": "m1"}  # default placement on 2
        for rel in RELATIONS:
            status, body = handle.call("POST", "/relations",
                                       {"machine": where[rel], "table": f"public.{rel}"})
            assert status == 201, body
        yield handle


def _objects(live: Live) -> dict[str, set[tuple[str, ...]]]:
    """Every relation, schema, role and function of every database SMILE runs (but SMILE's
    own sessions' temporary tables, which come and go with its pushes)."""
    out: dict[str, set[tuple[str, ...]]] = {}
    dsns = {m.name: m.dsn for m in live.topology.machines} | {"catalog":
                                                               live.topology.catalog_dsn}
    for name, dsn in dsns.items():
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT 'rel', n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
                "n.oid = c.relnamespace WHERE c.relpersistence <> 't' UNION ALL SELECT "
                "'schema', nspname, '' FROM pg_namespace WHERE nspname !~ '^pg_(toast_)?temp_' "
                "UNION ALL SELECT 'role', rolname, '' FROM pg_roles UNION ALL "
                "SELECT 'proc', n.nspname, p.proname FROM pg_proc p JOIN pg_namespace n ON "
                "n.oid = p.pronamespace UNION ALL SELECT 'db', datname, '' FROM pg_database"
            ).fetchall()
        out[name] = {tuple(r) for r in rows}
    return out


def test_tokens_are_required(live: Live) -> None:
    for method, path in [("GET", "/sharings"), ("GET", "/sharings/1"), ("GET", "/relations"),
                         ("POST", "/relations"), ("DELETE", "/sharings/1"), ("GET", "/plan"),
                         ("GET", "/machines"), ("GET", "/metrics"), ("POST", "/consumers"),
                         ("GET", "/me"), ("GET", "/sharings/1/history"),
                         ("DELETE", "/relations/m1/public.users"), ("GET", "/plan/options"),
                         ("PUT", "/plan/options")]:
        for token in ("", "not-a-token", live.token[:-2] + "xx"):
            status, body = live.call(method, path, {} if method in ("POST", "PUT") else None,
                                     token)
            assert status == 401, (method, path, token, status, body)
    assert live.call("GET", "/healthz", token="")[0] == 200
    status, spec = live.call("GET", "/openapi.json", token="")
    assert status == 200 and "bearer" in json.dumps(spec["components"]["securitySchemes"]).lower()
    status, page = live.call("GET", "/dashboard", token="")  # the page holds no data
    assert status == 200 and "token" in page


def _consumer(live: Live, name: str) -> str:
    status, body = live.call("POST", "/consumers", {"name": name})
    assert status == 201 and body["token"] and body["admin"] is False, body
    return str(body["token"])


def test_consumers_see_and_withdraw_only_their_own(live: Live) -> None:
    alice, bob = _consumer(live, "alice"), _consumer(live, "bob")
    assert live.call("POST", "/consumers", {"name": "alice"})[0] == 400  # taken
    # the CLI makes one too, its token printed once
    out = subprocess.run([sys.executable, "-m", "smile.cli.main", "consumer", "create",
                          "carol", "--json"], env=live.env, capture_output=True, text=True,
                         check=True).stdout
    carol = json.loads(out)
    assert carol["name"] == "carol" and carol["admin"] is False and len(carol["token"]) > 30
    assert live.call("GET", "/me", token=carol["token"])[1]["name"] == "carol"
    # consumers may not publish, make consumers, or see D and the metrics
    assert live.call("POST", "/relations", {"machine": "m1", "table": "public.users"},
                     alice)[0] == 403
    assert live.call("POST", "/consumers", {"name": "eve", "admin": True}, alice)[0] == 403
    assert live.call("GET", "/plan", token=alice)[0] == 403
    assert live.call("GET", "/plan/options", token=alice)[0] == 403
    assert live.call("PUT", "/plan/options", {"plumbing": False}, alice)[0] == 403
    assert live.call("GET", "/metrics", token=alice)[0] == 403
    assert live.call("GET", "/relations", token=alice)[0] == 200

    status, a1 = live.call("POST", "/sharings", {"name": "A1", "sql": ALICE_SQL,
                                                 "staleness_s": 60}, alice)
    assert status == 201 and a1["status"] == "admitted", a1
    status, b1 = live.call("POST", "/sharings", {"name": "B1", "sql": BOB_SQL,
                                                 "staleness_s": 60}, bob)
    assert status == 201 and b1["status"] == "admitted", b1
    status, mine = live.call("GET", "/sharings", token=alice)
    assert status == 200 and [s["name"] for s in mine] == ["A1"]
    for method, path in [("GET", f"/sharings/{b1['id']}"), ("DELETE", f"/sharings/{b1['id']}"),
                         ("GET", f"/sharings/{b1['id']}/history")]:
        status, body = live.call(method, path, token=alice)
        assert status == 404 and "no sharing" in body["detail"], (method, path, body)
    names = {s["name"] for s in live.call("GET", "/sharings")[1]}  # the admin sees all
    assert {"A1", "B1"} <= names
    assert live.call("GET", f"/sharings/{b1['id']}", token=bob)[1]["status"] == "admitted"

    # -- the DSNs: their own roles, never a superuser --------------------------------------
    dsn_a = live.call("GET", f"/sharings/{a1['id']}", token=alice)[1]["mv"]["dsn"]
    dsn_b = live.call("GET", f"/sharings/{b1['id']}", token=bob)[1]["mv"]["dsn"]
    assert a1["mv"]["dsn"] == dsn_a and "smile_c_alice" in dsn_a and "smile_c_bob" in dsn_b
    for dsn in (dsn_a, dsn_b):
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication "
                                "FROM pg_roles WHERE rolname = current_user").fetchone() \
                == (False, False, False, False)
    machine = next(m for m in live.topology.machines if m.name == a1["mv"]["machine"])
    with psycopg.connect(machine.dsn) as su:
        expected = su.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier("smile_mv", "A1"))).fetchone()
        everything = su.execute(
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
            "n.oid = c.relnamespace WHERE c.relkind IN ('r', 'v', 'm', 'p') AND n.nspname NOT IN "
            "('pg_catalog', 'information_schema')").fetchall()
    assert expected is not None and expected[0] > 0
    with psycopg.connect(dsn_a, autocommit=True) as conn:
        assert conn.execute('SELECT count(*) FROM smile_mv."A1"').fetchone() == expected
    with psycopg.connect(dsn_a, autocommit=True) as conn:  # its own sharings' freshness
        seen = {r[0] for r in conn.execute("SELECT name FROM smile_mv.freshness")}
        assert seen == {"A1"}, seen
    others = [(s, t) for s, t in everything
              if (s, t) not in (("smile_mv", "A1"), ("smile_mv", "freshness"))]
    assert ("smile_mv", "B1") in others or b1["mv"]["machine"] != a1["mv"]["machine"]
    assert any(s == "public" for s, _ in others) and len(others) > 10  # bases, ΔR, R̂, vertices
    denied = [f"SELECT * FROM {sql.Identifier(s, t).as_string(None)} LIMIT 1" for s, t in others]
    denied += ["SELECT pg_read_file('/etc/passwd')", "COPY (SELECT 1) TO PROGRAM 'true'",
               "CREATE TABLE pwned (x int)", "CREATE TABLE smile_mv.pwned (x int)",
               "CREATE TEMP TABLE pwned (x int)", "SET ROLE smile",
               "SET SESSION AUTHORIZATION smile",
               "SELECT lo_import('/etc/passwd')", "CREATE SCHEMA pwned",
               "SELECT * FROM pg_authid", "ALTER ROLE smile_c_alice SUPERUSER",
               "GRANT smile TO smile_c_alice", "CREATE EXTENSION dblink"]
    for statement in denied:
        with psycopg.connect(dsn_a, autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as err:
                conn.execute(statement)
            assert err.value.sqlstate in ("42501", "42P01", "3F000", "58P01"), \
                (statement, err.value.sqlstate, str(err.value))
    with pytest.raises(psycopg.OperationalError):  # no role on the other databases
        psycopg.connect(dsn_a.rsplit("/", 1)[0] + "/postgres").close()

    # -- publishing cannot pull a relation from under a sharing -----------------------------
    status, body = live.call("POST", "/relations", {"machine": "m1", "table": "public.users"})
    assert status == 409 and "A1" in body["detail"] and "B1" in body["detail"], body
    status, body = live.call("DELETE", "/relations/m1/public.socnet")
    assert status == 409 and "A1" in body["detail"], body

    # -- withdrawing the consumer's last MV on a machine takes its access back --------------
    status, body = live.call("DELETE", f"/sharings/{a1['id']}", token=alice)
    assert status == 200 and body["status"] == "withdrawn", body
    with pytest.raises(psycopg.OperationalError,
                       match=r"not permitted to log in|permission denied"):
        psycopg.connect(dsn_a).close()
    with psycopg.connect(dsn_b) as conn:  # bob is untouched
        count = conn.execute('SELECT count(*) FROM smile_mv."B1"').fetchone()
        assert count is not None and count[0] > 0
    status, _ = live.call("DELETE", "/relations/m1/public.socnet")
    assert status == 204
    assert ("m1", "public.socnet") not in {(r["machine"], r["table"]) for r in
                                           live.call("GET", "/relations")[1]}
    assert live.call("POST", "/relations", {"machine": "m1", "table": "public.socnet"})[0] == 201


def _raw(live: Live, body: bytes) -> int:
    req = urllib.request.Request(live.url + "/sharings", data=body, method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {live.token}"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_bounds(live: Live) -> None:
    ok: dict[str, Any] = {"name": "bounded", "sql": BOB_SQL, "staleness_s": 30}
    assert _raw(live, json.dumps(ok | {"sql": BOB_SQL + " " * 70_000}).encode()) == 413
    assert _raw(live, b'{"name": "x", "sql": "' + b"a" * 2_000_000 + b'"}') == 413
    cases: list[dict[str, Any]] = [
        {"sql": BOB_SQL + " AND u.uid > 0" * 1500},  # over 16 KB
        {"staleness_s": 1e300}, {"staleness_s": 0}, {"staleness_s": -5},
        {"staleness_s": 400 * 24 * 3600.0}, {"penalty_per_tuple": 1e7},
        {"penalty_per_tuple": -1}, {"name": "1abc"}, {"name": "a b"}, {"name": "x" * 64},
        {"name": 'x"; DROP'}, {"sql": ""}, {"staleness_s": "soon"}, {"mv_machine": ""},
        {"mv_machine": 2},
    ]
    for case in cases:
        status, body = live.call("POST", "/sharings", ok | case)
        assert status == 422 and body["detail"], (case, status, body)
    for bad in (b'{"name": "x", "sql": "SELECT 1", "staleness_s": Infinity}',
                b'{"name": "x", "sql": "SELECT 1", "staleness_s": NaN}', b"{", b"[]"):
        assert _raw(live, bad) == 422, bad
    assert live.call("GET", "/sharings/99999999999")[0] == 422
    assert live.call("GET", "/sharings/-1")[0] == 422


def test_a_sharing_may_name_the_machine_of_its_mv(live: Live) -> None:
    """Its MV where it asked, holding what its query gives; an unknown machine is a 400 that
    leaves nothing behind."""
    before = {s["name"] for s in live.call("GET", "/sharings")[1]}
    status, body = live.call("POST", "/sharings", {"name": "placed_far", "sql": BOB_SQL,
                                                   "staleness_s": 60, "mv_machine": "m9"})
    assert status == 400 and "m9" in body["detail"] and "m1" in body["detail"], body
    assert {s["name"] for s in live.call("GET", "/sharings")[1]} == before
    ids = []
    try:
        for name, machine in (("placed_m1", "m1"), ("placed_m2", "m2")):
            status, row = live.call("POST", "/sharings", {"name": name, "sql": BOB_SQL,
                                                          "staleness_s": 60,
                                                          "mv_machine": machine})
            assert status == 201 and row["mv"]["machine"] == machine, row
            ids.append(row["id"])
            dsn = next(m.dsn for m in live.topology.machines if m.name == machine)
            with psycopg.connect(dsn) as conn:
                got = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier("smile_mv", name))).fetchone()
            with psycopg.connect(live.topology.machines[0].dsn) as conn:  # users is on m1
                want = conn.execute("SELECT count(*) FROM users u WHERE u.followers > 10"
                                    ).fetchone()
            assert got == want and want is not None and want[0] > 0, (name, got, want)
    finally:
        for sid in ids:
            live.call("DELETE", f"/sharings/{sid}")


def test_planner_options_are_an_admins_and_kept(live: Live) -> None:
    assert live.call("GET", "/plan/options") == (200, {"plumbing": True, "merge": True,
                                                       "algorithm": "cheapest",
                                                       "share_pushes": True})
    try:
        for bad in ({"algorithm": "fastest"}, {"plumbing": "sometimes"}, {"algorithm": 3},
                    {"share_pushes": "often"}):
            status, body = live.call("PUT", "/plan/options", bad)
            assert status == 422 and body["detail"], (bad, status, body)
        assert live.call("GET", "/plan/options")[1]["algorithm"] == "cheapest"  # lost nothing
        status, body = live.call("PUT", "/plan/options", {"plumbing": False, "algorithm": "DPT",
                                                          "share_pushes": False})
        assert status == 200 and body == {"plumbing": False, "merge": True, "algorithm": "DPT",
                                          "share_pushes": False}
        assert live.call("GET", "/plan/options")[1] == body
        status, row = live.call("POST", "/sharings", {"name": "opt_dpt", "sql": BOB_SQL,
                                                      "staleness_s": 60})
        assert status == 201 and row["status"] == "admitted", row
        assert row["plumbings"] == [] and "DPT" in row["reason"], row
        assert live.call("DELETE", f"/sharings/{row['id']}")[0] == 200
    finally:
        live.call("PUT", "/plan/options", {})  # the defaults


def test_adversarial_sql_changes_nothing(live: Live) -> None:
    before = _objects(live)
    for case, query in sorted(REFUSED.items()):
        status, body = live.call("POST", "/sharings", {"name": f"adv_{case}"[:63],
                                                       "sql": query, "staleness_s": 30})
        assert 400 <= status < 500, (case, status, body)
        assert live.call("GET", "/healthz", token="")[0] == 200, case
    assert live.serve.poll() is None
    after = _objects(live)
    for name in before:
        assert after[name] == before[name], (name, after[name] ^ before[name])
    admitted = [s["name"] for s in live.call("GET", "/sharings")[1]
                if s["name"].startswith("adv_") and s["status"] != "rejected"]
    assert admitted == []


def test_adversarial_identifiers_work_end_to_end(live: Live) -> None:
    """Output names with quotes, unicode and reserved words, a quoted alias: the view has
    exactly those columns and the consumer reads them through its DSN."""
    dave = _consumer(live, "dave")
    query = ('SELECT "a""b".uid AS "we""ird; DROP TABLE users --", "a""b".screen_name AS '
             '"ユーザー", "a""b".followers AS "select" FROM users "a""b" WHERE "a""b".uid > 0')
    status, body = live.call("POST", "/sharings", {"name": "D1", "sql": query,
                                                   "staleness_s": 60}, dave)
    assert status == 201 and body["status"] == "admitted", body
    with psycopg.connect(body["mv"]["dsn"]) as conn:
        cur = conn.execute('SELECT * FROM smile_mv."D1" LIMIT 1')
        assert [d.name for d in cur.description or ()] == [
            'we"ird; DROP TABLE users --', "ユーザー", "select"]
        count = conn.execute('SELECT count(*) FROM smile_mv."D1"').fetchone()
    machine = next(m for m in live.topology.machines if m.name == "m1")
    with psycopg.connect(machine.dsn) as su:
        expected = su.execute("SELECT count(*) FROM users WHERE uid > 0").fetchone()
    assert count == expected and count is not None and count[0] > 0
    assert live.call("DELETE", f"/sharings/{body['id']}", token=dave)[0] == 200


STATIC_FILES = tuple(f"/static/{f.name}" for f in files("smile.api").joinpath("static").iterdir()
                     if f.name != "dashboard.html")
LOAD_CLIENTS = 12
"""Pages polling at once: each request of each one waits for the one before, as the
dashboard's do."""
ANSWER_S = 15.0
"""What the dashboard waits for an answer before it gives up on a request."""


def _poll_like_a_dashboard(live: Live, token: str, admin: bool, stop: threading.Event,
                           answers: list[tuple[str, int | str, float]]) -> None:
    """The dashboard's requests, over and over until `stop`: its page and files, the
    sharings and each one's history, the machines, D as JSON and SVG; an admin's also
    scrape /metrics. Each answer is (path, status or the error, seconds)."""
    def get(path: str) -> Any:
        start = time.monotonic()
        try:
            status, body = client.call(live.url, "GET", path, timeout=ANSWER_S * 2, token=token)
        except OSError as exc:
            answers.append((path, repr(exc), time.monotonic() - start))
            return None
        answers.append((path, status, time.monotonic() - start))
        return body

    for path in ("/dashboard", *STATIC_FILES):
        get(path)
    while not stop.is_set():
        listed = get("/sharings")
        for s in listed if isinstance(listed, list) else []:
            if s["status"] == "admitted":
                get(f"/sharings/{s['id']}/history")
        for path in ("/machines", "/plan", "/plan?format=svg", "/me",
                     *(("/metrics",) if admin else ())):
            get(path)


def test_many_requests_at_once_are_all_answered(live: Live) -> None:
    """`LOAD_CLIENTS` dashboards (an admin's and a consumer's) poll a freshly started server at
    once while two clients submit and withdraw sharings (the executor drops and adds the ones
    it tracks while /metrics is scraped): every request is answered, none with a 5xx, each
    within the dashboard's `ANSWER_S`."""
    erin = _consumer(live, "erin")
    live.serve.terminate()  # the first requests of a process, all at once, too
    live.serve.wait(20)
    live.start_serve()
    stop = threading.Event()
    answers: list[tuple[str, int | str, float]] = []
    churned: list[tuple[str, int, str]] = []

    def churn(prefix: str) -> None:
        for round_ in range(3):
            name = f"{prefix}{round_}"
            status, body = live.call("POST", "/sharings", {"name": name, "sql": BOB_SQL,
                                                           "staleness_s": 60}, erin)
            churned.append((name, status, str(body)[:300]))
            if status == 201:
                status, body = live.call("DELETE", f"/sharings/{body['id']}", token=erin)
                churned.append((name, status, str(body)[:300]))

    pollers = [threading.Thread(target=_poll_like_a_dashboard,
                                args=(live, live.token if i % 2 else erin, bool(i % 2), stop,
                                      answers)) for i in range(LOAD_CLIENTS)]
    churners = [threading.Thread(target=churn, args=(p,)) for p in ("load_a", "load_b")]
    started = time.monotonic()
    for t in pollers + churners:
        t.start()
    for t in churners:
        t.join(600)
    churn_s = time.monotonic() - started
    stop.set()
    for t in pollers:
        t.join(120)
    assert not any(t.is_alive() for t in pollers + churners)
    assert Counter(s for _, s, _ in churned) == {201: 6, 200: 6}, churned
    admins_only = ("/plan", "/plan?format=svg")  # D: 403 to a consumer
    wrong = [a for a in answers if not (a[1] == 200 or (a[1] == 403 and a[0] in admins_only))]
    assert not wrong, wrong[:20]
    slowest = max(answers, key=lambda a: a[2])
    assert slowest[2] <= ANSWER_S, slowest
    assert sum(a[0] == "/metrics" for a in answers) >= 10 and len(answers) >= 200, len(answers)
    print(f"{len(answers)} answers in {churn_s:.0f} s of churn, slowest {slowest}")
