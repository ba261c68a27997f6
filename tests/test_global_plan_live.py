"""The global plan, live: sharings that share vertices (Table 1's S2, S4, S5 and S15 all join
users and tweets) admitted one after the other into one D on a cloud with capturers and agents
as processes; each MV equals its query (run by PostgreSQL on copies of the live bases) after
traffic, after a plumbing re-routes a running vertex of D while traffic runs (the agents
pruning intermediate deltas all along), and after one of the sharers is withdrawn — whose
vertices only it needed are gone, the shared ones stay."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import sql

from smile.cloud.local import LocalCloud
from smile.dataset.load import load_dataset
from smile.dataset.placement import default_placement
from smile.dataset.relations import RELATIONS
from smile.dataset.sharings import table1
from smile.db import relkind
from smile.deploy import plan_store
from smile.deploy.install import MV_SCHEMA, stream_rows
from smile.deploy.machine_state import Sessions
from smile.deploy.physical import physical_plan
from smile.errors import DatasetError
from smile.executor.auditor import measure
from smile.executor.rates import RateMonitor
from smile.executor.runtime import Executor
from smile.executor.sharings import Conflict, SharingService
from smile.executor.store import CatalogStore
from smile.optimizer.admission import PlannerOptions
from smile.optimizer.plan import CopyDelta, Union, route
from smile.optimizer.recompute import PushPaths, recompute_modes, recomputes
from smile.settings import Settings
from smile.topology import resolve_topology
from smile.workload.driver import WorkloadDriver, locate_relations
from tests.fix_cloud import fresh_state_dir, keep_logs, throwaway_settings

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from smile.deploy.physical import PhysicalPlan
    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Vertex
    from smile.topology import Topology

pytestmark = pytest.mark.services
SHARERS = ("S5", "S2", "S4", "S15")
SLA_S = 6.0


class Rig:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.local: LocalCloud | None = None
        self.store = CatalogStore(topology.catalog_dsn)
        self.executor = Executor(topology, pusher="live-test")
        self.executor.start()
        self.rates = RateMonitor(topology, window_s=10, every_s=1)
        self.rates.start()
        # what these tests check is that D stays exact, not capacity: the machines may keep
        # all of their share of the box busy (max_load 1, not 0.7), so that a loaded CI box,
        # whose idle cores shrink that share, does not refuse the rig's small sharings
        self.service = SharingService(topology, self.store, self.executor, self.rates,
                                      max_load=1.0)
        self.sql = {s.name: s.sql for s in table1()}

    def close(self) -> None:
        self.rates.close()
        self.executor.close()
        self.store.close()

    def admit_exact(self, name: str, query: str, seconds: float = 4.0) -> None:
        """Submit `name` (admitted, or the test fails), run traffic, and check its MV against
        the oracle."""
        self.sql[name] = query
        done = self.service.submit(name, query, SLA_S, 0.0)
        assert done.row.status == "admitted", done.row.reason
        self.traffic(seconds)
        rows, diff = self.oracle_diff(name)
        assert rows > 0 and diff == 0, (name, rows, diff)

    def plan(self) -> GlobalPlan:
        return self.service.current()[1]

    def traffic(self, seconds: float, during: Any = None) -> None:
        """100 tweets/s for `seconds` (running `during()` meanwhile), then wait until every
        MV is past the moment the sources went quiet."""
        driver = WorkloadDriver(self.topology, seed=int(time.time()))
        runner = threading.Thread(target=driver.run, args=(100.0, seconds), daemon=True)
        runner.start()
        if during is not None:
            time.sleep(seconds / 3)
            during()
        runner.join(seconds + 60)
        quiet = time.time() + 1.0
        deadline = time.monotonic() + 120
        for name in self.plan().names():
            while True:
                st = self.executor.timestamps(name)
                if st is not None and st.mv_ts.timestamp() >= quiet:
                    break
                assert time.monotonic() < deadline, f"{name} did not catch up: {st}"
                time.sleep(0.3)

    def oracle_diff(self, name: str) -> tuple[int, int]:
        """(rows in the MV, rows differing from the sharing's query on copies of the bases)."""
        return self.oracle_diffs([name])[name]

    def oracle_diffs(self, names: Iterable[str]) -> dict[str, tuple[int, int]]:
        """`oracle_diff` of each of `names` (`smile.bench.oracle.mv_diff`'s oracle), with the
        bases copied once per MV machine for all of its MVs: the sources are quiet."""
        where = locate_relations(self.topology)
        homes: dict[str, list[str]] = {}
        for name in names:
            homes.setdefault(self.plan().sharing(name).mv.machine, []).append(name)
        out: dict[str, tuple[int, int]] = {}
        for machine, on_it in homes.items():
            scratch = f"oracle_{time.monotonic_ns()}"
            schema = sql.Identifier(scratch)
            with psycopg.connect(self.topology.machine(machine).dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema))
                try:
                    for rel in RELATIONS:
                        with psycopg.connect(self.topology.machine(where[rel]).dsn,
                                             autocommit=True) as src:
                            row = src.execute(
                                "SELECT string_agg(quote_ident(attname) || ' ' || format_type("
                                "atttypid, atttypmod), ', ' ORDER BY attnum), array_agg("
                                "attname ORDER BY attnum) FROM pg_attribute WHERE attrelid = "
                                "%s::regclass AND attnum > 0 AND NOT attisdropped",
                                (f"public.{rel}",)).fetchone()
                            assert row is not None and row[0] is not None, rel
                            target = sql.Identifier(scratch, rel)
                            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(
                                target, sql.SQL(row[0])))
                            stream_rows(src, sql.SQL("SELECT * FROM {}").format(
                                sql.Identifier("public", rel)), conn, target, list(row[1]))
                    for name in on_it:
                        conn.execute(sql.SQL("SET search_path = {}").format(schema))
                        want = Counter(conn.execute(self.sql[name].encode()).fetchall())
                        conn.execute("SET search_path = public")
                        got = Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
                            sql.Identifier(MV_SCHEMA, name))).fetchall())
                        out[name] = (sum(got.values()),
                                     sum(((got - want) + (want - got)).values()))
                finally:
                    conn.execute("SET search_path = public")
                    conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(schema))
        return out

    def intermediate_rows(self) -> dict[str, int]:
        """Rows held by each intermediate delta of D, once every reader is past them (the
        sources quiet and every MV caught up, `traffic`) and the agents' retention has had a
        round (every 5 s): none should be left."""
        phys = physical_plan(self.plan(), self.service.catalog().schemas())
        deltas = [pv for pv in phys.vertices.values() if pv.is_delta and not pv.base]
        counts: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while True:
            for pv in deltas:
                with psycopg.connect(self.topology.machine(pv.vertex.machine).dsn,
                                     autocommit=True) as conn:
                    row = conn.execute(f'SELECT count(*) FROM "{pv.table[0]}"."{pv.table[1]}"'
                                       ).fetchone()
                counts[pv.vertex.label] = int(row[0]) if row else -1
            if not any(counts.values()) or time.monotonic() > deadline:
                return counts
            time.sleep(1.0)

    def assert_exact(self, names: Iterable[str] | None = None) -> None:
        """Every MV (of `names`, or of D) equals its sharing's query."""
        diffs = self.oracle_diffs(self.plan().names() if names is None else names)
        for name, (rows, diff) in diffs.items():
            assert rows > 0 and diff == 0, (name, rows, diff)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    settings = throwaway_settings(fresh_state_dir("smile-global-"), port_offset=600)
    local = LocalCloud(settings)
    made: Rig | None = None
    try:
        assert local.up(3, daemons=True).healthy
        topology = resolve_topology(settings)
        load_dataset(settings, topology, default_placement([m.name for m in topology.machines]),
                     tweets=5000, replace=True)
        made = Rig(topology)
        made.local = local
        where = locate_relations(topology)
        for rel in RELATIONS:
            made.service.publish(where[rel], f"public.{rel}")
        yield made
    finally:
        if made is not None:
            made.close()
        keep_logs(settings.state_dir, "global-plan")
        local.down(purge=True)


