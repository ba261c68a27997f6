"""SMILE end to end over REST, with every part real: a 3-machine cloud with its capturers and
agents, the dataset, `smile serve` (executor, auditor, API) as its own process. Relations are
published, three sharings submitted (2-way; 3-way with a selection and a projection; one over
all three machines) with SLAs of 5–10 s, the workload runs for 30 s while the executor is
SIGKILLed and restarted; then the auditor (a snapshot every 2.5 s) must have seen no violation
and each MV must equal its query run by PostgreSQL on the bases. A 4-way sharing with a 0.05 s
SLA is rejected with a reason, bad input gets 4xx with a message, a withdrawn sharing leaves the
others correct, and the dashboard is drawn with data in headless Chromium (screenshot in
artifacts/)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.deploy.install import stream_rows
from smile.workload.driver import WorkloadDriver, locate_relations
from tests.fix_api import Live, live_smile
from tests.fix_cloud import ARTIFACTS

if TYPE_CHECKING:
    from collections.abc import Iterator


pytestmark = [pytest.mark.services, pytest.mark.spark]

TWEETS = 5000
RATE = 100.0
RUN_S = 30.0
KILL_AT_S = 12.0
"""The executor is SIGKILLed this far into the workload, and restarted."""
AUDIT_S = 2.5
"""`smile serve --audit-every`: at least 10 snapshots of each sharing over the run."""
SHARINGS = {
    "two_way": ("SELECT u.uid, u.screen_name, s.uid2 FROM users u, socnet s "
                "WHERE s.uid = u.uid", 10.0),
    "three_way": ("SELECT u.uid, lower(u.screen_name) AS sn, t.tid, c.lat FROM users u, "
                  "tweets t, curloc c WHERE u.uid = t.uid AND c.tid = t.tid AND c.lat > 0",
                  8.0),
    "everywhere": ("SELECT u.uid, t.tid, r.url FROM users u, tweets t, urls r "
                   "WHERE u.uid = t.uid AND r.tid = t.tid", 5.0),
    # beyond SPJ: tweets per user, last activity, users with their place if any
    "per_user": ("SELECT uid, count(*) AS tweets FROM tweets GROUP BY uid", 10.0),
    "last_active": ("SELECT u.uid, max(t.created_at) AS last_tweet FROM users u "
                    "JOIN tweets t ON t.uid = u.uid GROUP BY u.uid", 10.0),
    "with_place": ("SELECT u.uid, l.place FROM users u LEFT JOIN loc l ON l.uid = u.uid",
                   10.0),
}
PUBLISHED = ("users", "tweets", "socnet", "curloc", "urls", "loc")
FOUR_WAY = ("SELECT u.uid, t.tid, r.url, c.lat FROM users u, tweets t, urls r, curloc c "
            "WHERE u.uid = t.uid AND r.tid = t.tid AND c.tid = t.tid")


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_smile("e2e", 400, 3, TWEETS, serve_args=("--audit-every", str(AUDIT_S))) \
            as handle:
        yield handle


def call(live: Live, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return live.call(method, path, body)


def _oracle_equals_mv(live: Live, mv: dict[str, str], query: str) -> tuple[int, int]:
    """(rows in the MV, rows differing from the query run by PostgreSQL on copies of the
    live bases gathered on the MV's machine)."""
    where = locate_relations(live.topology)
    dsns = {m.name: m.dsn for m in live.topology.machines}
    schema = f"oracle_{time.monotonic_ns()}"
    with psycopg.connect(dsns[mv["machine"]], autocommit=True) as home:
        home.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            for rel in PUBLISHED:
                with psycopg.connect(dsns[where[rel]], autocommit=True) as src:
                    ddl = src.execute(
                        "SELECT string_agg(quote_ident(attname) || ' ' || "
                        "format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM "
                        "pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT "
                        "attisdropped", (f"public.{rel}",)).fetchone()
                    assert ddl is not None
                    cols = [r[0] for r in src.execute(
                        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND "
                        "attnum > 0 AND NOT attisdropped ORDER BY attnum",
                        (f"public.{rel}",)).fetchall()]
                    home.execute(sql.SQL("CREATE TABLE {} ({})").format(
                        sql.Identifier(schema, rel), sql.SQL(ddl[0])))
                    stream_rows(src, sql.SQL("SELECT * FROM {}").format(
                        sql.Identifier("public", rel)), home, sql.Identifier(schema, rel), cols)
            home.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
            want = Counter(home.execute(query).fetchall())
            home.execute("SET search_path = public")
            got = Counter(home.execute(f"SELECT * FROM {mv['table']}").fetchall())
        finally:
            home.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
    return sum(got.values()), sum(((got - want) + (want - got)).values())


def _types_smile_cannot_compare(live: Live) -> None:
    """A table of the app's with a json column and one of its own enum type: a sharing that
    reads neither is admitted and kept; one that reads either is a 422 naming the column and
    its type, never a 5xx."""
    m1 = live.topology.machines[0]
    with psycopg.connect(m1.dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
        conn.execute("CREATE TABLE profiles (uid bigint, doc json, feel mood)")
        conn.execute("INSERT INTO profiles VALUES (1, '{\"a\": 1}', 'ok'), (2, '[1,  2]', "
                     "'sad'), (2, '[1,  2]', 'sad')")
    status, body = call(live, "POST", "/relations", {"machine": m1.name,
                                                     "table": "public.profiles"})
    assert status == 201, body
    for column, kind in (("doc", "json"), ("feel", "mood")):
        status, body = call(live, "POST", "/sharings", {
            "name": f"reads_{column}", "sql": f"SELECT p.uid, p.{column} FROM profiles p",
            "staleness_s": 10})
        assert status == 422 and f"p.{column} of type {kind}" in body["detail"], body
    status, body = call(live, "POST", "/sharings", {
        "name": "profiles_uids", "sql": "SELECT p.uid, count(*) AS n FROM profiles p "
                                        "GROUP BY p.uid", "staleness_s": 3})
    assert status == 201 and body["status"] == "admitted", body
    with psycopg.connect(m1.dsn, autocommit=True) as conn:  # R̂ of a json table kept up
        conn.execute("UPDATE profiles SET doc = '{\"b\": 2}' WHERE uid = 1")
        conn.execute("DELETE FROM profiles WHERE uid = 2 AND feel = 'sad'")
        conn.execute("INSERT INTO profiles VALUES (3, NULL, NULL)")
    _caught_up(live, {"profiles_uids": body["id"]})
    with psycopg.connect(
            {m.name: m.dsn for m in live.topology.machines}[body["mv"]["machine"]]) as conn:
        got = sorted(conn.execute(f"SELECT * FROM {body['mv']['table']}").fetchall())
    assert got == [(1, 1), (3, 1)], got
    status, body = call(live, "DELETE", f"/sharings/{body['id']}")
    assert status == 200, body


def _caught_up(live: Live, ids: dict[str, int], timeout: float = 90) -> None:
    """Until every MV's timestamp passes the moment the sources went quiet."""
    quiet = time.time() + 1
    deadline = time.monotonic() + timeout
    for name, sid in ids.items():
        while True:
            status, body = call(live, "GET", f"/sharings/{sid}")
            assert status == 200, body
            if body["mv_ts"] and _epoch(body["mv_ts"]) >= quiet:
                break
            assert time.monotonic() < deadline, f"{name} did not catch up: {body}"
            time.sleep(0.5)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_sharings_end_to_end(live: Live) -> None:
    where = locate_relations(live.topology)
    # -- relations ----------------------------------------------------------------------------
    for rel in PUBLISHED:
        status, body = call(live, "POST", "/relations",
                            {"machine": where[rel], "table": f"public.{rel}"})
        assert status == 201 and body["table"] == f"public.{rel}", body
    status, body = call(live, "POST", "/relations", {"machine": "m9", "table": "public.users"})
    assert status == 404 and "m9" in body["detail"]
    status, body = call(live, "POST", "/relations", {"machine": "m1", "table": "public.nope"})
    assert 400 <= status < 500 and "nope" in body["detail"], body
    # -- bad sharings are refused with the reason, nothing is lost ----------------------------
    status, body = call(live, "POST", "/sharings", {"name": "bad", "sql": "SELEC uid FROM users",
                                                    "staleness_s": 5})
    assert status == 422 and "syntax" in body["detail"].lower(), body
    status, body = call(live, "POST", "/sharings", {
        "name": "agg", "sql": "SELECT string_agg(screen_name, ',') AS s FROM users",
        "staleness_s": 5})
    assert status == 422 and "aggregate" in body["detail"].lower(), body
    _types_smile_cannot_compare(live)
    status, body = call(live, "POST", "/sharings", {"name": "neg", "sql": "SELECT 1",
                                                    "staleness_s": 0})
    assert status == 422 and "staleness_s" in json.dumps(body)
    # -- three sharings -----------------------------------------------------------------------
    ids: dict[str, int] = {}
    mvs: dict[str, dict[str, str]] = {}
    plans: dict[str, Any] = {}
    for name, (query, sla) in SHARINGS.items():
        status, body = call(live, "POST", "/sharings", {"name": name, "sql": query,
                                                        "staleness_s": sla,
                                                        "penalty_per_tuple": 0.001})
        assert status == 201 and body["status"] == "admitted", body
        assert body["cp_s"] < sla and body["plan"]["edges"] and body["mv"]["table"]
        assert 0 < body["period_s"] < sla
        ids[name], mvs[name], plans[name] = body["id"], body["mv"], body["plan"]
        rows, diff = _oracle_equals_mv(live, body["mv"], query)  # populated on return
        assert rows > 0 and diff == 0, (name, rows, diff)
    machines = {label.rsplit("@", 1)[1] for e in plans["everywhere"]["edges"]
                for label in [*e["from"], e["to"]]}
    assert machines == {"m1", "m2", "m3"}  # `everywhere` spans all three machines
    # the global plan D: every vertex once, with the sharings it serves
    d = call(live, "GET", "/plan")[1]
    assert set(d["sharings"]) == set(SHARINGS) and d["version"] >= len(SHARINGS)
    labels = [v["vertex"] for v in d["vertices"]]
    assert len(labels) == len(set(labels))
    assert all(set(v["shr"]) <= set(SHARINGS) and v["shr"] for v in d["vertices"])
    status, body = call(live, "POST", "/sharings", {"name": "two_way", "sql": "SELECT 1",
                                                    "staleness_s": 5})
    assert status == 409, body
    status, body = call(live, "POST", "/sharings", {"name": "four_way", "sql": FOUR_WAY,
                                                    "staleness_s": 0.05})
    assert status == 422 and body["status"] == "rejected" and "SLA" in body["reason"], body
    # -- the workload for 30 s; the executor is SIGKILLed and restarted on the way ------------
    driver = WorkloadDriver(live.topology)
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            driver.run(RATE, RUN_S)
        except BaseException as exc:  # surfaced below
            failure.append(exc)

    runner = threading.Thread(target=drive)
    runner.start()
    time.sleep(KILL_AT_S)
    live.serve.send_signal(signal.SIGKILL)
    live.serve.wait()
    live.start_serve()
    runner.join()
    assert not failure, failure
    _caught_up(live, ids)
    for name, (query, _) in SHARINGS.items():
        rows, diff = _oracle_equals_mv(live, mvs[name], query)
        assert rows > 0 and diff == 0, (name, rows, diff)
    time.sleep(AUDIT_S + 1)  # one more audit snapshot after the run
    with psycopg.connect(live.topology.catalog_dsn) as cat:
        audit = {r[0]: r[1:] for r in cat.execute(
            "SELECT sharing, count(*), max(violations), max(staleness_s), max(tuples_moved) "
            "FROM smile_catalog.audit GROUP BY sharing").fetchall()}
    for name, (_, sla) in SHARINGS.items():
        snapshots, violations, worst, moved = audit[name]
        assert snapshots >= 10 and violations == 0 and worst <= sla and moved > 0, \
            (name, audit[name])
    status, listed = call(live, "GET", "/sharings")
    assert status == 200
    shown = {s["name"]: s for s in listed if s["status"] == "admitted"}
    assert set(shown) == set(SHARINGS)
    assert all(s["violations"] == 0 and s["cost_so_far"] > 0 for s in shown.values())
    # -- machines, plan, metrics --------------------------------------------------------------
    status, ms = call(live, "GET", "/machines")
    assert status == 200 and {m["name"] for m in ms} == {"m1", "m2", "m3"}
    assert all(m["healthy"] for m in ms), ms
    # each machine's largest edges, predicted beside measured; none over its bound at this rate
    edges = [e for m in ms for e in m["edges"]]
    assert any(e["measured"] > 0 and e["predicted"] for e in edges), ms
    assert all(e["kind"] is None or set(e["sharings"]) <= set(SHARINGS) for e in edges), edges
    assert not any(m["over_bound"] or m["warning"] or m["at_risk"] for m in ms), ms
    status, svg = call(live, "GET", "/plan?format=svg")
    assert status == 200 and svg.lstrip().startswith("<") and "svg" in svg
    status, metrics = call(live, "GET", "/metrics")
    assert status == 200 and 'smile_sharing_violations_total{sharing="two_way"} 0.0' in metrics
    assert all(f'smile_machine_over_bound{{machine="{m}"}} 0' in metrics
               for m in ("m1", "m2", "m3")), metrics
    model = {tuple(re.findall(r'="([^"]*)"', k)): float(v) for k, v in (
        line.rsplit(" ", 1) for line in metrics.splitlines()
        if line.startswith("smile_time_model_seconds{"))}
    for which in ("current", "calibrated"):  # every kind's line, and the dispatch overhead
        assert all((which, kind, "a") in model and (which, kind, "b") in model
                   for kind in ("copy_delta", "delta_to_rel", "union", "join_pg")), model
    assert model[("calibrated", "copy_delta", "a")] > 0 < model[("calibrated", "dispatch", "a")]
    # -- the dashboard, drawn in headless Chromium --------------------------------------------
    _dashboard_draws(live, len(SHARINGS))
    # -- withdraw one; the others stay correct -------------------------------------------------
    status, body = call(live, "DELETE", f"/sharings/{ids['two_way']}")
    assert status == 200 and body["status"] == "withdrawn", body
    dsns = {m.name: m.dsn for m in live.topology.machines}
    with psycopg.connect(dsns[mvs["two_way"]["machine"]]) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (mvs["two_way"]["table"],)).fetchone() \
            == (None,)
    status, body = call(live, "DELETE", "/sharings/9999")
    assert status == 404
    driver.run(RATE, 5)
    rest = {k: v for k, v in ids.items() if k != "two_way"}
    _caught_up(live, rest)
    for name in rest:
        rows, diff = _oracle_equals_mv(live, mvs[name], SHARINGS[name][0])
        assert rows > 0 and diff == 0, (name, rows, diff)


def _dashboard_draws(live: Live, cards: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is needed (scripts/install.sh installs it for tests)"
    ARTIFACTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
                 f"--user-data-dir={profile}", "--virtual-time-budget=8000",
                 "--window-size=1300,1100"]
        # the token once in the address: the page keeps it and drops it from the address bar;
        # one page load both dumps the DOM and takes the screenshot, at the end of the budget
        (ARTIFACTS / "dashboard.png").unlink(missing_ok=True)
        dom = subprocess.run([*flags, "--dump-dom", f"--screenshot={ARTIFACTS / 'dashboard.png'}",
                              f"{live.url}/dashboard?token={live.token}"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    grid = dom.split('id="cards"', 1)[1].split("Global plan", 1)[0]  # the cards, not the script
    drawn = [int(x.split('"')[0]) for x in grid.split('data-points="')[1:]]
    assert len(drawn) == cards and all(n > 0 for n in drawn), drawn
    assert Path(ARTIFACTS / "dashboard.png").stat().st_size > 10_000


@pytest.mark.slow  # an experiment (`smile bench lazy`): a minute of traffic, twice
def test_lazy_bench_does_less_work_than_pushing_every_second(live: Live) -> None:
    from smile.bench.lazy import bench_lazy

    for s in call(live, "GET", "/sharings")[1]:  # free the capacity the other test took
        if s["status"] == "admitted":
            assert call(live, "DELETE", f"/sharings/{s['id']}")[0] == 200
    report = bench_lazy(live.topology, sla_s=6.0, rate=RATE, duration_s=15.0, audit_s=2.0)
    assert report["lazy_work_s"] > 0 and report["eager_work_s"] > 0, report
    assert report["lazy_violations"] == 0 and report["eager_violations"] == 0, report
    assert report["ratio"] < 1.0, report  # fewer, larger pushes: less fixed cost
    assert report["lazy"]["pushed_vertices"] < report["eager"]["pushed_vertices"], report
    with psycopg.connect(live.topology.catalog_dsn) as cat:  # nothing left admitted
        left = cat.execute("SELECT count(*) FROM smile_catalog.sharings WHERE name LIKE 'bl%%' "
                           "AND status = 'admitted'").fetchone()
    assert left == (0,)
