"""The operators against brute force: a 2-way join kept by Join/Union/DeltaToRel over random
histories (bags, NULL keys, equal timestamps on both sides), shadow copies at
arbitrary timestamps, pushes in any order and repeated — after every push J(t) = A(t) ⋈ B(t).
Also CopyDelta between two machines."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from unittest.mock import patch

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.bench import join_plan
from smile.delta_capture.registry import ensure_capture_schema
from smile.operators import join as join_module
from smile.operators.copy_delta import copy_delta
from smile.operators.delta_to_rel import delta_to_rel
from smile.operators.join import JoinSpec, Side, join_delta
from smile.operators.join_spark import join_delta_spark
from smile.operators.probes import choose_probe, index_stats, most_distinct, probes_pay_at
from smile.operators.union import union
from tests.fix_cloud import NO_JIT

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_n = itertools.count()


def ts(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


Row = tuple[int | None, str]


def _state(history: list[tuple[int, str, int, Row]], side: str, t: int) -> Counter[Row]:
    bag: Counter[Row] = Counter()
    for when, s, sign, row in history:
        if s == side and when <= t:
            bag[row] += sign
    return +bag


def _join(a: Counter[Row], b: Counter[Row]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for (ka, va), na in a.items():
        for (kb, vb), nb in b.items():
            if ka is not None and ka == kb:
                out[(ka, va, vb)] += na * nb
    return out


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, str, int, Row]]:
    """Changes (time, side, sign, row); deletions only of rows present; equal times allowed."""
    live: dict[str, Counter[Row]] = {"a": Counter(), "b": Counter()}
    out = []
    t = 0
    for _ in range(draw(st.integers(1, 25))):
        t += draw(st.sampled_from([0, 0, 1, 2]))  # equal timestamps across sides matter
        side = draw(st.sampled_from("ab"))
        present = sorted(live[side].elements(), key=repr)
        if present and draw(st.integers(0, 3)) == 0:
            # an UPDATE of a column no join reads (`n` in a's delta): a − and a + of one row
            row = draw(st.sampled_from(present))
            out += [(t, side, -1, row), (t, side, 1, row)]
            continue
        if present and draw(st.booleans()):
            row = draw(st.sampled_from(present))
            sign = -1
        else:
            row = (draw(st.one_of(st.none(), st.integers(0, 2))), draw(st.sampled_from("xy")))
            sign = 1
        live[side][row] += sign
        out.append((t, side, sign, row))
    return out


def _setup(conn: psycopg.Connection[Any], p: str) -> None:
    ensure_capture_schema(conn)
    for name, cols in ((f"{p}_a", "k int, v text"), (f"{p}_b", "k int, w text")):
        conn.execute(sql.SQL(f"CREATE TABLE {{}} ({cols})").format(sql.Identifier(name)))
        conn.execute(sql.SQL(f"CREATE TABLE {{}} ({cols}, n int, __sign smallint, "
                             "__ts timestamptz)").format(sql.Identifier(f"{name}_d")))
    for name in (f"{p}_p1", f"{p}_p2", f"{p}_dj"):
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, w text, __sign smallint, "
                             "__ts timestamptz)").format(sql.Identifier(name)))
    conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, w text)").format(
        sql.Identifier(f"{p}_j")))


def _stamp(conn: psycopg.Connection[Any], p: str, deltas: datetime, b: datetime) -> None:
    """The timestamps of `_a_join_b`'s vertices: both deltas complete to `deltas`, b̂ at `b`,
    the destination at 0."""
    conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s), (%s, %s), (%s, %s), (%s, %s)",
                 (f"{p}:da", deltas, f"{p}:db", deltas, f"{p}:b", b, f"{p}:p1", ts(0)))


def _a_join_b(p: str, side: Literal["left", "right"],
              filters: tuple[tuple[Literal["d", "x"], str], ...] = ()) -> JoinSpec:
    """Δ(Δa ⋈ b) into `p_p1`, a's delta carrying a column `n` the join does not read."""
    return JoinSpec(
        Side(("public", f"{p}_a_d"), f"{p}:da",
             {("a", "k"): "k", ("a", "v"): "v", ("a", "n"): "n"}),
        Side(("public", f"{p}_b"), f"{p}:b", {("b", "k"): "k", ("b", "w"): "w"}),
        Side(("public", f"{p}_b_d"), f"{p}:db", {("b", "k"): "k", ("b", "w"): "w"}),
        ("public", f"{p}_p1"), f"{p}:p1", ((("a", "k"), ("b", "k")),),
        ((("a", "k"), "k"), (("a", "v"), "v"), (("b", "w"), "w")), side, filters)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_join_union_delta_to_rel_equal_the_query(cloud: CloudHandle, history: Any,
                                                 data: st.DataObject) -> None:
    end = max(h[0] for h in history) + 1
    p = f"op{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        _setup(conn, p)
        # DeltaToRel finds the rows leaving a relation through an index on k, if it has one
        # (statistics unknown: it takes it), else in one pass
        for rel in ("a", "b", "j"):
            if data.draw(st.booleans()):
                conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(
                    sql.Identifier(f"{p}_{rel}")))
        # deltas complete up to `end`; shadows and J start at random points
        for side in "ab":
            # `n`, a column of the source that no join reads, differs in every change
            rows = [(r[0], r[1], i, sign, ts(when))
                    for i, (when, s, sign, r) in enumerate(history) if s == side]
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(
                    sql.Identifier(f"{p}_{side}_d")), rows)
        sa, sb, t0 = (data.draw(st.integers(-1, end)) for _ in range(3))
        for side, s0 in (("a", sa), ("b", sb)):
            rows = list(_state(history, side, s0).elements())
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                    sql.Identifier(f"{p}_{side}")), rows)
        j0 = list(_join(_state(history, "a", t0), _state(history, "b", t0)).elements())
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(
                sql.Identifier(f"{p}_j")), j0)
        marks = {f"{p}:da": end, f"{p}:db": end, f"{p}:a": sa, f"{p}:b": sb,
                 f"{p}:p1": t0, f"{p}:p2": t0, f"{p}:dj": t0, f"{p}:j": t0}
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO _smile.vertex_ts VALUES (%s, %s)",
                            [(k, ts(v)) for k, v in marks.items()])
    A = Side(("public", f"{p}_a"), f"{p}:a", {("a", "k"): "k", ("a", "v"): "v"})
    dA = Side(("public", f"{p}_a_d"), f"{p}:da",
              {("a", "k"): "k", ("a", "v"): "v", ("a", "n"): "n"})
    B = Side(("public", f"{p}_b"), f"{p}:b", {("b", "k"): "k", ("b", "w"): "w"})
    dB = Side(("public", f"{p}_b_d"), f"{p}:db", {("b", "k"): "k", ("b", "w"): "w"})
    outs = ((("a", "k"), "k"), (("a", "v"), "v"), (("b", "w"), "w"))
    pred = ((("a", "k"), ("b", "k")),)
    pushes = data.draw(st.lists(st.integers(t0, end), min_size=1, max_size=6))
    probes = st.sampled_from([None, "k"])  # the hint, taken only where k is indexed
    # joins are hashed, or planned freely as before (the benchmark's baseline): the same rows
    free = data.draw(st.booleans())
    # and X̂ is either probed once per driving row (a lateral subquery) or joined whole
    lateral = data.draw(st.booleans())
    # DeltaToRel nets only the rows sharing an indexed value with a leaving row (always, or
    # where that pays), or every row of the slice as before (the benchmark's baseline)
    split = data.draw(st.sampled_from([None, True, False]))
    at = t0
    with psycopg.connect(dsn, options=NO_JIT) as conn, \
            patch.object(join_module, "probes_pay_at", lambda *_: lateral):
        conn.autocommit = True
        for t in pushes:
            # a shadow copy may move on by itself (its own DeltaToRel) at any time
            if data.draw(st.booleans()):
                side = data.draw(st.sampled_from("ab"))
                to = data.draw(st.integers(-1, end))
                delta_to_rel(conn, delta=("public", f"{p}_{side}_d"), rel=("public", f"{p}_{side}"),
                             columns=["k", "v" if side == "a" else "w"],
                             rel_vertex=f"{p}:{side}", delta_vertex=f"{p}:d{side}", to_ts=ts(to),
                             probe=data.draw(probes), split=split)
            for _ in range(data.draw(st.integers(1, 2))):  # duplicated pushes are harmless
                join_delta(conn, JoinSpec(dA, B, dB, ("public", f"{p}_p1"), f"{p}:p1",
                                          pred, outs, "left"), ts(t), free_plan=free)
                join_delta(conn, JoinSpec(dB, A, dA, ("public", f"{p}_p2"), f"{p}:p2",
                                          ((("b", "k"), ("a", "k")),), outs, "right"), ts(t),
                           free_plan=free)
                union(conn, inputs=[(("public", f"{p}_p1"), f"{p}:p1"),
                                    (("public", f"{p}_p2"), f"{p}:p2")],
                      dst_table=("public", f"{p}_dj"), dst_vertex=f"{p}:dj",
                      columns=["k", "v", "w"], to_ts=ts(t))
                delta_to_rel(conn, delta=("public", f"{p}_dj"), rel=("public", f"{p}_j"),
                             columns=["k", "v", "w"], rel_vertex=f"{p}:j",
                             delta_vertex=f"{p}:dj", to_ts=ts(t), probe=data.draw(probes),
                             split=split)
            for part in (f"{p}_p1", f"{p}_p2"):  # joins write net rows: no cancelling pairs
                assert conn.execute(sql.SQL(
                    "SELECT count(*) FROM (SELECT 1 FROM {} GROUP BY k, v, w, __ts "
                    "HAVING min(__sign) <> max(__sign)) x").format(
                    sql.Identifier(part))).fetchone() == (0,)
            at = max(at, t)  # an older push than the last one changes nothing
            got = Counter(conn.execute(sql.SQL("SELECT k, v, w FROM {}").format(
                sql.Identifier(f"{p}_j"))).fetchall())
            want = _join(_state(history, "a", at), _state(history, "b", at))
            assert got == want, (t, at)


