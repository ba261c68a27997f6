"""What a consumer can rely on, against a live SMILE (2 machines, capturers, agents, broker,
`smile serve`): a dry run of a submission changes nothing — the catalog, D and every machine
compared before and after — and agrees with the real submission that follows; the staleness
of its MVs readable in SQL with its own DSN (`smile_mv.freshness`), its own sharings only;
a breach announced (NOTIFY, signed webhook, /metrics, /alerts) before the auditor records it,
and cleared after; the SLA report equal to the auditor's snapshots, through the roll-up."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
import pytest

from smile.cloud.local import LocalCloud
from smile.executor import sla_report
from smile.executor.store import CatalogStore
from smile.workload.driver import WorkloadDriver, locate_relations
from tests.fix_api import Live, live_smile

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.services]

JOIN = ("SELECT u.uid, u.screen_name, t.tid FROM users u, tweets t WHERE u.uid = t.uid", 10.0)
SHARES = ("SELECT u.uid, t.tid, t.created_at FROM users u, tweets t WHERE u.uid = t.uid", 30.0)
SOCNET = ("SELECT s.uid, s.uid2 FROM socnet s", 15.0)
PUBLISHED = ("users", "tweets", "socnet")
SYSTEM = ("pg_catalog", "information_schema", "pg_toast")


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    with live_smile("consumer", 900, 2, 2000) as handle:
        where = locate_relations(handle.topology)
        for rel in PUBLISHED:
            status, body = handle.call("POST", "/relations",
                                       {"machine": where[rel], "table": f"public.{rel}"})
            assert status == 201, body
        yield handle


@pytest.fixture(scope="module")
def tokens(live: Live) -> dict[str, str]:
    out = {}
    for name in ("app1", "app2"):
        status, body = live.call("POST", "/consumers", {"name": name})
        assert status == 201, body
        out[name] = body["token"]
    return out


def _machines(live: Live) -> dict[str, Any]:
    """Every machine's objects outside the system schemas, the rows of each table (the
    vertex TS table: its vertices; capture moves their TS), roles, grants, publications,
    slots."""
    out: dict[str, Any] = {}
    for m in live.topology.machines:
        with psycopg.connect(m.dsn, autocommit=True) as conn:
            rels = conn.execute(
                "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname <> ALL(%s) AND n.nspname NOT LIKE "
                "'pg_temp%%' ORDER BY 1, 2", (list(SYSTEM),)).fetchall()
            counts = {}
            for schema, rel, kind in rels:
                # the TS table and `_smile.alive` are the operators' bookkeeping: a push of an
                # admitted sharing moves a TS, and its first advance on a machine settles alive
                if kind in ("r", "v") and (schema, rel) not in (("_smile", "vertex_ts"),
                                                                 ("_smile", "alive")):
                    q = psycopg.sql.SQL("SELECT count(*) FROM {}").format(
                        psycopg.sql.Identifier(schema, rel))
                    counts[f"{schema}.{rel}"] = conn.execute(q).fetchone()
            out[m.name] = {
                "relations": rels, "counts": counts,
                "vertices": conn.execute(
                    "SELECT vertex FROM _smile.vertex_ts ORDER BY 1").fetchall(),
                "roles": conn.execute("SELECT rolname, rolcanlogin FROM pg_roles "
                                      "ORDER BY 1").fetchall(),
                "grants": conn.execute(
                    "SELECT grantee, table_schema, table_name, privilege_type FROM "
                    "information_schema.role_table_grants ORDER BY 1, 2, 3, 4").fetchall(),
                "publications": conn.execute("SELECT pubname FROM pg_publication "
                                             "ORDER BY 1").fetchall(),
                "slots": conn.execute("SELECT slot_name FROM pg_replication_slots "
                                      "ORDER BY 1").fetchall()}
    return out


def _state(live: Live) -> dict[str, Any]:
    """The catalog (all but the auditor's and push log's rows, which time moves), D, and
    every machine."""
    with psycopg.connect(live.topology.catalog_dsn, autocommit=True) as cat:
        catalog = {t: cat.execute(f"SELECT * FROM smile_catalog.{t} ORDER BY 1").fetchall()
                   for t in ("sharings", "plan_versions", "vertex_born", "options",
                             "relations", "consumers")}
    return {"catalog": catalog, "plan": live.call("GET", "/plan")[1],
            "machines": _machines(live)}


def _dry_then_real(live: Live, token: str, body: dict[str, Any]) -> tuple[Any, int, Any]:
    """(the dry run's answer, the real submission's status and answer); asserts the dry run
    changed nothing."""
    before = _state(live)
    status, dry = live.call("POST", "/sharings?dry_run=true", body, token=token)
    assert status == 200 and dry["dry_run"] is True, dry
    after = _state(live)
    for part in ("catalog", "plan", "machines"):
        changed = _changed(before[part], after[part])
        assert after[part] == before[part], f"the dry run changed the {part}: {changed}"
    status, real = live.call("POST", "/sharings", body, token=token)
    return dry, status, real


def _changed(before: Any, after: Any) -> Any:
    """What differs between two states: per key of nested dicts, the keys whose values
    differ (down to the leaves), else the two values."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: _changed(before.get(k), after.get(k))
                for k in sorted(set(before) | set(after), key=str)
                if before.get(k) != after.get(k)}
    return {"before": before, "after": after}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=0.25, abs_tol=0.05)