def _reroute(plan: GlobalPlan, machines: list[str]) -> tuple[GlobalPlan, Vertex]:
    """D with one running vertex re-routed, and that vertex. Where two deltas hold the same
    thing on two machines, one is fed from the other (a copy plumbing); else a copy of a base
    relation's delta is fed through a new relay on a third machine, which is born at the
    deploy's t0 — so the re-routed vertex must first be pushed past t0 along its old route.
    A Union's delta is taken first where it can be: its view then becomes a table."""
    for v in sorted(plan.incoming, key=lambda v: (not isinstance(plan.incoming[v], Union), v)):
        if v.base or not v.is_delta:
            continue
        for u in sorted(plan.vertices):
            if (u.kind == v.kind and u.expr == v.expr and u.machine != v.machine
                    and u not in plan.descendants(v) | {v}
                    and route(plan.incoming[v]) != route(CopyDelta(u, v, 0.0, 0.0))):
                return plan.with_incoming([CopyDelta(u, v, plan.incoming[v].tuples_per_s,
                                                     8.0)]), v
    for v in sorted(plan.incoming):
        old = plan.incoming[v]
        if not (isinstance(old, CopyDelta) and old.src.base and len(v.expr.parts) == 1):
            continue
        for m in machines:
            relay = v.at(m)
            if m in (v.machine, old.src.machine) or relay in plan.vertices:
                continue
            part = v.expr.parts[0]
            return plan.with_incoming([
                CopyDelta(old.src, relay, old.tuples_per_s, 8.0, part.selections,
                          part.columns),
                CopyDelta(relay, v, old.tuples_per_s, 8.0)]), v
    raise AssertionError("nothing in D to re-route")