@contextmanager
def _delta_on_two_machines(cloud: CloudHandle, p: str
                           ) -> Iterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any]]]:
    """Connections to the first two machines, each with a delta table `p` (k, v)."""
    m1, m2 = cloud.topology.machines[0].dsn, cloud.topology.machines[1].dsn
    with psycopg.connect(m1, autocommit=True) as src, psycopg.connect(m2, autocommit=True) as dst:
        for conn in (src, dst):
            ensure_capture_schema(conn)
            conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, __sign smallint, "
                                 "__ts timestamptz)").format(sql.Identifier(p)))
        yield src, dst


def test_copy_delta_streams_between_machines(cloud: CloudHandle) -> None:
    p = f"cp{next(_n)}"
    with _delta_on_two_machines(cloud, p) as (src, dst):
        rows = [(i % 7, f"v\t{i}" if i % 3 else None, 1 if i % 4 else -1, ts(i)) for i in range(50)]
        with src.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(
                sql.Identifier(p)), rows)
        src.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{p}:src", ts(40)))
        dst.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{p}:dst", ts(9)))
        first = copy_delta(src, dst, src_table=("public", p), src_vertex=f"{p}:src",
                           dst_table=("public", p), dst_vertex=f"{p}:dst", columns=["k", "v"],
                           to_ts=ts(30), where="d.k <> 0")
        again = copy_delta(src, dst, src_table=("public", p), src_vertex=f"{p}:src",
                           dst_table=("public", p), dst_vertex=f"{p}:dst", columns=["k", "v"],
                           to_ts=ts(30))
        got = sorted(dst.execute(sql.SQL("SELECT k, v, __sign, __ts FROM {}").format(
            sql.Identifier(p))).fetchall(), key=repr)
        want = sorted([r for r in rows if ts(9) < r[3] <= ts(30) and r[0] != 0], key=repr)
        assert got == want and first.rows == len(want) and again.rows == 0
        from smile.errors import AgentError

        with pytest.raises(AgentError, match="complete only up to"):
            copy_delta(src, dst, src_table=("public", p), src_vertex=f"{p}:src",
                       dst_table=("public", p), dst_vertex=f"{p}:dst", columns=["k", "v"],
                       to_ts=ts(45))


def test_a_relation_as_of_any_time_equals_its_bag_there(cloud: CloudHandle) -> None:
    """`as_of_query` read at times before, at and after TS(R̂) — with delta rows in between
    (the bag arithmetic) and with none (R̂ read as it is): always R's bag at that time,
    duplicates and NULLs included."""
    from smile.operators.as_of import as_of_query

    p = f"ao{next(_n)}"
    start = [(1, "a"), (1, "a"), (2, None), (3, "c")]
    changes = [(1, "a", -1, 2), (4, "d", 1, 3), (2, None, -1, 4), (2, None, 1, 4),  # before R̂
               (3, "c", -1, 12), (5, None, 1, 13), (5, None, 1, 13)]  # after R̂ (TS 10)
    def at(t: int) -> Counter[tuple[Any, ...]]:
        bag = Counter(start)
        for k, v, sign, when in changes:
            if when <= t:
                bag[(k, v)] += sign
        return +bag
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text)").format(sql.Identifier(p)))
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, __sign smallint, "
                             "__ts timestamptz)").format(sql.Identifier(f"{p}_d")))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                sql.Identifier(p)), sorted(at(10).elements(), key=repr))
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(
                sql.Identifier(f"{p}_d")), [(k, v, s, ts(w)) for k, v, s, w in changes])
        conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{p}:r", ts(10)))
        for t in (0, 2, 3, 5, 8, 10, 11, 12, 13, 20):
            query = as_of_query(rel=("public", p), rel_vertex=f"{p}:r",
                                delta=("public", f"{p}_d"), columns=["k", "v"], t=ts(t))
            got = Counter(conn.execute(query).fetchall())
            assert got == at(t), t


