"""Pushes by recomputation (`optimizer.recompute`, `operators/recompute.py`) on real machines
with real capture, against the oracle: random INSERT/UPDATE/DELETE, and pushes forced
incremental, forced recompute, mixed and chosen by the time model, interleaved at random;
after every push the MV equals the sharing's query run by PostgreSQL over the bases as of TS(MV) —
for a 3-way join with selections, a one-table projection, an aggregate with min and max over
a join (recomputed from the bases) and a LEFT JOIN. Also: a skip refuses while a reader is
behind, and the choice follows the lines (no ratio constant)."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.costmodel.time_model import Line, TimeModel
from smile.deploy import commands
from smile.deploy.advance import advance_vertex, mv_ts, push_plan
from smile.deploy.install import install_plan
from smile.deploy.physical import physical_plan
from smile.deploy.recompute import recompute_stale
from smile.deploy.unlogged import keep_logged, may_be_unlogged, persistence, relog_deltas
from smile.errors import AgentError, SkipRefused, StaleRelation
from smile.executor.paths import PathChooser
from smile.operators import retention, vertex_ts
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.plan import CopyDelta, DeltaToRel, Join
from smile.optimizer.recompute import (
    lost_below,
    push_paths,
    push_readers,
    push_waits,
    recompute_modes,
    recomputes,
    recoverable,
    relation_readers,
    update_rates,
    waits_for,
)
from smile.optimizer.sharing import Sharing
from tests.capture_helpers import wait_caught_up
from tests.test_plans_oracle import (
    COLS,
    HOME,
    Installed,
    _apply,
    _captured,
    _make_relations,
    _mv,
    _oracle,
    _schemas,
    _watermark,
    dml,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.optimizer.global_plan import GlobalPlan
    from smile.optimizer.plan import Vertex
    from smile.optimizer.recompute import Forced
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services
_n = itertools.count()

SHAPES = {
    "three_way": ("SELECT a.k, lower(b.w) AS lw, c.z FROM {ra} a, {rb} b, {rc} c "
                  "WHERE a.k = b.k AND b.k = c.k AND a.v <> 'x' AND c.z IS NOT NULL",
                  ["ra", "rb", "rc"]),
    "single_table": ("SELECT a.k, upper(a.v) AS uv FROM {ra} a WHERE a.v <> 'x'", ["ra"]),
    "extremes": ("SELECT a.v, count(*) AS n, min(b.w) AS lo, max(b.k) AS hi "
                 "FROM {ra} a JOIN {rb} b ON a.k = b.k GROUP BY a.v", ["ra", "rb"]),
    "left_join": ("SELECT a.k, a.v, b.w FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k",
                  ["ra", "rb"]),
}


def _catalog(machines: Any, names: dict[str, str], rels: list[str]) -> CatalogSnapshot:
    return CatalogSnapshot(
        tuple(Machine(m.name) for m in machines),
        tuple(RelationStats(names[r], machines[HOME[r]].name, 100, 10,
                            (ColumnStats(COLS[r][0], "integer", 5, 0.1, 4),
                             ColumnStats(COLS[r][1], "text", 5, 0.1, 4))) for r in rels))


@pytest.fixture(params=sorted(SHAPES))
def installed(request: pytest.FixtureRequest, cloud: CloudHandle) -> Iterator[Installed]:
    template, rels = SHAPES[request.param]
    n = next(_n)
    names = {r: f"rc{n}_{r}" for r in ("ra", "rb", "rc")}
    machines = cloud.topology.machines
    _make_relations(machines, names, rels)
    decision = plan_sharing(_catalog(machines, names, rels),
                            Sharing(f"recompute_{request.param}_{n}",
                                    template.format(**names), 60, 0.0))
    assert decision.admitted, decision.reason
    phys = physical_plan(decision.global_plan(), _schemas(names, rels))
    with _captured(cloud, names, rels) as conns:
        install_plan(conns, phys)
        yield Installed(cloud, names, phys, conns, template.format(**names))


def _push(inst: Installed, t: Any, path: str, mask: int = 0) -> None:
    """Push the plan to `t` by `path`: forced, as the executor's chooser chooses (the
    relations' sizes read, the pending rows of the base deltas counted), or (`mixed`)
    recomputing the relation vertices `mask` picks and keeping the others by their deltas."""
    mv = inst.phys.plan.sharings[0].mv
    stale = _stale(inst)
    if path == "mixed":
        todo = inst.phys.plan.advanced_by([mv])
        candidates = sorted(v for v in todo if v in recomputes(inst.phys.plan))
        chosen = [v for i, v in enumerate(candidates) if mask >> i & 1]
        push_plan(inst.conns, inst.phys, t,
                  modes=recompute_modes(inst.phys.plan, todo, chosen, stale))
        return
    since = mv_ts(inst.conns, inst.phys)
    x = max(0.0, (t - since).total_seconds())
    if path == "chosen":  # as the executor chooses: sizes read, pending rows counted
        chooser = PathChooser(inst.handle.topology, TimeModel)
        try:
            bases = set(update_rates(inst.phys.plan, [mv]))
            assert bases and all(s.base and s.is_delta for s in bases), bases
            paths = chooser.choose(inst.phys, [mv], x, since=since, until=max(since, t))
            counted = chooser.pending(inst.phys, [mv], since, max(since, t))
            assert counted is not None and set(counted) == bases, counted
        finally:
            chooser.close()
    else:
        force: Forced = path  # type: ignore[assignment]
        paths = push_paths(inst.phys.plan, [mv], TimeModel(), x, lambda v: 5.0, force, stale)
    push_plan(inst.conns, inst.phys, t, modes=paths.modes)


def _changed(inst: Installed, *ops: tuple[Any, ...]) -> Any:
    """Apply `ops`, wait for capture on every machine: the watermark they reach."""
    for op in ops:
        _apply(inst, op)
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    return _watermark(inst)


def _unlogged(inst: Installed, machine: str) -> set[Vertex]:
    """The plan's vertices on `machine` kept in UNLOGGED tables."""
    return {v for v, pv in inst.phys.vertices.items() if v.machine == machine
            and persistence(inst.conns[machine], pv.table) == "u"}


def _stale(inst: Installed) -> set[Vertex]:
    """The plan's vertices stale on their machines: relations left so or emptied by a crash,
    deltas a crash emptied."""
    return {v for v, pv in inst.phys.vertices.items() if not v.base
            and vertex_ts.is_stale(inst.conns[v.machine], pv.ts_key)}


rounds_st = st.lists(st.tuples(st.lists(dml, max_size=6), st.floats(0, 1),
                               st.sampled_from(["incremental", "recompute", "chosen", "mixed"]),
                               st.integers(0, 255)),
                     min_size=2, max_size=5)


