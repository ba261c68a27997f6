"""The Aggregate and Pad operators against brute force (docs/design/beyond_spj.md): random
histories of a bag (NULLs in keys and values, a group's last row deleted, the current min or
max deleted, duplicates, both sides of a join changed at one timestamp), the input's relation
copies at arbitrary timestamps, pushes to random targets — after every push the aggregate
equals PostgreSQL's GROUP BY of the input as of the target, and the padded rows' delta, rolled
to the target and to a random earlier point, equals PostgreSQL's anti-join there."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.delta_capture.registry import ensure_capture_schema
from smile.operators import vertex_ts
from smile.operators.aggregate import (
    AggregateSpec,
    Call,
    aggregate_delta,
    create_aggregate,
    fill_aggregate,
)
from smile.operators.pad import PadSide, PadSpec, pad_delta
from tests.fix_cloud import NO_JIT

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services

T0 = datetime(2026, 1, 1, tzinfo=UTC)
_n = itertools.count()
SETTINGS = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def ts(i: int) -> datetime:
    return T0 + timedelta(seconds=i)


def _norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Numbers compared by value, as SQL compares them (2.00 = 2)."""
    return tuple(v.normalize() if isinstance(v, Decimal) else v for v in row)


def _bag(conn: psycopg.Connection[Any], query: str) -> list[str]:
    return sorted(repr(_norm(r)) for r in conn.execute(query).fetchall())


def _state(table: str, cols: list[str], t: int) -> str:
    """A delta table's history rolled to t, as a bag."""
    c = ", ".join(cols)
    return (f"(SELECT {c} FROM (SELECT {c}, sum(__sign) AS n FROM {table} "
            f"WHERE __ts <= '{ts(t).isoformat()}' GROUP BY {c} HAVING sum(__sign) > 0) q, "
            "generate_series(1, q.n))")


@st.composite
def bag_history(draw: st.DrawFn, values: st.SearchStrategy[tuple[Any, ...]],
                sides: int = 1) -> list[tuple[int, int, int, tuple[Any, ...]]]:
    """Changes (time, side, sign, row): several per timestamp, deletions of rows present."""
    live: list[list[tuple[Any, ...]]] = [[] for _ in range(sides)]
    out = []
    t = 0
    for _ in range(draw(st.integers(1, 30))):
        t += draw(st.sampled_from([1, 1, 2]))
        for _ in range(draw(st.integers(1, 3))):
            side = draw(st.integers(0, sides - 1))
            if live[side] and draw(st.integers(0, 9)) < 4:
                row = draw(st.sampled_from(live[side]))
                live[side].remove(row)
                out.append((t, side, -1, row))
            else:
                row = draw(values)
                live[side].append(row)
                out.append((t, side, 1, row))
    return out


AGG_ROWS = st.tuples(st.sampled_from([1, 2, 3, None]), st.sampled_from(["a", "b", None]),
                     st.sampled_from([1, 5, 7, -3, None]),
                     st.sampled_from([Decimal("1.5"), Decimal(2), Decimal("0.25"), None]),
                     st.sampled_from(["p", "q", "r", None]))
CALLS = (Call("count", None), Call("count", "x"), Call("sum", "x"), Call("avg", "y"),
         Call("min", "x"), Call("max", "z"), Call("count", "z", True), Call("sum", "y"),
         Call("max", "y"))
ORACLE_CALLS = ("count(*), count(x), sum(x), avg(y), min(x), max(z), count(DISTINCT z), "
                "sum(y), max(y)")


def _agg_outputs(spec: AggregateSpec) -> str:
    out = []
    for i, c in enumerate(spec.calls):
        if c.func == "count":
            out.append("a.__n" if c.arg is None else f"a.d{i}" if c.distinct else f"a.nn{i}")
        elif c.func == "sum":
            out.append(f"CASE WHEN a.nn{i} > 0 THEN a.s{i} END")
        elif c.func == "avg":
            out.append(f"CASE WHEN a.nn{i} > 0 THEN a.s{i} / a.nn{i}::numeric END")
        else:
            out.append(f"a.m{i}")
    return ", ".join(out)


@SETTINGS
@given(history=bag_history(AGG_ROWS), data=st.data(), global_=st.booleans(),
       filtered=st.booleans())