def test_copy_delta_moves_rows_beyond_one_block_intact(cloud: CloudHandle) -> None:
    """A slice of several `PIPE_BLOCK`s (rows gathered into blocks on the way): every row
    arrives as it was, none twice, and the bytes counted are those of the COPY text."""
    from smile.db import PIPE_BLOCK

    p = f"cp{next(_n)}"
    with _delta_on_two_machines(cloud, p) as (src, dst):
        src.execute(sql.SQL("INSERT INTO {} SELECT i, repeat(md5(i::text), 1 + i %% 3) || E'\\t', "
                            "(1 - 2 * (i %% 2))::smallint, %s FROM generate_series(1, 40000) i"
                            ).format(sql.Identifier(p)), (ts(5),))
        src.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{p}:src", ts(10)))
        dst.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{p}:dst", ts(1)))
        done = copy_delta(src, dst, src_table=("public", p), src_vertex=f"{p}:src",
                          dst_table=("public", p), dst_vertex=f"{p}:dst", columns=["k", "v"],
                          to_ts=ts(10))
        digest = sql.SQL("SELECT count(*), md5(string_agg(k || '/' || v || '/' || __sign, ','"
                         " ORDER BY k)) FROM {}").format(sql.Identifier(p))
        text = src.execute(sql.SQL("SELECT sum(octet_length(k || E'\\t' || "
                                   "replace(v, E'\\t', E'\\\\t') || E'\\t' || __sign || E'\\t' || "
                                   "__ts::text || E'\\n')) FROM {}").format(sql.Identifier(p))
                           ).fetchone()
        assert text is not None and text[0] > 3 * PIPE_BLOCK  # several blocks
        assert dst.execute(digest).fetchone() == src.execute(digest).fetchone()
        assert done.rows == 40000 and done.bytes == text[0]


def test_a_join_drops_changes_of_columns_it_does_not_read_before_joining(
        cloud: CloudHandle) -> None:
    """An UPDATE of a column the join does not read (a's `n`) is a − and a + row that cancel
    in the driving slice: the join reads nothing from it, where it used to meet every matching
    row of X̂ twice (a user's follower count × 2,700 of their rows, 3.6M rows a push). A real
    change of a read column still goes through."""
    p = f"jc{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("INSERT INTO {} SELECT 1, 'w' || i FROM generate_series(1, 50) i")
                     .format(sql.Identifier(f"{p}_b")))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'x', 1, -1, %s), (1, 'x', 2, 1, %s), "
                             "(1, 'x', 3, -1, %s), (1, 'y', 4, 1, %s)").format(
            sql.Identifier(f"{p}_a_d")), (ts(1), ts(1), ts(2), ts(2)))
        _stamp(conn, p, deltas=ts(2), b=ts(2))
        spec = _a_join_b(p, "left")
        d, _ = join_module.input_queries(conn, spec, ts(0), ts(2), ts(2))
        assert sorted(conn.execute(d).fetchall()) == [(1, "x", -1, ts(2)), (1, "y", 1, ts(2))]
        done = join_delta(conn, spec, ts(2))
        assert done.rows == 100
        assert conn.execute(sql.SQL("SELECT v, sum(__sign) FROM {} GROUP BY v ORDER BY v")
                            .format(sql.Identifier(f"{p}_p1"))).fetchall() == [
            ("x", -50), ("y", 50)]


def test_a_join_with_nothing_to_do_does_not_wait_for_the_relation_it_probes(
        cloud: CloudHandle) -> None:
    """A join already at its target takes no share lock on X̂ (its lock's statement reads X̂
    only when behind): a DeltaToRel holding X̂ for seconds does not hold it up; one behind
    does wait for it."""
    p = f"jw{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        _setup(conn, p)
        _stamp(conn, p, deltas=ts(2), b=ts(2))
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = %s", (ts(1), f"{p}:p1"))
    spec = _a_join_b(p, "left")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as conn:
        holder.execute("SELECT 1 FROM _smile.vertex_ts WHERE vertex = %s FOR UPDATE",
                       (f"{p}:b",))  # X̂'s DeltaToRel, running
        conn.execute("SET lock_timeout = '500ms'")
        assert join_delta(conn, spec, ts(1)) == join_module.Joined(ts(1), ts(1), 0)
        with pytest.raises(psycopg.errors.LockNotAvailable):
            join_delta(conn, spec, ts(2))
        holder.rollback()
        assert join_delta(conn, spec, ts(2)).to_ts == ts(2)


def test_a_join_drops_changes_the_other_side_made_to_columns_it_does_not_read(
        cloud: CloudHandle) -> None:
    """The other side's delta is consolidated too, per (columns the join reads, timestamp):
    an UPDATE of a column it does not read (b's `n`, a user's follower count) is a − and a +
    row that cancel before the join, where each used to meet every driving row of its key (a
    busy user's 13k driving rows × its updates: 651k rows sorted on disk to sum to nothing).
    A real change of a read column (`w`) still reaches the driving rows after it."""
    p = f"jo{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'w')").format(
            sql.Identifier(f"{p}_b")))
        # b's changes: `n` updated at 1 (backed out of b̂, at TS 2) and at 3 (after it), `w`
        # changed at 4
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'w', 1, -1, %s), (1, 'w', 2, 1, %s), "
                             "(1, 'w', 2, -1, %s), (1, 'w', 3, 1, %s), (1, 'w', 3, -1, %s), "
                             "(1, 'z', 3, 1, %s)").format(sql.Identifier(f"{p}_b_d")),
                     (ts(1), ts(1), ts(3), ts(3), ts(4), ts(4)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'x', 0, 1, %s), (1, 'y', 0, 1, %s), "
                             "(1, 'q', 0, 1, %s), (1, 'r', 0, 1, %s)").format(
            sql.Identifier(f"{p}_a_d")), (ts(1), ts(3), ts(4), ts(5)))
        _stamp(conn, p, deltas=ts(5), b=ts(2))
        spec = _a_join_b(p, "left")
        assert join_module.other_columns(spec) == [(("b", "k"), "k"), (("b", "w"), "w")]
        _, xs = join_module.input_queries(conn, spec, ts(0), ts(5), ts(2))
        assert conn.execute(xs[1]).fetchall() == []
        assert sorted(conn.execute(xs[2]).fetchall()) == [(1, "w", -1, ts(4), 2),
                                                          (1, "z", 1, ts(4), 2)]
        assert join_delta(conn, spec, ts(5)).rows == 4
        assert sorted(conn.execute(sql.SQL("SELECT v, w, __sign FROM {}").format(
            sql.Identifier(f"{p}_p1"))).fetchall()) == [
            ("q", "w", 1), ("r", "z", 1), ("x", "w", 1), ("y", "w", 1)]


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_a_folded_join_writes_the_net_rows_the_unfolded_one_writes(
        cloud: CloudHandle, history: Any, data: st.DataObject) -> None:
    """X̂ probed with what every driving row takes folded into it (`join._folded`, the delta
    parts bounded by the slice's span) against X̂ hash-joined whole, its compensation row by
    row and unbounded: the same net rows per (row, τ), X̂ at any TS behind or ahead of the
    slice, either side driving, equal timestamps across sides, with or without filters."""
    end = max(h[0] for h in history) + 1
    p = f"jq{next(_n)}"
    side: Literal["left", "right"] = data.draw(st.sampled_from(["left", "right"]))
    drive, other = ("a", "b") if side == "left" else ("b", "a")
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True,
                         options=NO_JIT) as conn:
        _setup(conn, p)
        for s_ in "ab":
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, 0, %s, %s)").format(
                    sql.Identifier(f"{p}_{s_}_d")),
                    [(r[0], r[1], sign, ts(when)) for when, s, sign, r in history if s == s_])
        at, t0 = data.draw(st.integers(-1, end)), data.draw(st.integers(-1, end))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                sql.Identifier(f"{p}_{other}")), list(_state(history, other, at).elements()))
            cur.executemany("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", [
                (f"{p}:da", ts(end)), (f"{p}:db", ts(end)), (f"{p}:{other}", ts(at)),
                (f"{p}:p1", ts(t0)), (f"{p}:p2", ts(t0))])
        cols = {"a": {("a", "k"): "k", ("a", "v"): "v"}, "b": {("b", "k"): "k", ("b", "w"): "w"}}
        outs = ((("a", "k"), "k"), (("a", "v"), "v"), (("b", "w"), "w"))
        dk, ok = (drive, "k"), (other, "k")
        filters: tuple[tuple[Literal["d", "x"], str], ...] = data.draw(st.sampled_from([
            (), (("d", "d.k <> 1"),), (("x", "x.k <> 2"),),
            (("d", "d.k <> 0"), ("x", "x.k <> 1"))]))
        for dst, probe in (("p1", True), ("p2", False)):
            spec = JoinSpec(Side(("public", f"{p}_{drive}_d"), f"{p}:d{drive}", cols[drive]),
                            Side(("public", f"{p}_{other}"), f"{p}:{other}", cols[other]),
                            Side(("public", f"{p}_{other}_d"), f"{p}:d{other}", cols[other]),
                            ("public", f"{p}_{dst}"), f"{p}:{dst}", ((dk, ok),), outs, side,
                            filters)
            with patch.object(join_module, "probes_pay_at", lambda *_, pr=probe: pr):
                join_delta(conn, spec, ts(end), consolidate_other=probe)
        net = [conn.execute(sql.SQL(
            "SELECT k, v, w, __ts, sum(__sign) FROM {} GROUP BY 1, 2, 3, 4 "
            "HAVING sum(__sign) <> 0 ORDER BY 1, 2, 3, 4").format(
            sql.Identifier(f"{p}_{t}"))).fetchall() for t in ("p1", "p2")]
        assert net[0] == net[1]