def test_shared_vertices_stay_exact_through_reroute_and_withdrawal(rig: Rig) -> None:
    # admitted one after the other into one global plan, sharing vertices
    for name in SHARERS:
        done = rig.service.submit(name, rig.sql[name], SLA_S, 0.001)
        assert done.row.status == "admitted", done.row.reason
    plan = rig.plan()
    assert set(plan.names()) == set(SHARERS)
    shared = [v for v in plan.vertices if not v.base and len(plan.shr[v]) >= 2]
    assert shared, "the four sharings share no vertex"
    separate = sum(len(plan.of_sharing(n)) for n in SHARERS)
    assert len(plan.vertices) < separate  # one table for what several need
    # sharings that share most of their vertices go along with each other's pushes; whether
    # one did within a given window depends on how their push phases fall (pushes are quick),
    # so the traffic runs until one has, or a minute has passed
    rig.traffic(12)
    for _ in range(8):
        if rig.executor.taken_along > 0:
            break
        rig.traffic(6)
    assert rig.executor.taken_along > 0
    # a vertex pushed once for the group is logged once, as its first member's, with them all
    logged = rig.store.conn.execute(
        "SELECT sharing, shared_by FROM smile_catalog.push_log WHERE shared_by && %s::text[]",
        (list(SHARERS),)).fetchall()
    assert logged and all(s == m[0] and len(m) >= 2 and set(m) <= set(SHARERS)
                          for s, m in logged), logged
    rig.assert_exact()
    # intermediate deltas are pruned once every reader is past their rows
    held = rig.intermediate_rows()
    assert held and not any(held.values()), held

    # a plumbing re-routes a running vertex while traffic runs: the vertex continues from its
    # own TS through its new source, so nothing is lost or doubled
    rerouted, dst = _reroute(plan, [m.name for m in rig.topology.machines])
    new_edge = rerouted.incoming[dst]
    reports: list[dict[str, Any]] = []

    def reroute() -> None:
        with plan_store.deploy_lock(rig.topology.catalog_dsn):
            phys = physical_plan(rerouted, rig.service.catalog().schemas())
            version = plan_store.store_version(rig.topology.catalog_dsn, phys, "test re-route")
            reports.append(rig.executor.deploy(version, phys))

    rig.traffic(9, during=reroute)
    assert reports and dst.label in reports[0]["rerouted"], reports
    if isinstance(plan.incoming[dst], Union):  # its view, off its Union, is a table now
        table = physical_plan(rerouted, rig.service.catalog().schemas()).vertices[dst].table
        with psycopg.connect(rig.topology.machine(dst.machine).dsn, autocommit=True) as conn:
            assert relkind(conn, table) == "r"
    assert route(rig.plan().incoming[dst]) == route(new_edge)
    rig.assert_exact()
    held = rig.intermediate_rows()  # the lease was released: retention goes on
    assert not any(held.values()), held

    # one sharer leaves: what only it needed goes, the rest stays exact
    before = rig.plan()
    gone_name = "S5"
    only_it = {v for v in before.vertices if before.shr.get(v) == frozenset({gone_name})}
    row = next(r for r in rig.store.sharings("admitted") if r.name == gone_name)
    assert rig.service.withdraw(row.id).status == "withdrawn"
    after = rig.plan()
    assert gone_name not in after.names() and not (only_it & set(after.vertices))
    still_shared = [v for v in shared if v in after.vertices]
    assert still_shared, "withdrawing one of four sharers dropped every shared vertex"
    tables_before = physical_plan(before, rig.service.catalog().schemas()).vertices

    def exists(v: Vertex) -> bool:
        with psycopg.connect(rig.topology.machine(v.machine).dsn, autocommit=True) as conn:
            return conn.execute("SELECT to_regclass(%s)", (
                ".".join(tables_before[v].table),)).fetchone() != (None,)

    assert not any(exists(v) for v in only_it if not v.base)
    assert all(exists(v) for v in still_shared)
    mv_machine = before.sharing(gone_name).mv.machine
    with psycopg.connect(rig.topology.machine(mv_machine).dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f'{MV_SCHEMA}."{gone_name}"',)
                            ).fetchone() == (None,)
    rig.traffic(5)
    rig.assert_exact()

    # the withdrawn name, resubmitted with another query, runs the new plan (agents follow
    # versions: none keeps running the old one)
    again = "SELECT u.uid, t.tid FROM users u, tweets t WHERE t.uid = u.uid AND t.lang = 'en'"
    rig.sql[gone_name] = again
    done = rig.service.submit(gone_name, again, SLA_S, 0.001)
    assert done.row.status == "admitted", done.row.reason
    rig.traffic(5)
    rig.assert_exact()