def test_a_dry_run_changes_nothing_and_agrees_with_the_submission(
        live: Live, tokens: dict[str, str]) -> None:
    for name, (query, sla) in (("joined", JOIN), ("joined_too", SHARES)):
        body = {"name": name, "sql": query, "staleness_s": sla, "penalty_per_tuple": 0.001}
        dry, status, real = _dry_then_real(live, tokens["app1"], body)
        assert status == 201 and dry["status"] == real["status"] == "admitted", (dry, real)
        assert dry["plan"] == real["plan"], "the dry run planned another plan"
        assert dry["algorithm"] == real["algorithm"]
        assert dry["plan"]["mv"]["machine"] == real["mv"]["machine"]
        assert _close(dry["cp_s"], real["cp_s"]) and _close(dry["period_s"], real["period_s"])
        assert _close(dry["cost_per_s"], real["cost_per_s"])
        assert sum(m["added"] for m in dry["machines"].values()) > 0
        shared = [v for v in dry["vertices"] if v["shared_with"]]
        if name == "joined_too":  # it reads what `joined` already computes
            assert shared and all(v["shared_with"] == ["joined"] for v in shared), dry
        else:
            assert not shared, dry
    # `smile plan --live`: the same dry run from the command line
    before = _state(live)
    cli = subprocess.run(
        [sys.executable, "-m", "smile.cli.main", "plan", "--live", "--api", live.url,
         f"--token={tokens['app1']}", "--name", "cli_probe", "--sql", SOCNET[0],
         "--staleness", "15", "--json"], env=live.env, capture_output=True, text=True,
        timeout=120, check=False)
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["status"] == "admitted"
    assert _state(live)["catalog"] == before["catalog"]
    cli = subprocess.run(
        [sys.executable, "-m", "smile.cli.main", "plan", "--live", "--api",
         "http://127.0.0.1:9", "--token", "x", "--sql", "SELECT 1", "--staleness", "5"],
        env=live.env, capture_output=True, text=True, timeout=60, check=False)
    assert cli.returncode == 2 and "cannot reach the API" in cli.stderr, cli.stderr
    # one D cannot keep: rejected alike, with the reason
    body = {"name": "too_fast", "sql": JOIN[0], "staleness_s": 0.001}
    dry, status, real = _dry_then_real(live, tokens["app1"], body)
    assert dry["status"] == "rejected" and status == 422 and real["status"] == "rejected"
    assert dry["reason"].split(":")[0] == real["reason"].split(":")[0], (dry, real)
    # bad input: the same 4xx as a submission
    status, out = live.call("POST", "/sharings?dry_run=true",
                            {"name": "bad", "sql": "SELEC 1", "staleness_s": 5},
                            token=tokens["app1"])
    assert status == 422 and "syntax" in out["detail"].lower(), out
    status, out = live.call("POST", "/sharings?dry_run=true",
                            {"name": "joined", "sql": JOIN[0], "staleness_s": 5},
                            token=tokens["app1"])
    assert status == 409, out


def _sharing(live: Live, token: str, name: str) -> dict[str, Any]:
    status, rows = live.call("GET", "/sharings", token=token)
    assert status == 200
    return next(r for r in rows if r["name"] == name)