def test_an_aggregate_equals_the_group_by_of_its_input(
        cloud: CloudHandle, history: list[tuple[int, int, int, tuple[Any, ...]]],
        data: st.DataObject, global_: bool, filtered: bool) -> None:
    p = f"ag{next(_n)}"
    where = ("x IS NULL OR x > 0",) if filtered else ()
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True,
                         options=NO_JIT) as conn:
        ensure_capture_schema(conn)
        conn.execute(f"CREATE TABLE {p}_d (g int, h text, x int, y numeric, z text, "
                     "__sign int, __ts timestamptz)")
        conn.execute(f"CREATE TABLE {p}_r (g int, h text, x int, y numeric, z text)")
        spec = AggregateSpec(("public", f"{p}_d"), f"{p}:d", ("public", f"{p}_a"), f"{p}:a",
                             () if global_ else ("g", "h"), CALLS, ("public", f"{p}_r"),
                             f"{p}:r", where, global_)
        end = history[-1][0]
        conn.cursor().executemany(f"INSERT INTO {p}_d VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                  [(*row, sign, ts(t)) for t, _, sign, row in history])
        vertex_ts.put(conn, {f"{p}:d": ts(end), f"{p}:a": ts(0), f"{p}:r": ts(0)})
        create_aggregate(conn, spec)
        cols = ["g", "h", "x", "y", "z"]
        keys = "" if global_ else "g, h, "
        wh = f" WHERE {where[0]}" if where else ""
        group = "" if global_ else " GROUP BY g, h"

        def oracle(t: int) -> list[str]:
            return _bag(conn, f"SELECT {keys}{ORACLE_CALLS} FROM {_state(f'{p}_d', cols, t)} "
                              f"AS s{wh}{group}")

        def mine() -> list[str]:
            return _bag(conn, f"SELECT {'' if global_ else 'a.g0, a.g1, '}"
                              f"{_agg_outputs(spec)} FROM {p}_a a")

        t0 = data.draw(st.integers(0, end), label="t0")
        with conn.transaction():
            fill_aggregate(conn, spec, sql.SQL(_state(f"{p}_d", cols, t0)))
        vertex_ts.put(conn, {f"{p}:a": ts(t0)})
        assert mine() == oracle(t0)
        now = t0
        while now < end:
            now = min(end, now + data.draw(st.integers(1, 8), label="step"))
            o = data.draw(st.integers(0, end), label="relation at")  # anywhere in time
            conn.execute(f"TRUNCATE {p}_r")
            conn.execute(f"INSERT INTO {p}_r SELECT * FROM {_state(f'{p}_d', cols, o)} s")
            vertex_ts.put(conn, {f"{p}:r": ts(o)})
            aggregate_delta(conn, spec, ts(now))
            assert mine() == oracle(now), f"pushed to {now}"
            aggregate_delta(conn, spec, ts(now))  # again: nothing to do
            assert mine() == oracle(now)


SIDE_ROWS = st.tuples(st.sampled_from([1, 2, 3, None]), st.sampled_from(["x", "x", "x", None]),
                      st.sampled_from(["a", "b"]))


@SETTINGS
@given(history=bag_history(SIDE_ROWS, sides=2), data=st.data(),
       kind=st.sampled_from(["left", "right", "full"]))
def test_padded_rows_equal_the_anti_join_at_every_point(
        cloud: CloudHandle, history: list[tuple[int, int, int, tuple[Any, ...]]],
        data: st.DataObject, kind: str) -> None:
    p = f"pd{next(_n)}"
    with psycopg.connect(cloud.topology.machines[0].dsn, autocommit=True) as conn:
        ensure_capture_schema(conn)
        for s in ("l", "r"):
            conn.execute(f"CREATE TABLE {p}_{s}d ({s}k int, {s}k2 text, {s}v text, "
                         "__sign int, __ts timestamptz)")
            conn.execute(f"CREATE TABLE {p}_{s} ({s}k int, {s}k2 text, {s}v text)")
        conn.execute(f"CREATE TABLE {p}_p (lk int, lk2 text, lv text, rk int, rk2 text, "
                     "rv text, __sign int, __ts timestamptz)")
        sides = {s: PadSide(("public", f"{p}_{s}"), f"{p}:{s}", ("public", f"{p}_{s}d"),
                            f"{p}:{s}d", (f"{s}k", f"{s}k2", f"{s}v"), (f"{s}k", f"{s}k2"))
                 for s in ("l", "r")}
        spec = PadSpec(sides["l"], sides["r"], kind, ("public", f"{p}_p"), f"{p}:p")  # type: ignore[arg-type]
        for side, s in enumerate(("l", "r")):
            rows = [(*row, sign, ts(t)) for t, sd, sign, row in history if sd == side]
            conn.cursor().executemany(f"INSERT INTO {p}_{s}d VALUES (%s, %s, %s, %s, %s)", rows)
        end = history[-1][0]
        vertex_ts.put(conn, {f"{p}:ld": ts(end), f"{p}:rd": ts(end)})

        def cols(s: str) -> list[str]:
            return [f"{s}k", f"{s}k2", f"{s}v"]

        def anti(t: int) -> str:
            ls, rs = _state(f"{p}_ld", cols("l"), t), _state(f"{p}_rd", cols("r"), t)
            match = "r.rk = l.lk AND r.rk2 = l.lk2"
            parts = []
            if kind in ("left", "full"):
                parts.append(f"SELECT l.*, NULL::int, NULL::text, NULL::text FROM {ls} l "
                             f"WHERE NOT EXISTS (SELECT 1 FROM {rs} r WHERE {match})")
            if kind in ("right", "full"):
                parts.append(f"SELECT NULL::int, NULL::text, NULL::text, r.* FROM {rs} r "
                             f"WHERE NOT EXISTS (SELECT 1 FROM {ls} l WHERE {match})")
            return " UNION ALL ".join(parts)

        def mine(t: int) -> list[str]:
            return _bag(conn, "SELECT * FROM " + _state(
                f"{p}_p", ["lk", "lk2", "lv", "rk", "rk2", "rv"], t) + " s")

        t0 = data.draw(st.integers(0, end), label="t0")
        conn.execute(f"INSERT INTO {p}_p SELECT *, 1, %s FROM ({anti(t0)}) x", (ts(t0),))
        vertex_ts.put(conn, {f"{p}:p": ts(t0)})
        now = t0
        while now < end:
            now = min(end, now + data.draw(st.integers(1, 6), label="step"))
            for s in ("l", "r"):
                o = data.draw(st.integers(0, end), label=f"{s} copy at")
                conn.execute(f"TRUNCATE {p}_{s}")
                conn.execute(f"INSERT INTO {p}_{s} SELECT * FROM "
                             f"{_state(f'{p}_{s}d', cols(s), o)} s")
                vertex_ts.put(conn, {f"{p}:{s}": ts(o)})
            pad_delta(conn, spec, ts(now))
            between = data.draw(st.integers(t0, now), label="checked at")
            for t in (now, between):  # exact at every timestamp, not only the last
                assert mine(t) == _bag(conn, anti(t)), f"pushed to {now}, read at {t}"