@pytest.mark.parametrize("probe", [True, False])
def test_a_probing_join_folds_what_every_driving_row_takes_into_x_hat(
        cloud: CloudHandle, probe: bool) -> None:
    """Where X̂ is probed, the rows of X's delta every driving row takes (stamped before the
    slice's first τ, to add) are summed with X̂'s rows of the slice's keys before the join
    (`__x`); those stamped within the slice's span still meet each driving row under its time
    condition. The rows written are those the unfolded hash join writes: b̂ at 2, b's key 1
    changed at 3 (before every driving row), key 2 at 6 (between a's rows at 5 and 7)."""
    p = f"jf{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True,
                         options=NO_JIT) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("INSERT INTO {} SELECT i, 'w' FROM generate_series(1, 500) i")
                     .format(sql.Identifier(f"{p}_b")))
        conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(sql.Identifier(f"{p}_b")))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(f"{p}_b")))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'w', 0, -1, %s), (1, 'z', 0, 1, %s), "
                             "(2, 'w', 0, -1, %s), (2, 'q', 0, 1, %s)").format(
            sql.Identifier(f"{p}_b_d")), (ts(3), ts(3), ts(6), ts(6)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'x', 0, 1, %s), (2, 'y', 0, 1, %s), "
                             "(2, 'u', 0, 1, %s)").format(sql.Identifier(f"{p}_a_d")),
                     (ts(4), ts(5), ts(7)))
        _stamp(conn, p, deltas=ts(7), b=ts(2))
        plans = _explain_to(conn)
        with patch.object(join_module, "probes_pay_at", lambda *_: probe):
            assert join_delta(conn, _a_join_b(p, "left"), ts(7)).rows == 3
        texts = [q["Query Text"] for q in plans if f"{p}_p1" in q["Query Text"]]
        assert any(("__x AS MATERIALIZED" in q) is probe for q in texts)
        assert sorted(conn.execute(sql.SQL("SELECT k, v, w, __sign, __ts FROM {}").format(
            sql.Identifier(f"{p}_p1"))).fetchall()) == [
            (1, "x", "z", 1, ts(4)), (2, "u", "q", 1, ts(7)), (2, "y", "w", 1, ts(5))]


@pytest.mark.parametrize("probe", [True, False])
def test_a_join_backs_out_a_change_stamped_at_the_slice_first_tau(
        cloud: CloudHandle, probe: bool) -> None:
    """The bound on the rows backed out is inclusive: b̂ at 1 holds b's change at 1, which a's
    change at 1 (the left side, seeing the right side before it) must not see."""
    p = f"jb{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True,
                         options=NO_JIT) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'z')").format(sql.Identifier(f"{p}_b")))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'w', 0, -1, %s), (1, 'z', 0, 1, %s)")
                     .format(sql.Identifier(f"{p}_b_d")), (ts(1), ts(1)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 'y', 0, 1, %s)").format(
            sql.Identifier(f"{p}_a_d")), (ts(1),))
        _stamp(conn, p, deltas=ts(1), b=ts(1))
        with patch.object(join_module, "probes_pay_at", lambda *_: probe):
            join_delta(conn, _a_join_b(p, "left"), ts(1))
        assert conn.execute(sql.SQL("SELECT k, v, w, __sign, __ts FROM {}").format(
            sql.Identifier(f"{p}_p1"))).fetchall() == [(1, "y", "w", 1, ts(1))]


def _reads(node: dict[str, Any], relation: str) -> bool:
    return node.get("Relation Name") == relation or any(
        _reads(child, relation) for child in node.get("Plans", []))


def _nested_over(node: dict[str, Any], relation: str) -> bool:
    """Whether a plan (auto_explain's JSON) joins `relation` by a nested loop (one over a
    function, as `generate_series` expands net counts into rows, is no join)."""
    children = node.get("Plans", [])
    if (node.get("Node Type") == "Nested Loop" and _reads(node, relation)
            and all(c.get("Node Type") != "Function Scan" for c in children)):
        return True
    return any(_nested_over(child, relation) for child in children)