def test_staleness_in_sql_with_the_consumers_dsn(live: Live, tokens: dict[str, str]) -> None:
    status, other = live.call("POST", "/sharings", {"name": "friends", "sql": SOCNET[0],
                                                    "staleness_s": SOCNET[1]},
                              token=tokens["app2"])
    assert status == 201, other
    mine = _sharing(live, tokens["app1"], "joined")
    assert mine["status"] == "admitted"
    time.sleep(2)
    for token, names in ((tokens["app1"], {"joined", "joined_too"}),
                         (tokens["app2"], {"friends"})):
        for row in live.call("GET", "/sharings", token=token)[1]:
            if row["status"] != "admitted":
                continue
            with psycopg.connect(row["mv"]["dsn"], autocommit=True) as conn:
                got = conn.execute('SELECT name, ts, staleness_s, sla_s, "group" '
                                   "FROM smile_mv.freshness ORDER BY 1").fetchall()
                seen = {r[0] for r in got}
                assert seen and seen <= names, (row["name"], got)  # only its own
                assert row["name"] in seen
                for name, ts, staleness, sla, group in got:
                    assert ts is not None and 0 <= staleness < 3 * sla and group is None
                    if name == row["name"]:
                        assert sla == row["sla_s"]
                with conn.transaction():  # the view and the MV agree within a snapshot
                    ts = conn.execute("SELECT ts FROM smile_mv.freshness WHERE name = %s",
                                      (row["name"],)).fetchone()
                    assert ts is not None
    # a withdrawn sharing leaves the view
    sid = _sharing(live, tokens["app1"], "joined_too")["id"]
    dsn = _sharing(live, tokens["app1"], "joined")["mv"]["dsn"]
    assert live.call("DELETE", f"/sharings/{sid}", token=tokens["app1"])[0] == 200
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM smile_mv.freshness")}
    assert names == {"joined"}, names


SECRET = "app1-webhook-secret-0123456789"