def test_a_single_table_sharing_is_pushed_like_the_others(rig: Rig) -> None:
    """One relation, MV beside it: its copy runs on one connection (it used to deadlock the
    agent, and every sharing of that machine with it)."""
    rig.admit_exact("single",
                    "SELECT t.tid, t.uid, lower(t.text) AS text FROM tweets t WHERE t.lang = 'en'")


def test_the_dataset_is_not_replaced_under_admitted_sharings(rig: Rig) -> None:
    """`smile data load --replace` would empty tweets under the MVs that read it: refused,
    naming them, and nothing is emptied."""
    rig.admit_exact("reader", "SELECT t.tid, t.lang FROM tweets t WHERE t.lang = 'fr'")
    before = rig.oracle_diff("reader")
    placement = default_placement([m.name for m in rig.topology.machines])
    with pytest.raises(DatasetError, match=r"tweets by .*reader.*withdraw them first"):
        load_dataset(Settings(), rig.topology, placement, tweets=10, replace=True)
    assert rig.oracle_diff("reader") == before


def test_a_sharing_identical_to_another_only_adds_a_view(rig: Rig) -> None:
    """The same query under a second name: every vertex exists already, so the new version
    adds only a view (it used to fail for want of a new vertex to take a t0 from)."""
    query = "SELECT t.tid, t.uid, lower(t.text) AS text FROM tweets t WHERE t.lang = 'es'"
    for name in ("twin_a", "twin_b"):
        rig.sql[name] = query
        done = rig.service.submit(name, query, SLA_S, 0.0)
        assert done.row.status == "admitted", done.row.reason
    assert done.row.decision["deploy"]["new_vertices"] == 0
    rig.traffic(4)
    rig.assert_exact(["twin_a", "twin_b"])