def _explain_to(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Have `conn` send every statement's plan as auto_explain's JSON (a NOTICE); returns the
    list the plans are appended to, each {"Query Text": …, "Plan": …}, as they come."""
    plans: list[dict[str, Any]] = []

    def keep(d: psycopg.errors.Diagnostic) -> None:
        m = d.message_primary or ""
        if "plan:" in m:
            plans.append(json.loads(m[m.index("{"):]))

    conn.add_notice_handler(keep)
    conn.execute("LOAD 'auto_explain'")
    for setting in ("log_min_duration = 0", "log_format = json", "log_level = notice"):
        conn.execute(f"SET auto_explain.{setting}")
    return plans


def _per_row_subplan(node: dict[str, Any]) -> bool:
    """Whether a plan (auto_explain's JSON) runs a subquery once per row: a SubPlan its
    parent's expressions do not call `hashed` (a hashed one is built once and probed)."""
    said = " ".join(v for v in node.values() if isinstance(v, str))
    for child in node.get("Plans", []):
        if child.get("Parent Relationship") == "SubPlan" and \
                f"hashed {child.get('Subplan Name')}" not in said:
            return True
        if _per_row_subplan(child):
            return True
    return False


def test_a_join_over_stale_delta_statistics_hashes_its_compensating_part(
        cloud: CloudHandle) -> None:
    """Statistics autoanalyze took a push before put the next slice past their histogram, a
    few rows to the planner: planned freely (the rule before), the compensating part — a
    range of X's delta with no index on the join key — sat in a nested loop against every
    driving row (0.3–1.2 s a push at 1000 tweets/s); joins are now hash-joined, the same
    rows."""
    dsn = cloud.topology.machines[0].dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        join_plan.setup_tables(conn, 2000, 2000, 20_000, 5000, fresh=False)
    try:
        plans, wrote = {}, {}
        for free in (True, False):
            with psycopg.connect(dsn) as conn:
                docs = _explain_to(conn)
                join_delta(conn, join_plan.spec(), join_plan.T1, free_plan=free)
                wrote[free] = conn.execute(
                    f"SELECT uid, v, w, __sign FROM {join_plan.SCHEMA}.out "
                    "ORDER BY 1, 2, 3, 4").fetchall()
                conn.rollback()
            inserts = [d["Plan"] for d in docs
                       if f'INSERT INTO "{join_plan.SCHEMA}"' in d["Query Text"]]
            assert len(inserts) == 1
            plans[free] = inserts[0]
        assert _nested_over(plans[True], "xd")  # the hazard is there to be avoided
        assert not _nested_over(plans[False], "xd")
        assert wrote[True] == wrote[False] and len(wrote[False]) == 8000
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            join_plan.drop_tables(conn)


def test_index_probes_are_taken_only_where_they_pay(cloud: CloudHandle) -> None:
    """From planner statistics (`index_stats`): a unique key is probed for a small input, not
    for a large one; a key shared by 100 rows each only for a tiny input (an MV on a join key:
    probing it per delta row once took a DeltaToRel minutes); an unknown size says so
    (None)."""
    p = f"pr{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (u int, g int)").format(sql.Identifier(p)))
        conn.execute(sql.SQL("INSERT INTO {} SELECT i, i % 100 FROM generate_series(1, 10000) i")
                     .format(sql.Identifier(p)))
        table = ("public", p)

        def pay(inputs: int, key: str | None) -> bool | None:
            stats = index_stats(conn, table)
            return probes_pay_at(stats.size, inputs, dict(stats.columns).get(key) if key else None)

        assert pay(10, "u") is None  # neither indexed nor analyzed: its size is unknown
        for c in ("u", "g"):
            conn.execute(sql.SQL("CREATE INDEX ON {} ({})").format(sql.Identifier(p),
                                                                  sql.Identifier(c)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(p)))
        assert pay(100, "u") is True  # 100 × 1 row × 16 < 10k
        assert pay(1000, "u") is False
        assert pay(1, "g") is True  # 1 × 100 rows × 16 < 10k
        assert pay(10, "g") is False
        assert pay(100, None) is True  # no key: as selective as can be
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(p)))


def test_delta_to_rel_updates_a_replaced_row_in_place(cloud: CloudHandle) -> None:
    """A key losing one row and gaining one is an UPDATE of one copy; everything else (a
    duplicate row losing two copies, a NULL key, a key with two arrivals) goes through
    deletions and insertions — and the bag comes out right either way."""
    p = f"ip{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    before = [(1, "a"), (1, "a"), (2, "b"), (2, "b"), (2, "b"), (None, "n"), (3, "c"), (4, "d")]
    changes = [(1, "a", -1), (1, "a2", 1),  # a pair: one copy of (1, a) becomes (1, a2)
               (2, "b", -1), (2, "b", -1),  # two copies leave
               (None, "n", -1), (None, "n2", 1),  # NULL key: never paired
               (3, "c", -1), (3, "c2", 1), (3, "c3", 1),  # two arrive: not a pair
               (5, "e", 1), (4, "d", 1), (4, "d", -1)]  # a plain insert; one that nets to 0
    with psycopg.connect(dsn) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(sql.Identifier(f"{p}_a")))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                sql.Identifier(f"{p}_a")), before)
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, 0, %s, %s)").format(
                sql.Identifier(f"{p}_a_d")), [(k, v, s, ts(1)) for k, v, s in changes])
            cur.executemany("INSERT INTO _smile.vertex_ts VALUES (%s, %s)",
                            [(f"{p}:a", ts(0)), (f"{p}:da", ts(1))])
        conn.commit()
    with psycopg.connect(dsn) as conn:  # a fresh backend: its statistics count only this
        done = delta_to_rel(conn, delta=("public", f"{p}_a_d"), rel=("public", f"{p}_a"),
                            columns=["k", "v"], rel_vertex=f"{p}:a", delta_vertex=f"{p}:da",
                            to_ts=ts(1), probe="k")
        counts = conn.execute("SELECT n_tup_upd, n_tup_del, n_tup_ins FROM "
                              "pg_stat_xact_user_tables WHERE relname = %s",
                              (f"{p}_a",)).fetchone()
        conn.commit()
        got = Counter(conn.execute(sql.SQL("SELECT k, v FROM {}").format(
            sql.Identifier(f"{p}_a"))).fetchall())
    want = Counter(before)
    for k, v, s in changes:
        want[(k, v)] += s
    assert got == +want
    assert counts == (1, 4, 4)  # (1,a)→(1,a2) in place; 2×(2,b), (None,n), (3,c) deleted
    assert (done.deleted, done.inserted) == (5, 5)


def test_delta_to_rel_nets_only_the_rows_that_share_a_key_with_a_leaving_row(
        cloud: CloudHandle) -> None:
    """A slice with rows leaving: the rows whose key no leaving row has go in as they are;
    those sharing one — a copy that cancels, a new row of a key that loses another, a NULL
    key — are netted. Split or not, the bag is the same."""
    p = f"sp{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    before = [(1, "a"), (1, "a"), (2, "b"), (None, "n"), (3, "c")]
    changes = [(1, "a", -1), (1, "a1", 1),  # key 1 loses a copy and gains a row: netted
               (2, "b", -1), (2, "b", 1),  # leaves and comes back: nets to nothing
               (None, "n", -1), (None, "m", 1),  # NULL keys are always netted
               (7, "g", 1), (7, "g", 1), (8, "h", 1), (3, "c2", 1)]  # no key leaves: as is
    want = Counter(before)
    for k, v, sign in changes:
        want[(k, v)] += sign
    with psycopg.connect(dsn) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("CREATE TABLE {} (LIKE {})").format(
            sql.Identifier(f"{p}_a2"), sql.Identifier(f"{p}_a")))
        for copy in ("a", "a2"):
            conn.execute(sql.SQL("CREATE INDEX ON {} (k)").format(sql.Identifier(f"{p}_{copy}")))
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                    sql.Identifier(f"{p}_{copy}")), before)
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, 0, %s, %s)").format(
                sql.Identifier(f"{p}_a_d")), [(k, v, s, ts(1)) for k, v, s in changes])
            cur.executemany("INSERT INTO _smile.vertex_ts VALUES (%s, %s)",
                            [(f"{p}:a", ts(0)), (f"{p}:a2", ts(0)), (f"{p}:da", ts(1))])
        conn.commit()
        docs = _explain_to(conn)
        for copy, split in (("a", True), ("a2", False)):
            done = delta_to_rel(conn, delta=("public", f"{p}_a_d"),
                                rel=("public", f"{p}_{copy}"), columns=["k", "v"],
                                rel_vertex=f"{p}:{copy}", delta_vertex=f"{p}:da", to_ts=ts(1),
                                probe="k", split=split)
            got = Counter(conn.execute(sql.SQL("SELECT k, v FROM {}").format(
                sql.Identifier(f"{p}_{copy}"))).fetchall())
            assert got == +want, split
            # one (1, a) → (1, a1) in place; (None, n) out, (None, m) and the four in
            assert (done.inserted, done.deleted) == (6, 2), split
            # keys 1 and 2 (a leaving row has them) and the NULLs; or all ten
            assert (done.read, done.netted) == (10, 6 if split else 10), split
        conn.commit()
    # the leaving keys are looked up in a hash built once, never by a subquery run per row
    # of the slice (an OR of `k IS NULL` with EXISTS was one: minutes on a capture backlog)
    not_in = [d for d in docs if "NOT IN" in d["Query Text"]]
    split_plans = [d["Plan"] for d in not_in if "__sign < 0" in d["Query Text"]]
    assert len(split_plans) == 2  # the insertion as it is, and the netting of the rest
    # and the whole slice netted in one statement leaves the pairs updated out the same way
    assert len(not_in) == 3
    assert not any(_per_row_subplan(d["Plan"]) for d in not_in)