class _Hooks(http.server.BaseHTTPRequestHandler):
    """A consumer's webhook endpoint: records each call with its arrival time and whether its
    signature checks out."""

    got: ClassVar[list[tuple[float, dict[str, Any], bool]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        stamp = self.headers["X-Smile-Timestamp"]
        want = "sha256=" + hmac.new(SECRET.encode(), stamp.encode() + b"." + body,
                                    hashlib.sha256).hexdigest()
        ok = hmac.compare_digest(want, self.headers["X-Smile-Signature"])
        _Hooks.got.append((time.time(), json.loads(body), ok))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def _listen(dsn: str, heard: list[tuple[float, dict[str, Any]]], stop: threading.Event) -> None:
    """LISTEN smile_sla with the consumer's own DSN until `stop`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN smile_sla")
        while not stop.is_set():
            for n in conn.notifies(timeout=0.5):
                heard.append((time.time(), json.loads(n.payload)))


def _first_violation(live: Live, name: str, after: datetime) -> datetime | None:
    with psycopg.connect(live.topology.catalog_dsn, autocommit=True) as cat:
        row = cat.execute("SELECT min(at) FROM smile_catalog.audit WHERE sharing = %s AND "
                          "NOT sla_ok AND at > %s", (name, after)).fetchone()
    return row[0] if row else None


def _agent_pid(live: Live, machine: str) -> int:
    for d in LocalCloud(live.settings).status().daemons:
        if d.name == f"agent-{machine}" and d.pid is not None:
            return d.pid
    raise AssertionError(f"no agent of {machine} running")


def _when(events: list[tuple[float, dict[str, Any]]], name: str, state: str) -> float | None:
    return next((t for t, e in events if e["sharing"] == name and e["state"] == state), None)


def test_a_breach_is_announced_before_it_happens(live: Live, tokens: dict[str, str]) -> None:
    """SIGSTOP of the agent of the MV's machine: NOTIFY (heard with the consumer's DSN) and
    the signed webhook arrive before the first violation the auditor records; SIGCONT
    clears them."""
    row = _sharing(live, tokens["app1"], "joined")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    status, out = live.call("PUT", f"/sharings/{row['id']}/webhook",
                            {"url": url, "secret": SECRET}, token=tokens["app1"])
    assert status == 200 and out["url"] == url, out
    assert live.call("GET", f"/sharings/{row['id']}/webhook",
                     token=tokens["app2"])[0] == 404  # not app2's
    status, _ = live.call("PUT", f"/sharings/{row['id']}/webhook",
                          {"url": "ftp://x/y", "secret": SECRET}, token=tokens["app1"])
    assert status == 422
    heard: list[tuple[float, dict[str, Any]]] = []
    stop = threading.Event()
    listener = threading.Thread(target=_listen, args=(row["mv"]["dsn"], heard, stop))
    listener.start()
    driver = WorkloadDriver(live.topology)
    traffic = threading.Thread(target=driver.run, args=(20.0, 300.0, None, stop), daemon=True)
    traffic.start()
    pid = _agent_pid(live, row["mv"]["machine"])
    try:
        time.sleep(8 + random.random() * row["sla_s"])  # anywhere in its push cycle
        stopped = datetime.now(UTC)
        os.kill(pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 3 * row["sla_s"] + 20
            violation = None
            while violation is None and time.monotonic() < deadline:
                time.sleep(0.5)
                violation = _first_violation(live, "joined", stopped)
            metrics = live.call("GET", "/metrics")[1]
            active = live.call("GET", "/alerts", token=tokens["app1"])[1]["active"]
            others = live.call("GET", "/alerts", token=tokens["app2"])[1]["active"]
        finally:
            os.kill(pid, signal.SIGCONT)
        assert violation is not None, "the auditor recorded no violation"
        notified = _when(heard, "joined", "raised")
        hooked = _when([(t, e) for t, e, _ in _Hooks.got], "joined", "raised")
        assert notified is not None and hooked is not None, (heard, _Hooks.got)
        lead_notify, lead_hook = violation.timestamp() - notified, violation.timestamp() - hooked
        raised = next(e for _, e in heard if e["sharing"] == "joined")
        print(f"\nSIGSTOP at {stopped:%H:%M:%S.%f}: NOTIFY {lead_notify:.1f} s and webhook "
              f"{lead_hook:.1f} s before the auditor's first violation ({violation:%H:%M:%S}); "
              f"predicted breach in {raised['breach_in_s']} s: {raised['reason']}")
        assert lead_notify > 0 and lead_hook > 0
        assert all(ok for _, _, ok in _Hooks.got), "a webhook call was not signed right"
        assert 'smile_sla_breach_predicted{sharing="joined"} 1' in metrics
        assert [a["sharing"] for a in active if a["sharing"] == "joined"] == ["joined"]
        assert not [a for a in others if a["sharing"] == "joined"]
        deadline = time.monotonic() + 60  # the risk passes once the agent is back
        while _when(heard, "joined", "cleared") is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _when(heard, "joined", "cleared") is not None, heard
        time.sleep(1)
        assert _when([(t, e) for t, e, _ in _Hooks.got], "joined", "cleared") is not None
        assert 'smile_sla_breach_predicted{sharing="joined"} 0' in \
            live.call("GET", "/metrics")[1]
    finally:
        stop.set()
        listener.join(5)
        server.shutdown()
        traffic.join(30)


def _synthetic_life(cat: psycopg.Connection[Any], name: str, sla: float) -> tuple[int, Any, Any]:
    """A withdrawn sharing that lived from 30 h to 20 h ago, audited every 30 s: staleness
    drawn around the SLA, running totals as the auditor keeps them. (its id, created,
    withdrawn)"""
    rng = random.Random(7)
    row = cat.execute(
        "INSERT INTO smile_catalog.sharings (name, sql, staleness_s, penalty_per_tuple, "
        "status, reason, decision, created_at, withdrawn_at) VALUES (%s, 'SELECT 1', %s, "
        "0.01, 'withdrawn', 'probe', '{}', now() - interval '30 hours', "
        "now() - interval '20 hours') RETURNING id, created_at, withdrawn_at",
        (name, sla)).fetchone()
    assert row is not None
    sid, created, withdrawn = row
    violations, late, at = 0, 0, created + timedelta(seconds=1)
    rows = []
    while at < withdrawn:
        staleness = rng.uniform(0, 1.3 * sla)
        violations += staleness > sla
        late += rng.randrange(0, 5) if staleness > sla else 0
        cost = 1e-5 * (at - created).total_seconds()
        rows.append((at, name, staleness, sla, staleness <= sla, violations, cost,
                     late * 0.01, late, 0, 0.0))
        at += timedelta(seconds=30)
    with cat.cursor() as cur:
        cur.executemany(
            "INSERT INTO smile_catalog.audit (at, sharing, staleness_s, sla_s, sla_ok, "
            "violations, resource_cost, penalty_cost, late_tuples, tuples_moved, work_s) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
    return sid, created, withdrawn


def _from_snapshots(cat: psycopg.Connection[Any], name: str, lo: Any, hi: Any) -> dict[str, Any]:
    """The report's figures computed by PostgreSQL from the auditor's snapshots in [lo, hi)."""
    row = cat.execute(
        "SELECT count(*), avg(sla_ok::int), percentile_cont(0.5) WITHIN GROUP (ORDER BY "
        "staleness_s), percentile_cont(0.95) WITHIN GROUP (ORDER BY staleness_s), "
        "percentile_cont(0.99) WITHIN GROUP (ORDER BY staleness_s), max(staleness_s), "
        "count(*) FILTER (WHERE NOT sla_ok) FROM smile_catalog.audit WHERE sharing = %s "
        "AND at >= %s AND at < %s", (name, lo, hi)).fetchone()
    last = cat.execute("SELECT late_tuples, resource_cost, penalty_cost FROM "
                       "smile_catalog.audit WHERE sharing = %s AND at < %s ORDER BY at DESC "
                       "LIMIT 1", (name, hi)).fetchone()
    first = cat.execute("SELECT late_tuples, resource_cost, penalty_cost FROM "
                        "smile_catalog.audit WHERE sharing = %s AND at < %s ORDER BY at DESC "
                        "LIMIT 1", (name, lo)).fetchone() or (0, 0.0, 0.0)
    assert row is not None and last is not None
    return {"snapshots": row[0], "within_sla": float(row[1]),
            "staleness_s": {"p50": row[2], "p95": row[3], "p99": row[4], "max": row[5]},
            "violations": row[6], "late_tuples": last[0] - first[0],
            "resource_cost": last[1] - first[1], "penalty_cost": last[2] - first[2]}


def _agrees(report: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("snapshots", "violations", "late_tuples"):
        assert report[key] == want[key], (key, report[key], want[key])
    for key in ("within_sla", "resource_cost", "penalty_cost"):
        assert math.isclose(report[key], want[key], rel_tol=1e-6, abs_tol=1e-6), key
    for q, v in want["staleness_s"].items():
        assert math.isclose(report["staleness_s"][q], v, rel_tol=1e-6), (q, report, want)


def test_the_sla_report_agrees_with_the_snapshots_through_the_roll_up(live: Live) -> None:
    with psycopg.connect(live.topology.catalog_dsn, autocommit=True) as cat:
        sid, created, withdrawn = _synthetic_life(cat, "report_probe", 10.0)
        status, before = live.call("GET", f"/sharings/{sid}/report")
        assert status == 200, before
        _agrees(before, _from_snapshots(cat, "report_probe", created, withdrawn))
        assert len(before["hours"]) >= 10
        for hour in before["hours"]:
            lo, hi = datetime.fromisoformat(hour["from"]), datetime.fromisoformat(hour["to"])
            _agrees(hour, _from_snapshots(cat, "report_probe", lo, hi))
        # a span inside the life, cutting hours
        lo, hi = created + timedelta(minutes=95), created + timedelta(minutes=200)
        status, part = live.call("GET", f"/sharings/{sid}/report?from={_q(lo)}&to={_q(hi)}")
        assert status == 200, part
        _agrees(part, _from_snapshots(cat, "report_probe", lo, hi))
        # the history rolled up as the auditor does it: the same report
        store = CatalogStore(live.topology.catalog_dsn)
        try:
            cut = (datetime.now(UTC) - timedelta(hours=24)).replace(minute=0, second=0,
                                                                    microsecond=0)
            sla_report.keep_hours(store, cut)
            _, thinned = store.compact(cut)
        finally:
            store.close()
        assert thinned > 500
        status, after = live.call("GET", f"/sharings/{sid}/report")
        assert status == 200, after
        assert any(h["rolled_up"] for h in after["hours"])
        for a, b in zip([before, *before["hours"]], [after, *after["hours"]], strict=True):
            assert _figures(a) == _figures(b)
    assert live.call("GET", f"/sharings/{sid}/report?from={_q(hi)}&to={_q(lo)}")[0] == 400
    assert live.call("GET", f"/sharings/{sid}/report?from=yesterday")[0] == 422


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in ("hours", "rolled_up")}


def _q(t: datetime) -> str:
    return t.isoformat().replace("+", "%2B")