def test_separate_plans_share_nothing_but_the_bases_and_stay_exact(rig: Rig) -> None:
    """Merging off (Fig. 12's separate plans): two sharings with the same join each run their
    own vertices — every vertex of theirs but the captured bases is theirs alone — and both
    MVs equal their query; withdrawing one leaves the other's vertices and rows alone."""
    query = rig.sql["S2"]
    try:
        rig.service.set_options(PlannerOptions(plumbing=False, merge=False))
        for name in ("own_a", "own_b"):
            rig.sql[name] = query
            done = rig.service.submit(name, query, SLA_S, 0.0)
            assert done.row.status == "admitted", done.row.reason
            assert done.row.decision["deploy"]["new_vertices"] > 0
        shr = rig.plan().shr
        for name in ("own_a", "own_b"):
            mine = rig.plan().of_sharing(name)
            assert all(v.owner == name and shr[v] == {name} for v in mine if not v.expr.raw)
            assert any(not v.expr.raw for v in mine)
        rig.traffic(4)
        rig.assert_exact(["own_a", "own_b"])
        row_a = next(r for r in rig.store.sharings("admitted") if r.name == "own_a")
        rig.service.withdraw(row_a.id)
        assert not any(v.owner == "own_a" for v in rig.plan().vertices)
        rig.traffic(3)
        assert rig.oracle_diff("own_b")[1] == 0
    finally:
        rig.service.set_options(PlannerOptions())
        for r in rig.store.sharings("admitted"):
            if r.name.startswith("own_"):
                rig.service.withdraw(r.id)
        rig.sql.pop("own_a", None)
        rig.sql.pop("own_b", None)