@settings(max_examples=4, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rounds=rounds_st)
def test_mv_equals_the_query_whichever_path_each_push_takes(installed: Installed,
                                                           rounds: Any) -> None:
    inst = installed
    mv = inst.phys.plan.sharings[0].mv
    assert mv in recomputes(inst.phys.plan)
    for ops, where, path, mask in rounds:
        for op in ops:
            _apply(inst, op)
        for m in inst.handle.topology.machines:
            wait_caught_up(m.dsn)
        lo, hi = mv_ts(inst.conns, inst.phys), _watermark(inst)
        t = lo + (hi - lo) * where
        _push(inst, t, path, mask)
        _push(inst, t, path, mask)  # a repeated push changes nothing
        _push(inst, lo, "recompute")  # nor does an older one
        at = mv_ts(inst.conns, inst.phys)
        assert at == max(lo, t)
        assert _mv(inst) == _oracle(inst, at), path


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_skip_refuses_while_a_reader_is_behind(installed: Installed) -> None:
    """A delta is skipped only once every reader is at `t`: before the MV is recomputed, the
    skip of the MV's delta fails and moves nothing."""
    inst = installed
    _apply(inst, ("ins", "ra", 1, "q"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    t = _watermark(inst)
    mv = inst.phys.plan.sharings[0].mv
    delta = inst.phys.plan.incoming[mv].sources[0]
    before = vertex_ts.read(inst.conns[delta.machine], inst.phys.vertices[delta].ts_key)
    with pytest.raises(SkipRefused, match="reader"):
        advance_vertex(inst.conns, inst.phys, delta, t, mode="skip")
    assert vertex_ts.read(inst.conns[delta.machine], inst.phys.vertices[delta].ts_key) == before
    _push(inst, t, "recompute")
    assert _mv(inst) == _oracle(inst, t)


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_relation_left_stale_is_refused_until_recomputed(installed: Installed) -> None:
    """The MV recomputed from the copies and the base, the join step below it left stale:
    the MV equals its query, the stale relation is emptied and refused to a join that reads
    it and to its own DeltaToRel, a repeated mark changes nothing; the next push, forced
    incremental, recomputes it first (never advances it by its delta), and the MV is exact
    again — as after a restart of the executor, which reads the mark from the machine."""
    inst = installed
    plan = inst.phys.plan
    mv = plan.sharings[0].mv
    todo = plan.advanced_by([mv])
    rec = recomputes(plan)
    modes = recompute_modes(plan, todo, [v for v in todo if v in rec])
    (step,) = [v for v, m in modes.items() if m == "stale"]
    assert step not in rec[mv].inputs and modes[mv] == "recompute"
    pv = inst.phys.vertices[step]
    conn = inst.conns[step.machine]
    t = _changed(inst, *(("ins", short, k, "s")
                         for short, k in (("ra", 1), ("rb", 1), ("rc", 1), ("ra", 2))))
    push_plan(inst.conns, inst.phys, t, modes=modes)
    assert _mv(inst) == _oracle(inst, t)
    assert vertex_ts.is_stale(conn, pv.ts_key) and vertex_ts.read(conn, pv.ts_key) == t
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(*pv.table))).fetchone() == (0,)
    reader = next(e for e in plan.edges if isinstance(e, Join) and e.other == step)
    t2 = _changed(inst, ("upd_val", "rb", 1, "t"))
    with pytest.raises(StaleRelation):
        advance_vertex(inst.conns, inst.phys, reader.dst, t2)
    with pytest.raises(StaleRelation):
        advance_vertex(inst.conns, inst.phys, step, t2)
    with pytest.raises(StaleRelation):
        push_plan(inst.conns, inst.phys, t2)  # as if nothing were stale
    assert advance_vertex(inst.conns, inst.phys, step, t, mode="stale").span == (t, t)
    chooser = PathChooser(inst.handle.topology, TimeModel)  # a new executor: reads the mark
    try:
        assert chooser.stale_now(inst.phys) == {step}
        paths = chooser.choose(inst.phys, [mv], 1.0, deploying=True)
    finally:
        chooser.close()
    assert paths.modes[step] == "recompute"
    assert "skip" not in paths.modes.values() and "stale" not in paths.modes.values()
    assert reader.dst in todo and paths.modes[reader.dst] == "incremental"
    push_plan(inst.conns, inst.phys, t2, modes=paths.modes)
    assert not vertex_ts.is_stale(conn, pv.ts_key)
    assert _mv(inst) == _oracle(inst, t2)
    assert Counter(conn.execute(sql.SQL("SELECT * FROM {}").format(
        sql.Identifier(*pv.table))).fetchall())  # whole again


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_unlogged_relations_a_crash_empties_are_recomputed(installed: Installed) -> None:
    """The copies, the join step and the plan's intermediate deltas (the copies' and the
    joins', the Unions' views flagged with them) live in UNLOGGED tables, the MV and the
    captured deltas in logged ones. What a crash does to them — every unlogged table
    emptied, `_smile.alive` with them — makes every one stale: refused to a reader (a
    relation's, and a delta's below its TS, whose rows are gone), settled into stale marks
    by the first advance (or install), and the next push, even forced incremental,
    recomputes every relation below a lost delta (the MV too) and skips the deltas; the MV
    is exact, and the push after applies deltas again."""
    inst = installed
    plan = inst.phys.plan
    mv = plan.sharings[0].mv
    home = mv.machine
    conn = inst.conns[home]
    light = _unlogged(inst, home)
    assert light and mv not in light and persistence(conn, inst.phys.vertices[mv].table) == "p"
    assert all(may_be_unlogged(inst.phys, v) for v in light)
    assert {v for v in recomputes(plan) if v.machine == home and v != mv} <= light
    deltas = {v for v in plan.incoming if v.is_delta and v.machine == home}
    views = {v for v in deltas if inst.phys.vertices[v].virtual}
    assert views and deltas - views <= light  # every intermediate delta here is unlogged
    assert not any(persistence(inst.conns[v.machine], inst.phys.vertices[v].table) == "u"
                   for v in inst.phys.vertices if v.base)
    assert not _stale(inst)
    t = _changed(inst, *(("ins", short, 2, "u") for short in ("ra", "rb", "rc")))
    push_plan(inst.conns, inst.phys, t)
    with conn.transaction():  # what crash recovery does to the unlogged tables
        conn.execute(f"DELETE FROM {vertex_ts.ALIVE}")
        for v in light:
            conn.execute(sql.SQL("TRUNCATE {}").format(
                sql.Identifier(*inst.phys.vertices[v].table)))
    assert _stale(inst) == light | views
    reader = next(e for e in plan.edges if isinstance(e, Join) and e.other in light)
    t2 = _changed(inst, ("upd_val", "rb", 2, "v"))
    with pytest.raises(StaleRelation):
        advance_vertex(inst.conns, inst.phys, reader.dst, t2)
    # the MV is logged and whole, but the delta it applies lost its rows: refused, not
    # advanced past what is gone
    with pytest.raises(AgentError, match="stale"):
        advance_vertex(inst.conns, inst.phys, mv, t2)
    paths = push_paths(plan, [mv], TimeModel(), 1.0, lambda v: 5.0, "incremental",
                       _stale(inst))
    assert {v for v, m in paths.modes.items() if m == "recompute"} == \
        {v for v in light if not v.is_delta} | {mv}
    assert all(paths.modes[d] == "skip" for d in deltas)
    push_plan(inst.conns, inst.phys, t2, modes=paths.modes)
    assert not _stale(inst)
    assert conn.execute(f"SELECT count(*) FROM {vertex_ts.ALIVE}").fetchone() == (1,)
    assert _mv(inst) == _oracle(inst, t2)
    t3 = _changed(inst, ("del", "ra", 2))
    push_plan(inst.conns, inst.phys, t3)  # whole again: advanced by their deltas
    assert _mv(inst) == _oracle(inst, t3)
    # a push leaves the join step stale; a new sharing taking it as its MV finds it whole and
    # logged (`commands.fill`: recomputed at its own TS before the view, then made logged)
    t4 = _changed(inst, ("ins", "rc", 3, "w"), ("ins", "rb", 3, "w"), ("ins", "ra", 3, "w"))
    todo = plan.advanced_by([mv])
    modes = recompute_modes(plan, todo, [v for v in todo if v in recomputes(plan)])
    (step,) = [v for v, m in modes.items() if m == "stale"]
    push_plan(inst.conns, inst.phys, t4, modes=modes)
    assert _stale(inst) == {step} and _mv(inst) == _oracle(inst, t4)
    assert recompute_stale(inst.conns, inst.phys, [step]) == [step]
    pv = inst.phys.vertices[step]
    keep_logged(conn, pv)
    assert persistence(conn, pv.table) == "p" and not _stale(inst)
    assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(*pv.table))).fetchone() != (0,)
    assert vertex_ts.read(conn, pv.ts_key) == t4


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_plan_change_giving_an_unlogged_delta_a_second_reader_makes_it_logged(
        installed: Installed) -> None:
    """A new version of the plan in which a second sharing reads below the unlogged deltas
    (no push of one sharing could then skip them) makes them logged, rows kept — but not
    while a crash has emptied them and the recovery push has not run: the plan change is
    refused, nothing changed, until it has."""
    from dataclasses import replace

    inst = installed
    plan = inst.phys.plan
    mv = plan.sharings[0].mv
    conn = inst.conns[mv.machine]
    deltas = {v for v in plan.incoming if v.is_delta and v.machine == mv.machine}
    tables = {v for v in deltas if not inst.phys.vertices[v].virtual}
    assert tables and all(persistence(conn, inst.phys.vertices[v].table) == "u" for v in tables)

    def flagged() -> set[Vertex]:
        keys = {k for (k,) in conn.execute(
            f"SELECT vertex FROM {vertex_ts.TABLE} WHERE unlogged").fetchall()}
        return {v for v in deltas if inst.phys.vertices[v].ts_key in keys}

    assert flagged() == deltas
    assert relog_deltas(conn, inst.phys, mv.machine) == 0  # the running plan: nothing to do
    second = replace(plan.sharings[0], name=plan.sharings[0].name + "_2")
    shared = physical_plan(replace(plan, sharings=(*plan.sharings, second)), inst.phys.schemas)
    t = _changed(inst, *(("ins", short, 4, "s") for short in ("ra", "rb", "rc")))
    push_plan(inst.conns, inst.phys, t)
    with conn.transaction():  # what crash recovery does to the unlogged tables
        conn.execute(f"DELETE FROM {vertex_ts.ALIVE}")
        for v in _unlogged(inst, mv.machine):
            conn.execute(sql.SQL("TRUNCATE {}").format(
                sql.Identifier(*inst.phys.vertices[v].table)))
    with pytest.raises(AgentError, match="lost rows in a crash"):
        relog_deltas(conn, shared, mv.machine)
    assert flagged() == deltas and all(
        persistence(conn, inst.phys.vertices[v].table) == "u" for v in tables)
    t2 = _changed(inst, ("upd_val", "rb", 4, "r"))
    push_plan(inst.conns, inst.phys, t2, modes=push_paths(
        plan, [mv], TimeModel(), 1.0, lambda v: 5.0, "incremental", _stale(inst)).modes)
    assert not _stale(inst) and _mv(inst) == _oracle(inst, t2)
    t3 = _changed(inst, ("ins", "ra", 5, "q"), ("ins", "rb", 5, "q"), ("ins", "rc", 5, "q"))
    copied = next(v for v in tables if isinstance(plan.incoming[v], CopyDelta))
    advance_vertex(inst.conns, inst.phys, copied, t3)  # rows in one, then made logged
    assert relog_deltas(conn, shared, mv.machine) == len(deltas)
    assert not flagged() and all(
        persistence(conn, inst.phys.vertices[v].table) == "p" for v in tables)
    assert relog_deltas(conn, shared, mv.machine) == 0
    push_plan(inst.conns, inst.phys, t3)  # the rows written before went along
    assert _mv(inst) == _oracle(inst, t3)


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_relation_recomputed_ahead_of_its_delta_is_not_rolled_back(
        installed: Installed) -> None:
    """A relation recomputed to `t` while its own delta is behind (another sharing's push
    at an earlier time could run in between): a join that rolls it back with that delta
    refuses, rather than miss the rows between (its compensation needs them up to TS(X̂):
    run anyway, it left this MV a few rows off for good); a push orders a recomputation
    after its delta (`waits_for`), and then all is exact."""
    inst = installed
    plan = inst.phys.plan
    rec = recomputes(plan)
    join = next(e for e in plan.edges if isinstance(e, Join) and e.other in rec
                and isinstance(plan.incoming[e.other], DeltaToRel)
                and plan.incoming[e.other].src == e.other_delta)
    modes = {join.other: "recompute"}
    assert join.other_delta in waits_for(plan, join.other, "recompute",
                                         lambda v: modes.get(v, "incremental"))
    assert join.other_delta not in waits_for(plan, join.other, "recompute", lambda v: "skip")
    for short in ("ra", "rb", "rc"):
        _apply(inst, ("ins", short, 1, "a"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    mid = _watermark(inst)
    for short in ("ra", "rb", "rc"):  # rows the join's compensation must back out
        _apply(inst, ("ins", short, 1, "b"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    hi = _watermark(inst)
    order = inst.phys.order()
    for v in order:  # everything the join reads at `mid`, its relation recomputed at `hi`
        if v in plan.ancestors(join.dst) and v != join.other:
            advance_vertex(inst.conns, inst.phys, v, mid)
    advance_vertex(inst.conns, inst.phys, join.other, hi, mode="recompute")
    with pytest.raises(AgentError, match="ahead of its delta"):
        advance_vertex(inst.conns, inst.phys, join.dst, mid)
    push_plan(inst.conns, inst.phys, hi)
    assert _mv(inst) == _oracle(inst, hi)


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_skip_waits_for_a_lease_and_newer_readers_and_leaves_its_interval_pruned(
        installed: Installed) -> None:
    """A skip leaves its interval without rows, as a prune does: it is refused while a deploy
    holds its lease on the delta's machine, and while a reader registered there (one a newer
    version added at its t0) is below `t`; once it goes, the delta's tables are marked pruned
    to `t`, so that a deploy's t0 for a vertex reading them starts past it."""
    inst = installed
    _apply(inst, ("ins", "ra", 2, "q"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    lo, t = mv_ts(inst.conns, inst.phys), _watermark(inst)
    mv = inst.phys.plan.sharings[0].mv
    delta = inst.phys.plan.incoming[mv].sources[0]
    conn = inst.conns[delta.machine]
    key = inst.phys.vertices[delta].ts_key
    stored = [inst.phys.vertices[s].ts_key for s in inst.phys.stored(delta)]
    modes = recompute_modes(inst.phys.plan, inst.phys.plan.advanced_by([mv]))
    assert modes[delta] == "skip"
    for v in inst.phys.order():  # the recompute path up to the skips, the MV recomputed
        if modes.get(v, "skip") != "skip":
            advance_vertex(inst.conns, inst.phys, v, t, mode=modes[v])
    version = 999_999
    commands.lease(conn, version)
    try:
        with pytest.raises(SkipRefused, match=f"lease:{version}"):
            advance_vertex(inst.conns, inst.phys, delta, t, mode="skip")
    finally:
        commands.release(conn, version=version)
    newer = "newer:reader"
    vertex_ts.put(conn, {newer: lo})
    for k in stored:
        conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s)", (k, newer))
    try:
        with pytest.raises(SkipRefused, match=newer):
            advance_vertex(inst.conns, inst.phys, delta, t, mode="skip")
        assert vertex_ts.read(conn, key) < t
        assert not set(stored) & set(retention.pruned(conn, stored))
    finally:
        conn.execute("DELETE FROM _smile.delta_readers WHERE reader_vertex = %s", (newer,))
        vertex_ts.delete(conn, [newer])
    advance_vertex(inst.conns, inst.phys, delta, t, mode="skip")
    assert vertex_ts.read(conn, key) == t
    assert retention.pruned(conn, stored) == dict.fromkeys(stored, t)
    _push(inst, _watermark(inst), "incremental")
    assert _mv(inst) == _oracle(inst, mv_ts(inst.conns, inst.phys))


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_deltas_a_refused_skip_left_behind_are_brought_along_by_the_next_push(
        installed: Installed) -> None:
    """A push by the recompute path whose skips a deploy's lease refuses (the executor
    leaves them, `AgentFailure.deferred`): the MV is at `t` and its deltas are behind it.
    The executor, told they were left, prices the next push from their TS. That push,
    incremental, writes their rows from where they are — more than the MV, already past
    `t`, reads — and the MV equals the query at the new `t`; the deltas are no longer
    behind."""
    inst = installed
    mv = inst.phys.plan.sharings[0].mv
    for op in (("ins", "ra", 2, "s"), ("upd_val", "ra", 1, "q2")):
        _apply(inst, op)
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    t1 = _watermark(inst)
    modes = recompute_modes(inst.phys.plan, inst.phys.plan.advanced_by([mv]))
    skips = [v for v in inst.phys.order() if modes.get(v) == "skip"]
    assert skips
    for v in inst.phys.order():
        if v in modes and modes[v] != "skip":
            advance_vertex(inst.conns, inst.phys, v, t1, mode=modes[v])
    behind = {v: vertex_ts.read(inst.conns[v.machine], inst.phys.vertices[v].ts_key)
              for v in skips}
    version = 999_998
    for m in {v.machine for v in skips}:
        commands.lease(inst.conns[m], version)
    try:
        for v in reversed(skips):  # a skip after its readers, as the dataflow sends them
            with pytest.raises(SkipRefused):
                advance_vertex(inst.conns, inst.phys, v, t1, mode="skip")
    finally:
        for m in {v.machine for v in skips}:
            commands.release(inst.conns[m], version=version)
    assert mv_ts(inst.conns, inst.phys) == t1 and _mv(inst) == _oracle(inst, t1)
    assert all(vertex_ts.read(inst.conns[v.machine], inst.phys.vertices[v].ts_key) == ts < t1
               for v, ts in behind.items())
    # the executor prices the next push from where the deltas left behind are, not from t1
    chooser = PathChooser(inst.handle.topology, TimeModel)
    try:
        for v in skips:
            chooser.left_behind(v, t1)
        assert chooser.behind_at(inst.phys, [mv], t1) == behind  # read from their machines
        _apply(inst, ("ins", "ra", 3, "u"))
        for m in inst.handle.topology.machines:
            wait_caught_up(m.dsn)
        t2 = _watermark(inst)
        _push(inst, t2, "incremental")
        assert mv_ts(inst.conns, inst.phys) == t2
        assert _mv(inst) == _oracle(inst, t2) != _oracle(inst, t1)
        assert chooser.behind_at(inst.phys, [mv], t2) == {} and not chooser.behind  # caught up
    finally:
        chooser.close()


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_a_recomputation_refuses_inputs_ahead_of_it_whose_rows_back_were_pruned(
        installed: Installed) -> None:
    """The relations a recomputation at `t` reads may be ahead of `t` (another sharing's push
    took them further): they are rolled back with their deltas' rows after `t`. Once
    retention took those (every registered reader was past them), the recomputation is
    refused, not written from what is left; while they are there it equals the query."""
    inst = installed
    mv = inst.phys.plan.sharings[0].mv
    _apply(inst, ("ins", "ra", 3, "q"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    lo = mv_ts(inst.conns, inst.phys)
    t1 = _watermark(inst)
    _apply(inst, ("ins", "ra", 4, "r"))
    for m in inst.handle.topology.machines:
        wait_caught_up(m.dsn)
    t2 = _watermark(inst)
    for v in inst.phys.order():  # everything but the MV to t2
        if v != mv:
            advance_vertex(inst.conns, inst.phys, v, t2)
    inputs = recomputes(inst.phys.plan)[mv].inputs
    fed = [inst.phys.plan.incoming[s].sources[0] for s in inputs]
    stored = [(d.machine, inst.phys.vertices[d].ts_key) for f in fed
              for d in inst.phys.stored(f)]
    for machine, key in stored:
        retention.mark_pruned(inst.conns[machine], [key], t2)
    try:
        with pytest.raises(AgentError, match="was pruned up to"):
            advance_vertex(inst.conns, inst.phys, mv, t1, mode="recompute")
        assert mv_ts(inst.conns, inst.phys) == lo
    finally:
        for machine, key in stored:
            retention.forget(inst.conns[machine], [key])
    advance_vertex(inst.conns, inst.phys, mv, t1, mode="recompute")
    assert _mv(inst) == _oracle(inst, t1)


def test_a_withdrawal_leaves_a_shadow_reading_its_base_delta(cloud: CloudHandle) -> None:
    """A sharing whose join reads a base's shadow R̂ in place is withdrawn, and the one left
    reads that base through a copy only: R̂ still reads ΔR (capture registered it when the
    relation was published, whatever the plan), so retention, moved on by the copy's pushes,
    keeps the rows R̂ has not applied yet. What is computed from R̂ (a recomputation, a new
    vertex's fill, R̂ itself advanced) then equals the live relation. Forgotten with the
    join's readers, ΔR would be pruned past R̂, which would lose those changes for good: every
    recomputation from it, and every vertex filled from it, off the query."""
    from psycopg import sql as q

    from smile.deploy.install import uninstall_plan
    from smile.housekeeping.capture import advance_shadows, prune_deltas
    from smile.messaging.protocol import Withdraw
    from smile.optimizer.global_plan import SharingEntry

    n = next(_n)
    names = {r: f"wr{n}_{r}" for r in ("ra", "rb", "rc")}
    machines = cloud.topology.machines
    rels = ["ra", "rb"]
    _make_relations(machines, names, rels)
    keep_sql = SHAPES["single_table"][0].format(**names)
    keep = plan_sharing(_catalog(machines, names, rels), Sharing(f"keep_{n}", keep_sql, 60, 0.0))
    drop = plan_sharing(_catalog(machines, names, rels), Sharing(
        f"drop_{n}", "SELECT a.k, a.v, b.w FROM {ra} a JOIN {rb} b ON a.k = b.k".format(
            **names), 60, 0.0))
    assert keep.admitted and drop.admitted and drop.plan is not None
    both = keep.global_plan().add(drop.plan, SharingEntry(
        drop.plan.sharing, drop.plan.mv, drop.plan.sources, 60, 0.0, drop.plan.outputs))
    after = both.without(drop.plan.sharing)
    in_place = {e.other for e in both.edges if isinstance(e, Join) and e.other.base}
    shadow = next(v for v in in_place if v.expr.parts[0].relation == names["ra"])
    assert shadow not in after.vertices  # the sharing left reads ra through its copy only
    phys = physical_plan(both, _schemas(names, rels))
    left = physical_plan(after, _schemas(names, rels))
    home = shadow.machine
    with _captured(cloud, names, rels) as conns:
        install_plan(conns, phys)
        gone = sorted(both.vertices - after.vertices)
        uninstall_plan(conns, phys, gone)
        for m in machines:  # each agent's part of the Withdraw that ends the deploy
            commands.withdraw(conns, m.name, phys, Withdraw(f"w{n}.{m.name}", 2, 1, tuple(
                v.label for v in gone), (drop.plan.sharing,)), left)
        inst = Installed(cloud, names, left, conns, keep_sql)
        for op in (("ins", "ra", 7, "new"), ("upd_val", "ra", 3, "c"), ("del", "ra", 2)):
            _apply(inst, op)
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        mv = left.plan.sharings[0].mv
        copy = left.plan.incoming[mv].sources[0]
        advance_vertex(conns, left, copy, t)  # the copy past those changes; R̂ behind them
        base = phys.vertices[next(s for s in both.vertices if s.base and s.is_delta
                                  and s.expr == shadow.expr)]
        deadline = time.monotonic() + 30
        while retention.due(conns[home], {base.ts_key: base.table}):  # all it may prune
            assert time.monotonic() < deadline
            prune_deltas(conns[home])  # the capturer's retention, as each round runs it
            time.sleep(0.2)
        live = Counter(conns[home].execute(keep_sql).fetchall())
        advance_vertex(conns, left, mv, t, mode="recompute")
        assert mv_ts(conns, left) == t
        assert _mv(inst) == live  # recomputed from R̂ rolled forward with ΔR
        advance_shadows(conns[home])
        table = q.Identifier(*phys.vertices[shadow].table)
        assert Counter(conns[home].execute(q.SQL("SELECT * FROM {}").format(table))
                       .fetchall()) == Counter(conns[home].execute(q.SQL(
                           "SELECT * FROM {}").format(q.Identifier(names["ra"]))).fetchall())
        # had ΔR been pruned past R̂ all the same, a recomputation rolling R̂ forward is
        # refused rather than written from what is left
        _apply(inst, ("ins", "ra", 8, "later"))
        for m in machines:
            wait_caught_up(m.dsn)
        t2 = _watermark(inst)
        advance_vertex(conns, left, copy, t2)
        retention.mark_pruned(conns[home], [base.ts_key], t2)
        try:
            with pytest.raises(AgentError, match="was pruned up to"):
                advance_vertex(conns, left, mv, t2, mode="recompute")
            assert mv_ts(conns, left) == t
        finally:
            retention.forget(conns[home], [base.ts_key])


def test_the_choice_follows_the_lines() -> None:
    """Few pending updates: incremental; many: recompute — the crossover moves with the
    recompute line, no ratio constant."""
    names = {r: f"x_{r}" for r in ("ra", "rb", "rc")}
    machines = [Machine(f"m{i}") for i in (1, 2, 3)]

    class M:
        def __init__(self, name: str) -> None:
            self.name = name

    decision = plan_sharing(_catalog([M(m.name) for m in machines], names, ["ra", "rb"]),
                            Sharing("s", SHAPES["left_join"][0].replace("LEFT ", "").format(
                                **names), 60, 0.0))
    plan = decision.global_plan()
    mv = plan.sharings[0].mv
    model = TimeModel()

    def chosen(x: float, m: TimeModel = model) -> str:
        return push_paths(plan, [mv], m, x, lambda v: 1e5).chosen

    assert chosen(0.1) == "incremental"
    assert chosen(1e5) != "incremental"
    crossover = next(x for x in (10.0 ** k for k in range(-1, 6)) if chosen(x) != "incremental")
    dearer = model.with_line("recompute", Line(0.01, 1e-5))
    assert next(x for x in (10.0 ** k for k in range(-1, 8))
                if chosen(x, dearer) != "incremental") > crossover


def _three_way_plan(prefix: str) -> GlobalPlan:
    """The three-way join's plan over three machines (no services)."""
    names = {r: f"{prefix}_{r}" for r in ("ra", "rb", "rc")}

    class M:
        def __init__(self, name: str) -> None:
            self.name = name

    decision = plan_sharing(_catalog([M(f"m{i}") for i in (1, 2, 3)], names,
                                     ["ra", "rb", "rc"]),
                            Sharing("s", SHAPES["three_way"][0].format(**names), 60, 0.0))
    return decision.global_plan()


def test_a_join_step_below_a_recomputed_mv_is_left_stale_only_where_nothing_reads_it(
        ) -> None:
    """The MV of a 3-way join is recomputed from the relations its join steps read, not from
    the step below it, which it does not wait for; a step that would be recomputed is left
    stale instead when nothing in the push reads it — never the MV, never one advanced by
    its delta, never one a vertex outside the push reads; a relation stale now is
    recomputed even on a push forced incremental, which skips nothing."""
    plan = _three_way_plan("st")
    mv = plan.sharings[0].mv
    todo = plan.advanced_by([mv])
    rec = recomputes(plan)
    steps = [v for v in todo if v in rec and v != mv and len(rec[v].inputs) > 1]
    assert len(steps) == 1
    (step,) = steps
    assert not any(len(rec[i].inputs) > 1 for i in rec[mv].inputs if i in rec)  # no step
    assert set(rec[step].inputs) < set(rec[mv].inputs)
    assert len(rec[mv].predicates) == 2
    every = [v for v in todo if v in rec]
    modes = recompute_modes(plan, todo, every)
    assert modes[step] == "stale" and modes[mv] == "recompute"
    assert step not in waits_for(plan, mv, "recompute", lambda v: modes[v])
    assert waits_for(plan, step, "stale", lambda v: modes[v]) == set()
    assert recompute_modes(plan, todo, every, leave_stale=False)[step] == "recompute"
    assert recompute_modes(plan, todo, [v for v in every if v != step])[step] == "incremental"
    assert recompute_modes(plan, todo, [mv])[mv] == "recompute"
    assert recompute_modes(plan, todo, [step])[step] == "recompute"  # the MV's joins read it
    outside = {r for r in relation_readers(plan, step)} - {mv}
    assert outside, "the step has readers besides the MV's recomputation"
    assert recompute_modes(plan, todo - outside, every)[step] == "recompute"
    forced = push_paths(plan, [mv], TimeModel(), 1.0, lambda v: 1e5, "incremental", {step})
    assert forced.modes[step] == "recompute"
    assert set(forced.modes.values()) == {"incremental", "recompute"}
    big = push_paths(plan, [mv], TimeModel(), 1e6, lambda v: 1e5, stale={step})
    assert big.modes[step] == "stale" and big.left_stale == [step.label]
    assert big.recompute_s is not None and big.chosen_s < big.recompute_s
    assert push_paths(plan, [mv], TimeModel(), 1e6, lambda v: 1e5,
                      "recompute").modes[step] == "recompute"


def test_a_delta_a_crash_emptied_is_skipped_by_every_path_below_recomputed_relations(
        ) -> None:
    """The intermediate deltas of one sharing's plan may be emptied by a crash
    (`recoverable`): a push through one that lost its rows recomputes every relation below it
    and skips it and every delta between, whatever its path — forced incremental, forced
    recompute, chosen at a tiny or a huge change. Captured deltas never; nor the deltas of a
    sharing in a consistent group, nor of one another sharing reads below them."""
    from dataclasses import replace

    plan = _three_way_plan("lost")
    mv = plan.sharings[0].mv
    todo = plan.advanced_by([mv])
    rec = recomputes(plan)
    deltas = {v for v in todo if v.is_delta}
    assert deltas and all(recoverable(plan, d) for d in deltas)
    assert not any(recoverable(plan, v) for v in plan.vertices if v.base or not v.is_delta)
    grouped = replace(plan, sharings=(replace(plan.sharings[0], group="g"),))
    assert not any(recoverable(grouped, d) for d in deltas)
    twice = replace(plan, sharings=(*plan.sharings, replace(plan.sharings[0], name="s2")))
    assert not any(recoverable(twice, d) for d in deltas)  # SHR of every vertex: two sharings
    # a deploy adding that reader reaches every machine holding one, whose fill makes it
    # logged (`relog_deltas`), views or no vertices of its own there
    from smile.executor.deployer import involved

    schemas = _schemas({r: f"lost_{r}" for r in ("ra", "rb", "rc")}, SHAPES["three_way"][1])
    reached = involved(physical_plan(twice, schemas), physical_plan(plan, schemas), [], [],
                       ["s2"], [])
    assert all(f"{d.label} made logged" in reached.get(d.machine, ()) for d in deltas)
    # the delta of a copy: everything below it (the copy, the joins, the MV) recomputed
    copy = next(d for d in deltas if isinstance(plan.incoming[d], CopyDelta))
    below = lost_below(plan, {copy}, todo)
    assert mv in below and below <= set(rec) and not any(v.is_delta for v in below)
    assert below == {u for u in plan.descendants(copy) if u.kind == "relation"}
    for force, x in (("incremental", 0.001), ("recompute", 0.001), (None, 0.001), (None, 1e6)):
        paths = push_paths(plan, [mv], TimeModel(), x, lambda v: 1e5, force,  # type: ignore[arg-type]
                           {copy})
        assert paths.modes[copy] == "skip", force
        assert all(paths.modes[u] in ("recompute", "stale") for u in below), force
        assert all(paths.modes[u] == "skip" for u in plan.descendants(copy) if u.is_delta)
        assert paths.chosen != "incremental"
    # recompute_modes itself (a mixed push choosing nothing) recovers it too
    assert recompute_modes(plan, todo, [], {copy})[copy] == "skip"
    untouched = push_paths(plan, [mv], TimeModel(), 0.001, lambda v: 1e5, "incremental")
    assert set(untouched.modes.values()) == {"incremental"}


def test_every_mode_a_push_logs_is_priced_by_a_line() -> None:
    """The push log records a vertex's mode in place of its edge's kind when it was not
    advanced by its edge; whatever prices the log (`experiments.dollars`) finds a line for
    each — a relation left stale at the skip's."""
    from typing import get_args

    from smile.optimizer.recompute import Mode

    model = TimeModel()
    logged = [m for m in get_args(Mode) if m != "incremental"]
    assert set(logged) == {"recompute", "skip", "stale"}
    for mode in logged:
        assert model.logged_line(mode).seconds(10.0) > 0
    assert model.logged_line("stale") == model.line("skip")
    assert model.logged_line("join_pg") == model.line("join_pg")


def test_a_push_runs_a_join_before_the_relation_it_rolls_forward() -> None:
    """In a push every join whose probed relation X̂ is kept by its delta starts once the
    deltas are there, not after X̂'s DeltaToRel, and X̂'s DeltaToRel — read by nothing else
    in the push — waits for it (the join reads X̂ as it was and rolls it forward); a
    recomputed X̂ is still waited for; the waits leave an order to run the push in."""
    plan = _three_way_plan("w")
    todo = plan.advanced_by([plan.sharings[0].mv])
    rolled = [e for e in plan.edges if isinstance(e, Join) and e.dst in todo and e.other in todo]
    assert rolled, "the plan joins no relation that the push advances"

    def order(waits: dict[Any, set[Any]]) -> list[Any]:
        """The vertices in an order that runs each after what it waits for (all of them,
        unless the waits close a cycle)."""
        out: list[Any] = []
        while len(out) < len(waits):
            ready = [v for v, w in waits.items() if v not in out and w <= set(out)]
            if not ready:
                return out
            out.extend(ready)
        return out

    waits = push_waits(plan, todo, lambda v: "incremental")
    assert len(order(waits)) == len(todo)
    for e in rolled:
        assert e.other not in waits[e.dst]
        assert {e.delta, e.other_delta} & todo <= waits[e.dst]
        assert e.dst in waits[e.other]
        assert not any(e.other in w for w in waits.values())  # X̂ ends its branch
    for v in todo:  # otherwise each vertex waits for what its edge reads
        extra = {e.dst for e in rolled if e.other == v}
        assert waits[v] == (set(plan.incoming[v].sources) & todo) - {
            e.other for e in rolled if e.dst == v} | extra
    readers = push_readers(waits)  # each once ready: the next step of a chain first
    assert {(s, r) for s, rs in readers.items() for r in rs} == {
        (s, v) for v, w in waits.items() for s in w}
    mixed_lists = 0
    for rs in readers.values():
        leaves = [r not in readers for r in rs]
        assert leaves == sorted(leaves), rs
        mixed_lists += len(set(leaves)) == 2
    assert mixed_lists  # a vertex both a chain's next step and a leaf wait for
    baseline = push_waits(plan, todo, lambda v: "incremental", roll_forward=False)
    assert all(baseline[v] == set(plan.incoming[v].sources) & todo for v in todo)
    x = rolled[0].other
    modes = {x: "recompute"}
    mixed = push_waits(plan, todo, lambda v: modes.get(v, "incremental"))
    assert x in mixed[rolled[0].dst]
    assert rolled[0].dst not in mixed[x]
    assert len(order(mixed)) == len(todo)


def test_the_load_model_charges_the_cheaper_path() -> None:
    """A join whose bases change slowly is charged its edges; the same join over bases that
    change fast, its recomputation (less load on its machine), and says so — unless it is in
    a consistent group, whose pushes always apply deltas, or the executor never chooses."""
    from smile.optimizer.load import assess

    names = {r: f"y_{r}" for r in ("ra", "rb", "rc")}
    machines = (Machine("m1", cpu_cores=64), Machine("m2", cpu_cores=64))

    def assessed(rate: float, group: str = "", chooses: bool = True) -> Any:
        catalog = CatalogSnapshot(machines, tuple(
            RelationStats(names[r], machines[i].name, 10_000, rate,
                          (ColumnStats(COLS[r][0], "integer", 10_000, 0, 4),
                           ColumnStats(COLS[r][1], "text", 100, 0, 8)))
            for i, r in enumerate(("ra", "rb"))), chooses_paths=chooses)
        query = "SELECT a.k, a.v, b.w FROM {ra} a JOIN {rb} b ON a.k = b.k".format(**names)
        decision = plan_sharing(catalog, Sharing("s", query, 60, 0.0, group=group))
        plan = decision.global_plan()
        return assess(plan, catalog, TimeModel()), assess(
            plan, catalog, TimeModel().with_line("recompute", Line(1e3, 1.0)))

    slow, _ = assessed(1.0)
    assert slow.recomputed == frozenset()
    fast, dear = assessed(50_000.0)
    assert fast.recomputed == {"s"}
    assert dear.recomputed == frozenset()
    assert sum(fast.machine_load.values()) < sum(dear.machine_load.values())
    grouped, _ = assessed(50_000.0, group="app1/g")  # a group's pushes apply deltas
    assert grouped.recomputed == frozenset()
    held, _ = assessed(50_000.0, chooses=False)  # an executor that always applies deltas
    assert held.recomputed == frozenset()
    assert held.machine_load == pytest.approx(dear.machine_load)


def test_a_joins_recomputation_is_charged_its_rows_with_skew() -> None:
    """A join's size — its DeltaToRel's stored bytes, as the DP builds it and `rerate`
    rates it — counts the skew measured for its inputs' changes (`Estimates.stored_rows`):
    K = 200 for `a`'s changes meeting `b` makes the MV 200× the uniform |a|·|b| / keys, as
    `loc ⋈ tweets` is; a K below 1 (updates that cancel) leaves it uniform; the
    recomputation is charged those rows, and a sharing so skewed is no longer charged by
    recompute where the uniform size made it look cheap."""
    from smile.optimizer.estimate import skew_key
    from smile.optimizer.load import assess
    from smile.optimizer.rates import rerate
    from smile.optimizer.recompute_load import catalog_rows

    names = {r: f"z_{r}" for r in ("ra", "rb")}
    machines = (Machine("m1", cpu_cores=64), Machine("m2", cpu_cores=64))
    query = "SELECT a.k, a.v, b.w FROM {ra} a JOIN {rb} b ON a.k = b.k".format(**names)

    def catalog(k: float, rate: float = 1_000.0) -> CatalogSnapshot:
        return CatalogSnapshot(machines, tuple(
            RelationStats(names[r], machines[i].name, 10_000, rate if r == "rb" else 1.0,
                          (ColumnStats(COLS[r][0], "integer", 10_000, 0, 4),
                           ColumnStats(COLS[r][1], "text", 100, 0, 8)))
            for i, r in enumerate(("ra", "rb"))),
            skews=((skew_key(names["ra"], COLS["ra"][0], names["rb"], COLS["rb"][0]), k),))

    plan = plan_sharing(catalog(1.0), Sharing("s", query, 60, 0.0)).global_plan()
    mv = plan.sharings[0].mv
    uniform = catalog_rows(plan, catalog(1.0))(mv)
    assert uniform == pytest.approx(10_000, rel=0.01)  # 10k × 10k / 10k keys
    # its rows, whichever columns it keeps (the stored bytes are of those alone)
    narrow = plan_sharing(catalog(1.0), Sharing(
        "n", "SELECT a.k FROM {ra} a JOIN {rb} b ON a.k = b.k".format(**names), 60, 0.0)
    ).global_plan()
    assert catalog_rows(narrow, catalog(1.0))(narrow.sharings[0].mv) == pytest.approx(
        uniform, rel=0.01)
    # D as rated by each catalog (`rerate`, as admission and the executor assess it)
    skewed, cancelling = rerate(plan, catalog(200.0)), rerate(plan, catalog(0.08))
    assert catalog_rows(skewed, catalog(200.0))(mv) == pytest.approx(200 * uniform)
    assert catalog_rows(cancelling, catalog(0.08))(mv) == pytest.approx(uniform)
    # planned where the skew is known already, the plan holds the skewed size itself
    known = plan_sharing(catalog(200.0), Sharing("s", query, 60, 0.0)).global_plan()
    assert catalog_rows(known, catalog(200.0))(known.sharings[0].mv) == pytest.approx(
        200 * uniform)
    # `rb` changes fast enough that recomputing the MV is cheaper than its deltas, until
    # `ra`'s rows each meet 200× the rows of `rb` (what recomputing then writes)
    assert assess(plan, catalog(1.0), TimeModel()).recomputed == {"s"}
    assert assess(skewed, catalog(200.0), TimeModel()).recomputed == frozenset()


@pytest.mark.parametrize("installed", ["three_way"], indirect=True)
def test_an_immediate_restart_mid_push_loses_nothing(installed: Installed) -> None:
    """The MV's machine's PostgreSQL restarted immediately (as a crash) in the middle of a
    push by recomputation, then of one recomputing every relation it can and leaving the
    join step stale, then of one applying deltas (which recomputes that step first): pushed
    again, the MV equals its query — a vertex's contents and TS (and stale mark) commit
    together, and a delta is skipped only after its readers committed."""
    import threading

    from psycopg import sql as q

    from tests.capture_helpers import connect_retry

    inst = installed
    if inst.handle.local is None:
        pytest.skip("restarts need the test's own local cloud")
    machines = inst.handle.topology.machines
    for short in ("ra", "rb", "rc"):
        conn = inst.conns[machines[HOME[short]].name]
        conn.execute(q.SQL("INSERT INTO {} SELECT g % 50000, 'v' || g FROM "
                           "generate_series(1, 60000) g").format(q.Identifier(inst.names[short])))
    home = inst.phys.plan.sharings[0].mv.machine
    for path, op, mask in (("recompute", ("upd_val", "rb", 3, "z"), 0),
                           ("mixed", ("upd_val", "rc", 2, "y"), 255),
                           ("incremental", ("upd_key", "ra", 1, 4), 0)):
        _apply(inst, op)
        for m in machines:
            wait_caught_up(m.dsn)
        t = _watermark(inst)
        failed: list[BaseException] = []

        def push(t: Any = t, path: str = path, mask: int = mask,
                 failed: list[BaseException] = failed) -> None:
            try:
                _push(inst, t, path, mask)
            except BaseException as exc:  # the server went away under it
                failed.append(exc)

        runner = threading.Thread(target=push)
        runner.start()
        time.sleep(0.4)
        inst.handle.local.cluster(home).restart("immediate")
        runner.join(60)
        inst.conns[home].close()
        inst.conns[home] = connect_retry(inst.handle.topology.machine(home).dsn)
        wait_caught_up(inst.handle.topology.machine(home).dsn)
        light = _unlogged(inst, home)
        assert light and light <= _stale(inst), path  # the crash emptied them
        _push(inst, t, path, mask)
        at = mv_ts(inst.conns, inst.phys)
        assert at == t, (path, failed)
        assert _mv(inst) == _oracle(inst, at), path


def test_the_push_paths_bench_reports_every_fraction(cloud: CloudHandle) -> None:
    """`smile bench push --fractions`: per fraction both paths forced and the chosen one,
    each against REFRESH, the MV equal to the refreshed view every time."""
    from smile.bench.push_paths import bench_push_paths

    report = bench_push_paths(cloud.topology, 3000, (0.01, 0.5))
    assert [r["fraction"] for r in report["rounds"]] == [0.01, 0.5]
    for r in report["rounds"]:
        assert r["mv_equal"] is True, r
        assert r["chosen"] in ("incremental", "recompute", "mixed")
        for key in ("incremental_s", "recompute_s", "chosen_s", "refresh_s", "speedup",
                    "us_per_delta_row_vertex"):
            assert isinstance(r[key], float) and r[key] > 0, key
        assert r["operators"]["recompute"]["recompute"]["rows"] > 0
        assert set(r["cpu_s"]) == {"incremental", "recompute", "chosen"}
        for value in (r["refresh_cpu_s"], r["cpu_speedup"], *r["cpu_s"].values()):
            assert isinstance(value, float) and value > 0, r
        # each path's CPU split by kind of process, the kinds adding up to its CPU
        assert set(r["cpu_by_kind"]) == set(r["cpu_s"])
        for p, kinds in r["cpu_by_kind"].items():
            assert kinds and sum(kinds.values()) == pytest.approx(
                r["cpu_s"][p], rel=0.01, abs=0.02), r


def test_the_cpu_meter_counts_a_busy_backend_and_not_a_remote_one(cloud: CloudHandle) -> None:
    """`bench.cpu`: a statement that keeps its backend busy is counted (its ticks are
    the backend's, not this process's, and split by kind they are a client backend's), and
    so is one whose work its parallel workers do (born and gone within the part: their
    postmaster's reaped children); a cluster on another host is not measured."""
    from smile.bench.cpu import CpuMeter, total

    p = f"cpu{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} AS SELECT i FROM generate_series(1, 3000000) i")
                     .format(sql.Identifier(p)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(p)))
        try:
            for setup, query in (
                    ((), "SELECT count(*) FROM generate_series(1, 4000000)"),
                    (("SET max_parallel_workers_per_gather = 2",
                      "SET parallel_leader_participation = off",
                      "SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0"),
                     f"SELECT count(*) FROM {p} WHERE i % 7 = 3")):
                for s in setup:
                    conn.execute(s)
                if setup:  # the workers do the scan
                    plan = "\n".join(r[0] for r in conn.execute(f"EXPLAIN {query}"))
                    assert "Workers Planned: 2" in plan, plan
                meter = CpuMeter([conn])
                before = meter.take()
                started = time.process_time()
                conn.execute(query)
                mine = time.process_time() - started
                after = meter.take()
                kinds = meter.by_kind(before, after)
                spent = total(kinds)
                assert spent is not None and spent - mine >= 0.1, (query, spent, mine)
                # split by kind: the backend's own work, or its workers' once reaped
                kind = "reaped" if setup else "client backend"
                assert kinds is not None and kinds[kind] >= 0.1, (query, kinds)
        finally:
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(p)))

        class Remote:
            class info:  # the shape of a psycopg connection's `info`
                host = "10.0.0.7"

        assert CpuMeter([conn, Remote()]).take() is None