def test_delta_to_rel_finds_leaving_rows_through_the_most_selective_index(
        cloud: CloudHandle) -> None:
    """An MV of a skewed join (`loc ⋈ tweets`: a user who tweets much and moves often has
    many rows per tweet and very many per user): the rows an edited tweet leaves are found
    through the index on the tweet, not the one on the user, and not by a pass over the MV;
    the index an MV is given is on its most distinct column; the bag comes out right."""
    p = f"sk{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    rel, delta = sql.Identifier(f"{p}_mv"), sql.Identifier(f"{p}_d")
    with psycopg.connect(dsn) as conn:
        ensure_capture_schema(conn)
        conn.execute(sql.SQL("CREATE TABLE {} (uid int, tid int, place text)").format(rel))
        # user 1: 100 tweets × 20 places; users 2..50001: one tweet, one place each
        conn.execute(sql.SQL(
            "INSERT INTO {} SELECT 1, t, 'p' || l FROM generate_series(1, 100) t, "
            "generate_series(1, 20) l UNION ALL "
            "SELECT u, 1000 + u, 'q' FROM generate_series(2, 50001) u").format(rel))
        conn.execute(sql.SQL("CREATE TABLE {} (uid int, tid int, place text, "
                             "__sign smallint, __ts timestamptz)").format(delta))
        # tweet 7 of user 1 deleted (its 20 rows leave), user 1 moves again (100 rows
        # arrive), 200 new users tweet
        conn.execute(sql.SQL(
            "INSERT INTO {d} SELECT 1, 7, 'p' || l, -1, %(t)s FROM generate_series(1, 20) l "
            "UNION ALL SELECT 1, t, 'p21', 1, %(t)s FROM generate_series(1, 100) t "
            "UNION ALL SELECT u, 1000 + u, 'q', 1, %(t)s FROM generate_series(60000, 60199) u"
        ).format(d=delta), {"t": ts(1)})
        table = ("public", f"{p}_mv")
        assert most_distinct(conn, table, ["uid", "tid", "place"]) is None  # not analyzed
        conn.execute(sql.SQL("ANALYZE {}").format(rel))
        assert most_distinct(conn, table, ["uid", "tid", "place"]) == "tid"
        for col in ("uid", "tid"):
            conn.execute(sql.SQL("CREATE INDEX ON {} ({})").format(rel, sql.Identifier(col)))
        conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s), (%s, %s)",
                     (f"{p}:mv", ts(0), f"{p}:d", ts(1)))
        # 20 lookups × ~20 rows (a tweet of user 1), not × ~2000 (user 1), beat a pass over
        # 52k rows; 5000 lookups do not
        stats = index_stats(conn, table)
        assert choose_probe(stats, {"uid": 20, "tid": 20}, "uid") == "tid"
        assert choose_probe(stats, {"uid": 5000, "tid": 5000}, "uid") is None
        want = Counter(conn.execute(sql.SQL("SELECT uid, tid, place FROM {}").format(rel))
                       .fetchall())
        for uid, tid, place, sign in conn.execute(sql.SQL(
                "SELECT uid, tid, place, __sign FROM {}").format(delta)).fetchall():
            want[(uid, tid, place)] += sign
        conn.commit()
    with psycopg.connect(dsn) as conn:  # a fresh backend: its statistics count only this
        done = delta_to_rel(conn, delta=("public", f"{p}_d"), rel=table,
                            columns=["uid", "tid", "place"], rel_vertex=f"{p}:mv",
                            delta_vertex=f"{p}:d", to_ts=ts(1), probe="uid")
        scans = conn.execute("SELECT seq_scan, idx_scan, idx_tup_fetch FROM "
                             "pg_stat_xact_user_tables "
                             "WHERE relname = %s", (f"{p}_mv",)).fetchone()
        conn.commit()
        got = Counter(conn.execute(sql.SQL("SELECT uid, tid, place FROM {}").format(rel))
                      .fetchall())
    assert got == +want
    assert (done.deleted, done.inserted) == (20, 300)
    assert scans is not None and scans[0] == 0 and scans[1] > 0  # no pass over the MV
    assert scans[2] < 2000  # no lookup went through user 1's 2000 rows


def test_bench_skewed_mv_pushes_both_indexes_to_the_same_bag_and_cleans_up(
        cloud: CloudHandle) -> None:
    """`smile bench skewed-mv` at a small scale: the MV it indexes by its most distinct
    column is indexed on the tweet, the three pushes (the second MV also with every row of
    the slice netted) leave the same bag (it raises otherwise), and nothing of it stays
    behind."""
    from smile.bench.skewed_mv import SCHEMA, bench_skewed_mv

    report = bench_skewed_mv(cloud.topology, users=300, inserts=200, repeat=1, tweets=400,
                             places=20)
    assert report["index_column"] == "tid"
    assert report["mv_rows"] > 5000 and report["rows_leaving"] == 150
    assert report["join_key_index_ms"] > 0 and report["most_distinct_index_ms"] > 0
    assert report["all_rows_netted_ms"] > 0 and report["split_ratio"] > 0
    with psycopg.connect(cloud.topology.machines[0].dsn) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (SCHEMA,)).fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM _smile.vertex_ts WHERE vertex LIKE %s",
                            (f"{SCHEMA}:%",)).fetchone() == (0,)


def test_bench_busy_key_join_writes_the_same_rows_both_ways_and_cleans_up(
        cloud: CloudHandle) -> None:
    """`smile bench busy-key-join` at a small scale: the push with the other side's delta
    consolidated and the one joining it row by row write the same rows (it raises otherwise),
    every driving row once (X̂ plus the updates of a column not read is one row per user), and
    nothing of it stays behind."""
    from smile.bench.busy_key_join import SCHEMA, bench_busy_key_join

    report = bench_busy_key_join(cloud.topology, slice_rows=600, busy_share=0.5, updates=20,
                                 users=50, repeat=1)
    assert report["busy_rows"] == 300 and report["rows_written"] == 600
    assert report["row_by_row_ms"] > 0 and report["consolidated_ms"] > 0
    with psycopg.connect(cloud.topology.machines[0].dsn) as conn:
        assert conn.execute("SELECT to_regnamespace(%s)", (SCHEMA,)).fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM _smile.vertex_ts WHERE vertex LIKE %s",
                            (f"{SCHEMA}:%",)).fetchone() == (0,)