def test_a_sharing_whose_push_always_fails_becomes_failed_and_the_others_go_on(rig: Rig
                                                                               ) -> None:
    """A predicate that divides by zero on every tweet that arrives after admission.
    Its pushes are refused by the database every time, so after a few it is `failed`, with
    the database's reason, and no longer pushed; the other sharings stay exact; withdrawing it
    frees its name (resubmitting before that is a 409), and the name works again."""
    where = locate_relations(rig.topology)
    home = rig.topology.machine(where["tweets"])
    with psycopg.connect(home.dsn) as conn:
        row = conn.execute("SELECT max(tid) FROM public.tweets").fetchone()
    assert row is not None
    bad = ("SELECT t.tid, t.uid FROM tweets t WHERE CASE WHEN t.tid <= "
           f"{row[0]} THEN t.lang = 'en' ELSE t.tid / (t.tid - t.tid) = 1 END")
    done = rig.service.submit("doomed", bad, SLA_S, 0.0)
    assert done.row.status == "admitted", done.row.reason
    driver = WorkloadDriver(rig.topology, seed=int(time.time()))
    runner = threading.Thread(target=driver.run, args=(50.0, 4.0), daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while (row := rig.store.sharing(done.row.id)) is not None and row.status != "failed":
        assert time.monotonic() < deadline, "the sharing never failed"
        time.sleep(0.5)
    runner.join(30)
    assert row is not None and "division by zero" in (row.reason or ""), row.reason
    assert "doomed" not in rig.executor.tracked  # pushed no more
    with pytest.raises(Conflict, match="withdraw it first"):
        rig.service.submit("doomed", bad, SLA_S, 0.0)
    assert rig.service.withdraw(done.row.id).status == "withdrawn"
    assert "doomed" not in rig.plan().names()
    rig.traffic(4)  # the others went on and are exact
    rig.assert_exact()
    rig.admit_exact("doomed", "SELECT t.tid, t.uid FROM tweets t WHERE t.lang = 'fr'")


def test_a_machine_down_holds_only_the_sharings_that_need_it(rig: Rig) -> None:
    """Degraded mode: one machine's agent stopped (SIGSTOP) for 8 s. The sharings
    that need that machine are not pushed and say which machine is unreachable since when;
    one that does not need it stays within its SLA; when the agent is back the others catch
    up, and every MV is exact."""
    assert rig.local is not None
    where = locate_relations(rig.topology)
    rig.admit_exact("beside_tweets", "SELECT t.tid, t.uid FROM tweets t WHERE t.lang = 'en'")
    used = {v.machine for v in rig.plan().of_sharing("beside_tweets")}
    away = next(m.name for m in rig.topology.machines if m.name not in used)
    rel = next(r for r in RELATIONS if where[r] == away)
    needs = f"needs_{away}"
    rig.admit_exact(needs, f"SELECT * FROM {rel} u", 4)
    agent = next(d for d in rig.local.status().daemons if d.name == f"agent-{away}")
    assert agent.pid is not None
    driver = WorkloadDriver(rig.topology, seed=int(time.time()))
    stop = threading.Event()  # the traffic runs while the agent is stopped
    runner = threading.Thread(target=driver.run, args=(50.0, 60.0, None, stop), daemon=True)
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        runner.start()
        time.sleep(8)  # past UNREACHABLE_S
        gone = rig.executor.unreachable(needs)
        assert list(gone) == [away], gone
        assert rig.executor.unreachable("beside_tweets") == {}
        st = rig.executor.timestamps("beside_tweets")
        assert st is not None and st.seconds <= SLA_S, st  # the others keep their SLA
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(30)
        os.kill(agent.pid, signal.SIGCONT)
    deadline = time.monotonic() + 60
    while rig.executor.unreachable(needs):
        assert time.monotonic() < deadline, "the machine never came back"
        time.sleep(0.5)
    rig.traffic(4)  # every MV, the held ones included, past the quiet moment
    rig.assert_exact()


def test_a_sharing_is_admitted_once_its_mv_is_within_its_sla(rig: Rig) -> None:
    """A new MV is filled at the deploy's t0 and is as stale as the deploy was long (26 s for
    a 4-way join at 3000 tweets/s): before it is admitted — and audited — its executor pushes
    it while it is due (`Executor.bring_in`), so the consumer's first read and the auditor's
    first snapshot find it within its SLA. An executor of its own whose scheduler never
    ticks: what pushes `born` is bring_in alone. Made due by traffic, it is brought in."""
    sla = 2.0
    query = rig.sql["S10"]
    rig.sql["born"] = query
    own = Executor(rig.topology, pusher="bring-in-test", tick_s=3600.0)
    own.start()
    service = SharingService(rig.topology, rig.store, own, rig.rates, max_load=1.0)
    phys: Any = None

    def staleness() -> float:
        with Sessions(rig.topology, "test") as sessions:
            return measure(sessions, phys, "born").seconds

    driver = WorkloadDriver(rig.topology, seed=10)
    stop = threading.Event()  # the traffic runs until the checks are done (at most 60 s)
    runner = threading.Thread(target=driver.run, args=(100.0, 60.0, None, stop), daemon=True)
    runner.start()
    try:
        time.sleep(1.0)
        done = service.submit("born", query, sla, 0.0)
        assert done.row.status == "admitted", done.row.reason
        report = done.row.decision["deploy"]
        assert report["born_s"] >= 0 and report["brought_in"] >= 0, report
        phys = physical_plan(rig.plan(), rig.service.catalog().schemas())
        first = time.monotonic()
        assert staleness() - 0.5 <= sla, report  # as a consumer reads it after the 201
        time.sleep(max(0.0, first + 2 * sla - time.monotonic()))
        assert staleness() > sla  # nothing pushed it since: its scheduler never ticks
        pushed = own.bring_in({"born"})
        assert pushed >= 1
        assert staleness() <= sla
    finally:
        stop.set()
        runner.join(60)
        for r in rig.store.sharings("admitted"):
            if r.name == "born":
                service.withdraw(r.id)
        own.close()
        rig.sql.pop("born", None)


def test_sharings_a_stopped_api_left_installing_are_settled_at_start(rig: Rig) -> None:
    """An API stopped during a deploy left its sharing `installing` for good: neither used nor
    withdrawable. At start (`smile serve`), one the active version of D has is admitted — its
    deploy was done, only the status write was lost — and one it has not is rejected, saying
    why; both can then be withdrawn or submitted again."""
    query = "SELECT t.tid, t.lang FROM tweets t WHERE t.lang = 'pt'"
    rig.admit_exact("halfway", query)
    row = next(r for r in rig.store.sharings("admitted") if r.name == "halfway")
    rig.store.set_status(row.id, "installing")  # the process died before writing 'admitted'
    ghost = rig.store.add_sharing("ghost", query, SLA_S, 0.0, "installing",
                                  "admitted with DPD", {})  # its version never activated
    assert rig.service.withdraw(row.id).status == "installing"  # stuck, as it was
    settled = {r.name: r for r in rig.service.settle_interrupted()}
    assert set(settled) == {"halfway", "ghost"}
    assert settled["halfway"].status == "admitted"
    assert settled["ghost"].status == "rejected"
    assert "submit it again" in (settled["ghost"].reason or "")
    assert rig.service.settle_interrupted() == []
    assert rig.service.withdraw(row.id).status == "withdrawn"
    assert rig.service.get(ghost).status == "rejected"


def test_pushes_forced_to_recompute_then_to_apply_deltas_stay_exact(rig: Rig) -> None:
    """Pushes by recomputation among sharings that share D (deltas others read are still
    advanced, `optimizer.recompute`), then by deltas again: each MV equal to its query after
    traffic, and the push log counts each path's pushes."""
    query = ("SELECT t.tid, t.uid, u.screen_name FROM tweets t JOIN users u ON t.uid = u.uid "
             "WHERE t.lang = 'en'")
    before = rig.executor.paths.force
    rig.executor.paths.force = "recompute"
    try:
        rig.admit_exact("by_recompute", query)
        # a push that chose to recompute and met the deploy's lease sent the next ones down
        # the incremental path for a while (`executor.paths.BACK_OFF_S`): that while is over
        rig.executor.paths.incremental_until = float("-inf")
        rig.traffic(4.0)
        rig.assert_exact()
        mv = rig.plan().sharing("by_recompute").mv.label
        counts = rig.store.pushes_by_path("by_recompute", mv)
        assert counts["recompute"] > 0, counts
        rig.executor.paths.force = "incremental"
        rig.traffic(4.0)
        rig.assert_exact()
        after = rig.store.pushes_by_path("by_recompute", mv)
        assert after["incremental"] > counts["incremental"], (counts, after)
    finally:
        rig.executor.paths.force = before


def test_pushes_down_random_paths_across_a_deploy_stay_exact(rig: Rig) -> None:
    """Each push takes a path drawn at random — every relation vertex of it recomputed or
    kept by its delta, the deltas skipped where the rule lets them — while a new sharing
    that reads deltas those pushes skip is deployed: it is filled past every skipped
    interval, and every MV equals its query after traffic."""
    rng = random.Random(7)
    taken: list[str] = []

    def choose(phys: PhysicalPlan, targets: Iterable[Vertex], x: float,
               deploying: bool = False, **_: object) -> PushPaths:
        todo = phys.plan.advanced_by(list(targets))
        candidates = sorted(v for v in todo if v in recomputes(phys.plan))
        chosen = {v for v in candidates if rng.random() < 0.5}
        if deploying or not chosen:
            taken.append("incremental")
            return PushPaths(0.0, None, "incremental", dict.fromkeys(todo, "incremental"))
        taken.append("recompute" if len(chosen) == len(candidates) else "mixed")
        return PushPaths(0.0, 0.0, taken[-1], recompute_modes(phys.plan, todo, chosen))

    chooser = rig.executor.paths
    chooser.choose = choose  # type: ignore[method-assign]
    query = "SELECT u.uid, t.tid FROM users u, tweets t WHERE t.uid = u.uid AND t.lang = 'en'"
    rig.sql["late_reader"] = query
    decided: list[str] = []
    try:
        rig.traffic(4)
        rig.traffic(6, during=lambda: decided.append(
            rig.service.submit("late_reader", query, SLA_S, 0.0).row.status))
        rig.traffic(4)
    finally:
        del chooser.choose
    assert decided == ["admitted"], decided
    assert {"recompute", "mixed"} & set(taken), taken
    rig.assert_exact()
