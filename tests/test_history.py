"""The catalog's history is bounded: push log and audit older than a day are rolled
up by the hour, keeping every total the API and the dollars are built on."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from smile.executor.store import CatalogStore

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_n = itertools.count()


def test_compacting_keeps_the_totals_and_bounds_the_rows(cloud: CloudHandle) -> None:
    store = CatalogStore(cloud.topology.catalog_dsn)
    name = f"hist_{next(_n)}_{datetime.now(UTC).timestamp():.0f}"
    now = datetime.now(UTC).replace(minute=30, second=0, microsecond=0)
    old = sorted(now - timedelta(days=2, minutes=m) for m in range(0, 180, 2))  # 90, 3-4 hours
    recent = sorted(now - timedelta(minutes=m) for m in range(0, 20, 2))  # 10 rows
    try:
        with store.conn.transaction():
            for i, at in enumerate(old + recent):
                for machine in ("m1", "m2"):
                    store.conn.execute(
                        "INSERT INTO smile_catalog.push_log (sharing, vertex, kind, to_ts, "
                        "seconds, rows, at, machine, rows_in, bytes, cpu_seconds) VALUES "
                        "(%s, 'v', 'join', %s, %s, %s, %s, %s, %s, %s, %s)",  # CPU measured
                        (name, at, 0.25, i, at, machine, 2 * i, 10 * i,  # for half of them
                         0.1 if i % 2 else None))
                store.add_audit(at=at, sharing=name, staleness_s=float(i % 7), sla_s=5.0,
                                sla_ok=i % 7 <= 5, violations=i, resource_cost=0.1 * i,
                                penalty_cost=0.0, late_tuples=3 * i, tuples_moved=i,
                                work_s=0.5 * i, mv_ts=at)
        reborn = old[-1].replace(minute=0)  # the name taken again in the last old hour:
        store.conn.execute(  # that hour's rows belong to two lives and stay as they are
            "INSERT INTO smile_catalog.sharings (name, sql, staleness_s, penalty_per_tuple, "
            "status, reason, decision, created_at, withdrawn_at) VALUES (%s, 'SELECT 1', 1, 0, "
            "'withdrawn', '', '{}', %s, %s)", (name, reborn - timedelta(hours=5), reborn))
        kept = sum(at >= reborn for at in old)
        since = now - timedelta(days=3)
        work = store.work(name, since)
        busy, cpu = store.busy(since), store.busy(since, cpu=True)
        by_vertex = store.busy_by_vertex(since)
        last = store.last_audit(name, since)
        hours = {at.replace(minute=0) for at in old if at < reborn}

        pushed, audited = store.compact(now - timedelta(days=1))

        rolled = len(old) - kept
        assert pushed == 2 * (rolled - len(hours)) and audited == rolled - len(hours)
        assert store.work(name, since) == pytest.approx(work)
        assert store.busy(since) == pytest.approx(busy)
        assert store.busy(since, cpu=True) == pytest.approx(cpu)  # a rolled hour keeps its CPU
        assert store.busy_by_vertex(since) == pytest.approx(by_vertex)
        assert sum(by_vertex.values()) == pytest.approx(sum(busy.values())) and by_vertex
        assert store.last_audit(name, since) == last
        series = store.audit_series(name, 10_000, since)
        assert len(series) == len(hours) + kept + len(recent)
        assert [r["violations"] for r in series] == sorted(r["violations"] for r in series)
        assert store.compact(now - timedelta(days=1)) == (0, 0)  # rolled hours stay as they are
    finally:
        store.conn.execute("DELETE FROM smile_catalog.sharings WHERE name = %s", (name,))
        store.conn.execute("DELETE FROM smile_catalog.push_log WHERE sharing = %s", (name,))
        store.conn.execute("DELETE FROM smile_catalog.audit WHERE sharing = %s", (name,))
        store.close()


def test_pushes_by_vertex_counts_pushes_and_the_tuples_the_time_model_charges(
        cloud: CloudHandle) -> None:
    """What `smile bench admission` sets beside each edge's predicted pushes and tuples: per
    (machine, vertex), the pushes logged and their tuples as the time model counts them — a
    join's output plus its driving rows weighted, a DeltaToRel's delta rows read, a copy's
    rows written."""
    from smile.optimizer.plan import JOIN_READ_WEIGHT

    store = CatalogStore(cloud.topology.catalog_dsn)
    name = f"pbv_{next(_n)}_{datetime.now(UTC).timestamp():.0f}"
    since = datetime.now(UTC) - timedelta(seconds=1)
    pushes = [("j", "join_pg", 10, 100), ("j", "join_pg", 30, 300), ("r", "delta_to_rel", 7, 50),
              ("c", "copy_delta", 40, 40), ("c", "copy_delta", 0, 0)]
    try:
        for vertex, kind, rows, rows_in in pushes:
            store.log_push(name, f"{name}{vertex}@m1", kind, since, 0.01, rows, "m1", rows_in)
        got = {v: n for (m, v), n in store.pushes_by_vertex(since).items() if v.startswith(name)}
        assert got == {f"{name}j@m1": (2, pytest.approx(40 + JOIN_READ_WEIGHT * 400)),
                       f"{name}r@m1": (1, 50.0), f"{name}c@m1": (2, 40.0)}
        assert not {v for (m, v) in store.pushes_by_vertex(datetime.now(UTC) + timedelta(
            hours=1))}  # nothing after
    finally:
        store.conn.execute("DELETE FROM smile_catalog.push_log WHERE sharing = %s", (name,))
        store.close()


def test_a_shared_push_is_split_among_the_sharings_that_needed_it(cloud: CloudHandle) -> None:
    """A vertex pushed once for a group (shared pushes) is logged once, as the due sharing's,
    with every member that needed it: each member's work and dollars hold its part, the parts
    add up to the push, and rolling up an old hour keeps them."""
    from smile.experiments.dollars import measure

    store = CatalogStore(cloud.topology.catalog_dsn)
    tag = f"split_{next(_n)}_{datetime.now(UTC).timestamp():.0f}"
    a, b, c = f"{tag}_a", f"{tag}_b", f"{tag}_c"
    now = datetime.now(UTC)
    try:
        at = now - timedelta(days=2)
        for when in (at, at + timedelta(seconds=1), now):  # two in an old hour, one recent
            store.log_push(a, f"{tag}j@m1", "join_pg", when, 0.6, 300, "m1", 30, 0, 0.3,
                           shared_by=(a, b, c))  # the join, for all three
            store.log_push(b, f"{tag}r@m1", "delta_to_rel", when, 0.2, 10, "m1", 10, 0, 0.1)
        store.conn.execute("UPDATE smile_catalog.push_log SET at = to_ts WHERE sharing = ANY(%s)",
                           ([a, b],))
        since = now - timedelta(days=3)
        # a: a third of each join; b: a third of each join and all of its own DeltaToRel
        assert store.work(a, since) == (pytest.approx(3 * 0.2), 300)
        assert store.work(b, since) == (pytest.approx(3 * (0.2 + 0.2)), 330)
        assert store.work(c, since) == (pytest.approx(3 * 0.2), 300)
        total = sum(store.work(s, since)[0] for s in (a, b, c))
        assert total == pytest.approx(3 * (0.6 + 0.2))  # the parts add up to what ran

        until = now + timedelta(seconds=1)
        one = {s: measure(cloud.topology, [s], since, until) for s in (a, b, c)}
        together = measure(cloud.topology, [a, b, c], since, until)
        assert one[a].cpu == pytest.approx(one[c].cpu) and one[b].cpu > one[a].cpu > 0
        assert sum(d.cpu for d in one.values()) == pytest.approx(together.cpu)
        assert sum(d.cpu_busy or 0.0 for d in one.values()) == pytest.approx(
            together.cpu_busy or 0.0)
        assert measure(cloud.topology, [a, b], since, until).cpu == pytest.approx(
            together.cpu - one[c].cpu)
        # by spans of data: a sharing pays the pushes that advanced it inside its span,
        # whenever they were logged; one without a span pays nothing
        per_s = one[a].cpu / (3 * 0.2)
        spans = {a: (at, now), b: (at - timedelta(seconds=1), at + timedelta(seconds=1))}
        spanned = {s: measure(cloud.topology, [s], since, until, spans=spans) for s in (a, b, c)}
        assert spanned[a].cpu == pytest.approx(2 * 0.2 * per_s)  # the joins to at+1 s and now
        assert spanned[b].cpu == pytest.approx(2 * (0.2 + 0.2) * per_s)  # to at and at+1 s
        assert spanned[c].cpu == 0.0
        both = measure(cloud.topology, [a, b, c], since, until, spans=spans,
                       predicted_load={"m1": 0.5})
        assert both.cpu == pytest.approx(spanned[a].cpu + spanned[b].cpu)
        mean_span_s = ((now - at).total_seconds() + 2.0) / 2  # the model over as long
        assert both.model_cpu == pytest.approx(0.5 * mean_span_s * per_s)

        before = {s: store.work(s, since) for s in (a, b, c)}
        store.compact(now - timedelta(days=1))
        assert store.conn.execute(
            "SELECT count(*) FROM smile_catalog.push_log WHERE sharing = %s", (a,)
        ).fetchone() == (2,)  # the old hour's two joins rolled into one, the recent one kept
        assert {s: store.work(s, since) for s in (a, b, c)} == {
            s: (pytest.approx(w), n) for s, (w, n) in before.items()}
    finally:
        store.conn.execute("DELETE FROM smile_catalog.push_log WHERE sharing = ANY(%s)",
                           ([a, b, c],))
        store.close()