@pytest.mark.spark
@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history=histories(), data=st.data())
def test_spark_join_writes_what_the_postgres_join_writes(cloud: CloudHandle, spark: Any,
                                                         history: Any,
                                                         data: st.DataObject) -> None:
    """Both engines, same inputs, same locks and timestamps: the same signed, stamped rows in
    the destination (with filters on either side and a shadow at a random point)."""
    end = max(h[0] for h in history) + 1
    p = f"sp{next(_n)}"
    dsn = cloud.topology.machines[0].dsn
    side = data.draw(st.sampled_from(["left", "right"]))
    shadow_at, start = data.draw(st.integers(-1, end)), data.draw(st.integers(-1, end - 1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        _setup(conn, p)
        conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, w text, __sign smallint, "
                             "__ts timestamptz)").format(sql.Identifier(f"{p}_p1s")))
        for s in "ab":
            with conn.cursor() as cur:
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s, %s)").format(
                    sql.Identifier(f"{p}_{s}_d")),
                    [(r[0], r[1], i, sign, ts(when))
                     for i, (when, x, sign, r) in enumerate(history) if x == s])
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                sql.Identifier(f"{p}_b")), list(_state(history, "b", shadow_at).elements()))
            cur.executemany("INSERT INTO _smile.vertex_ts VALUES (%s, %s)",
                            [(f"{p}:da", ts(end)), (f"{p}:db", ts(end)), (f"{p}:b", ts(shadow_at)),
                             (f"{p}:p1", ts(start)), (f"{p}:p1s", ts(start))])
        spec = _a_join_b(p, side, (("d", "d.v <> 'y' OR d.k IS NULL"),
                                   ("x", "x.w IS NOT NULL")))
        twin = replace(spec, dst_table=("public", f"{p}_p1s"), dst_vertex=f"{p}:p1s")
        to = ts(data.draw(st.integers(start, end)))
        pg = join_delta(conn, spec, to)
        on_spark = join_delta_spark(conn, dsn, spark, twin, to)
        assert join_delta_spark(conn, dsn, spark, twin, to).rows == 0  # idempotent
        assert pg.rows == on_spark.rows
        got = [Counter(conn.execute(sql.SQL("SELECT k, v, w, __sign, __ts FROM {}").format(
            sql.Identifier(t))).fetchall()) for t in (f"{p}_p1", f"{p}_p1s")]
        assert got[0] == got[1]
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = '_smile' "
                            "AND tablename LIKE 'stage_%%'").fetchone() == (0,)


def test_retention_prunes_what_every_reader_passed_and_a_lease_freezes_it(
        cloud: CloudHandle) -> None:
    import threading

    from smile.deploy import commands
    from smile.deploy.install import mirror_key
    from smile.deploy.physical import physical_name
    from smile.operators import retention

    dsn = cloud.topology.machines[2].dsn
    label = f"Δret{next(_n)}~test@m3"
    table = ("_smile", physical_name(label))
    ident = sql.Identifier(*table)
    r1, r2, far = f"{label}:r1", f"{label}:r2", mirror_key(f"{label}:far")
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        conn.execute(sql.SQL("CREATE TABLE {} (k int, __sign smallint, __ts timestamptz)"
                             ).format(ident))
        conn.execute(sql.SQL("INSERT INTO {} SELECT i, 1, %s + i * interval '1 s' "
                             "FROM generate_series(0, 99) i").format(ident), (T0,))
        for reader, at in ((r1, ts(30)), (r2, ts(60)), (far, ts(45))):
            conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (reader, at))
            conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s)", (label, reader))

        def left() -> list[int]:
            return [k for (k,) in conn.execute(sql.SQL("SELECT k FROM {} ORDER BY k").format(
                ident)).fetchall()]

        # the least reader (r1 at 30) has read rows 0..30: they go, in batches of 7
        assert retention.prune(conn, label, table, batch=7) == 31
        assert left() == list(range(31, 100))
        assert retention.pruned(conn, [label]) == {label: ts(30)}
        # r1 moves on: the mirror of a remote reader (45) is now the least
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = %s", (ts(70), r1))
        assert commands.prune_intermediates(conn) >= 15  # the agent's round finds it
        assert left() == list(range(46, 100))
        assert retention.pruned(conn, [label]) == {label: ts(45)}

        # a lease freezes it: readers move on, nothing more goes until it is released; a
        # lease an earlier install left (its deploy failed) goes with the next install's
        version = 10_000 + next(_n)
        assert commands.lease(conn, version - 1) >= 1
        assert commands.lease(conn, version) >= 1
        assert conn.execute("SELECT count(*) FROM _smile.vertex_ts WHERE vertex = %s", (
            commands.lease_key(version - 1),)).fetchone() == (0,)
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = ANY(%s)",
                     (ts(80), [r1, r2, far]))
        assert retention.prune(conn, label, table) == 0
        assert retention.pruned(conn, [label]) == {label: ts(45)}
        commands.release(conn, version=version)
        assert retention.prune(conn, label, table) == 35
        assert left() == list(range(81, 100))

        # a reader registered without a TS yet holds everything
        conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s)", (label, f"{label}:new"))
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = ANY(%s)",
                     (ts(95), [r1, r2, far]))
        assert retention.prune(conn, label, table) == 0

        # a lease being taken waits for a retention running, and one taken holds it out
        conn.execute("DELETE FROM _smile.delta_readers WHERE reader_vertex = %s",
                     (f"{label}:new",))
        with psycopg.connect(dsn, autocommit=True) as other:
            with other.transaction():
                retention.serialise(other)  # as a lease's transaction does
                done: list[int] = []
                pruner = threading.Thread(target=lambda: done.append(
                    retention.prune(conn, label, table)))
                pruner.start()
                pruner.join(1.0)
                assert pruner.is_alive() and not done
            pruner.join(10)
        assert done == [15] and left() == list(range(96, 100))

        # a table someone else holds (a withdrawal dropping it) is left for the next round,
        # promptly, with the machine's retention lock released behind it
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = ANY(%s)",
                     (ts(99), [r1, r2, far]))
        with psycopg.connect(dsn) as dropper:
            dropper.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ident))
            began = time.monotonic()
            assert retention.prune(conn, label, table) == 0
            assert time.monotonic() - began < 5
            with psycopg.connect(dsn) as lessee:  # the lock is free for a lease at once
                lessee.execute("SET lock_timeout = '2s'")
                retention.serialise(lessee)
            dropper.rollback()
        assert retention.prune(conn, label, table) == 4 and left() == []


def test_retention_truncates_a_delta_its_readers_took_whole_unless_someone_holds_it(
        cloud: CloudHandle) -> None:
    """A delta with no row past its readers' floor (an intermediate one between pushes) is
    emptied by TRUNCATE (a new file, no dead rows); one with newer rows, or one a reader is
    reading at that moment, loses the same rows by DELETE; either way `pruned` says how far.
    The lock refused leaves no ERROR in the server's log (read where the cluster is local):
    it is an answer, not a fault."""
    from smile.deploy.physical import physical_name
    from smile.operators import retention

    dsn = cloud.topology.machines[2].dsn
    label = f"Δtrunc{next(_n)}~test@m3"
    table = ("_smile", physical_name(label))
    ident = sql.Identifier(*table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        conn.execute(sql.SQL("CREATE TABLE {} (k int, __sign smallint, __ts timestamptz)"
                             ).format(ident))
        conn.execute(sql.SQL("CREATE INDEX ON {} (__ts)").format(ident))
        conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{label}:r", ts(0)))
        conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s)", (label, f"{label}:r"))

        def rows(lo: int, hi: int, reader_at: int) -> None:
            conn.execute(sql.SQL("INSERT INTO {} SELECT i, 1, %s + i * interval '1 s' "
                                 "FROM generate_series(%s::int, %s::int) i").format(ident),
                         (T0, lo, hi))
            conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = %s",
                         (ts(reader_at), f"{label}:r"))

        def state() -> tuple[int, int, int]:
            """(the table's file, rows left, rows deleted one by one so far)"""
            conn.execute("SELECT pg_stat_force_next_flush()")
            row = conn.execute(sql.SQL(
                "SELECT pg_relation_filenode(%s::regclass), (SELECT count(*) FROM {}), "
                "coalesce((SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = "
                "%s::regclass), 0)").format(ident), (ident.as_string(conn),) * 2).fetchone()
            assert row is not None
            return int(row[0]), int(row[1]), int(row[2])

        rows(0, 49, 49)  # every row read: one TRUNCATE
        file, _, deleted = state()
        assert retention.prune(conn, label, table) == 50
        after = state()
        assert after[0] != file and after[1:] == (0, deleted)
        assert retention.pruned(conn, [label]) == {label: ts(49)}

        rows(50, 99, 99)  # read whole again, but a reader is in the table: deleted instead
        file, _, deleted = state()
        machine = cloud.topology.machines[2].name
        log = cloud.local.pg_root / f"{machine}.log" if cloud.local is not None else None
        logged = log.stat().st_size if log is not None else 0  # (it must exist)
        with psycopg.connect(dsn) as reader:
            reader.execute(sql.SQL("SELECT count(*) FROM {}").format(ident))
            began = time.monotonic()
            assert retention.prune(conn, label, table) == 50
            assert time.monotonic() - began < 5  # it did not wait for the reader
            reader.rollback()
        assert state() == (file, 0, deleted + 50)
        if log is not None:
            with log.open("rb") as f:
                f.seek(logged)
                assert b"could not obtain lock" not in f.read()

        rows(100, 109, 104)  # rows past the floor: those below it are deleted
        file, _, deleted = state()
        assert retention.prune(conn, label, table) == 5
        assert state() == (file, 5, deleted + 5)
        assert retention.pruned(conn, [label]) == {label: ts(104)}


def test_a_retention_round_prunes_only_the_deltas_with_rows_their_readers_passed(
        cloud: CloudHandle) -> None:
    """`prune_due`: of four deltas — rows below the floor, none below it, a reader without
    a TS, no table — one is due and pruned; the others keep every row; a table the look
    finds locked makes every candidate be tried, and one dropped between the look and the
    prune is not an error."""
    from smile.deploy.physical import physical_name
    from smile.operators import retention

    dsn = cloud.topology.machines[2].dsn
    n = next(_n)
    labels = [f"Δdue{n}{k}~test@m3" for k in "abcd"]
    tables = {lb: ("_smile", physical_name(lb)) for lb in labels}
    with psycopg.connect(dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        for lb in labels[:3]:
            conn.execute(sql.SQL("CREATE TABLE {} (k int, __sign smallint, __ts timestamptz)"
                                 ).format(sql.Identifier(*tables[lb])))
            conn.execute(sql.SQL("CREATE INDEX ON {} (__ts)").format(
                sql.Identifier(*tables[lb])))
            conn.execute(sql.SQL("INSERT INTO {} SELECT i, 1, %s + i * interval '1 s' "
                                 "FROM generate_series(20, 39) i").format(
                sql.Identifier(*tables[lb])), (T0,))
        readers = {labels[0]: ts(25), labels[1]: ts(10), labels[2]: None, labels[3]: ts(50)}
        for lb, at in readers.items():
            conn.execute("INSERT INTO _smile.delta_readers VALUES (%s, %s)", (lb, f"{lb}:r"))
            if at is not None:
                conn.execute("INSERT INTO _smile.vertex_ts VALUES (%s, %s)", (f"{lb}:r", at))

        def count(lb: str) -> int:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(*tables[lb]))).fetchone()
            return int(row[0]) if row else -1

        assert retention.due(conn, tables) == [labels[0]]
        assert retention.prune_due(conn, tables) == 6  # rows 20..25
        assert [count(lb) for lb in labels[:3]] == [14, 20, 20]
        assert retention.due(conn, tables) == []  # nothing left below any floor
        assert retention.prune_due(conn, tables) == 0
        conn.execute("UPDATE _smile.vertex_ts SET ts = %s WHERE vertex = %s",
                     (ts(30), f"{labels[1]}:r"))
        assert retention.due(conn, tables) == [labels[1]]
        with psycopg.connect(dsn) as holder:  # a table the look cannot read within
            holder.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
                sql.Identifier(*tables[labels[1]])))  # LOCK_WAIT: every candidate is tried,
            assert retention.due(conn, tables) == [labels[0], labels[1]]  # and `prune`
            assert retention.prune_due(conn, tables) == 0  # leaves the held one be
            holder.rollback()
        conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(*tables[labels[1]])))
        # dropped between a look that found it due and its prune: not an error
        assert retention.prune(conn, labels[1], tables[labels[1]]) == 0
        assert retention.prune_due(conn, tables) == 0


def test_a_push_is_charged_the_cpu_its_backend_and_thread_took_not_its_waits(
        cloud: CloudHandle) -> None:
    """`CpuMeter` around work on a real backend: a query that burns CPU is counted (not more
    than its wall time), a wait on the server (`pg_sleep`) is not, a connection opened
    again (another backend) gives no figure, and a source machine's backend is counted."""
    from smile.agent.cpu_time import CpuMeter

    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        meter, t0 = CpuMeter(conn), time.perf_counter()
        conn.execute("SELECT sum(i) FROM generate_series(1, 3000000) i").fetchone()
        busy, wall = meter.seconds(conn), time.perf_counter() - t0
        assert busy is not None and 0.05 < busy <= 1.2 * wall + 0.02, (busy, wall)
        meter = CpuMeter(conn)
        conn.execute("SELECT pg_sleep(0.5)")
        idle = meter.seconds(conn)
        assert idle is not None and idle < 0.1, idle
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as other:
        assert meter.seconds(other) is None
    # a source's backend (a CopyDelta's COPY TO on another machine) is counted beside its own
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as own, \
            psycopg.connect(cloud.topology.machines[1].dsn, autocommit=True) as source:
        meter, t0 = CpuMeter(own, source), time.perf_counter()
        source.execute("SELECT sum(i) FROM generate_series(1, 3000000) i").fetchone()
        busy, wall = meter.seconds(own, source), time.perf_counter() - t0
        assert busy is not None and 0.05 < busy <= 1.2 * wall + 0.02, (busy, wall)
        assert CpuMeter(own).seconds(own) is not None
        assert meter.seconds(own) is None  # not the connections it was started on
