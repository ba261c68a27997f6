"""Exactly-once capture under random DML, SIGKILLs of the capturer and PostgreSQL restarts.

Triggers keep the true change history (aborted transactions leave nothing); at the end ΔR must
hold exactly that history, transaction by transaction, and R̂ rolled forward must equal R.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from psycopg import sql

from smile.delta_capture.publish import publish_relation, unpublish_relation
from smile.delta_capture.registry import delta_table, delta_vertex, shadow_table, shadow_vertex
from smile.operators import vertex_ts
from smile.operators.delta_to_rel import delta_to_rel
from tests.capture_helpers import (
    SYNC,
    CapturerProcess,
    audit_history,
    bag_difference,
    connect_retry,
    delta_history,
    fresh_name,
    install_audit,
    wait_caught_up,
)

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services

TEXTS = [None, "x", "y", "tab\there", "back\\slash", "line\nbreak", ""]
keys = st.integers(0, 4)
texts = st.sampled_from(TEXTS)
nums = st.one_of(st.none(), st.decimals(-100, 100, places=2, allow_nan=False))

op = st.one_of(
    st.tuples(st.just("ins"), st.integers(0, 1), keys, texts, nums),
    st.tuples(st.just("upd_v"), st.integers(0, 1), keys, texts),
    st.tuples(st.just("upd_k"), st.integers(0, 1), texts, keys),
    st.tuples(st.just("del"), st.integers(0, 1), keys),
    st.tuples(st.just("trunc"), st.integers(0, 1)),
)
txn = st.tuples(st.just("txn"), st.lists(op, min_size=1, max_size=5), st.booleans())
step = st.one_of(
    txn, txn, txn, txn,
    st.tuples(st.just("kill"), st.floats(0, 0.05)),
    st.tuples(st.just("restart"), st.sampled_from(["fast", "immediate"])),
)


def _run_op(conn: psycopg.Connection[Any], tables: list[str], o: tuple[Any, ...]) -> None:
    t = sql.Identifier(tables[o[1]])
    if o[0] == "ins":
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(t), o[2:])
    elif o[0] == "upd_v":
        conn.execute(sql.SQL("UPDATE {} SET v = %s WHERE k = %s").format(t), (o[3], o[2]))
    elif o[0] == "upd_k":  # updates of the key column, as join keys get updated
        conn.execute(sql.SQL("UPDATE {} SET k = %s WHERE v IS NOT DISTINCT FROM %s").format(t),
                     (o[3], o[2]))
    elif o[0] == "del":
        conn.execute(sql.SQL("DELETE FROM {} WHERE k = %s").format(t), (o[2],))
    else:
        conn.execute(sql.SQL("TRUNCATE {}").format(t))


@settings(max_examples=int(os.environ.get("SMILE_PROPERTY_EXAMPLES", "10")), deadline=None,
          database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=st.lists(step, min_size=3, max_size=15),
       seed_rows=st.lists(st.tuples(keys, texts, nums), max_size=6))
def test_delta_is_the_true_history(
    scratch: CloudHandle, program: list[tuple[Any, ...]], seed_rows: list[tuple[Any, ...]]
) -> None:
    assert scratch.local is not None
    dsn = scratch.topology.machines[0].dsn
    cluster = scratch.local.cluster("m1")
    tables = [fresh_name("pa"), fresh_name("pb")]
    with connect_retry(dsn) as conn:
        for t in tables:
            conn.execute(sql.SQL("CREATE TABLE {} (k int, v text, n numeric)").format(
                sql.Identifier(t)))
            with conn.cursor() as cur:  # rows before publishing go to the snapshot
                cur.executemany(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(
                    sql.Identifier(t)), seed_rows)
    for t in tables:
        publish_relation(dsn, f"public.{t}")
    with connect_retry(dsn) as conn:
        for t in tables:
            install_audit(conn, t)
    cap = CapturerProcess(scratch)
    cap.start()
    conn = psycopg.connect(dsn, options=SYNC)
    try:
        for s in program:
            if s[0] == "txn":
                for o in s[1]:
                    _run_op(conn, tables, o)
                conn.commit() if s[2] else conn.rollback()
            elif s[0] == "kill":
                time.sleep(s[1])
                cap.kill()
                cap.start()
            else:
                conn.close()
                cluster.restart(s[1])
                conn = psycopg.connect(dsn, options=SYNC)
        conn.close()
        wait_caught_up(dsn)
        with connect_retry(dsn) as check:
            for t in tables:
                assert delta_history(check, t) == audit_history(check, t), t
                # R̂ rolled forward to the watermark equals R, as a bag
                rel = f"public.{t}"
                delta_to_rel(check, delta=("_smile", delta_table("public", t)),
                             rel=("_smile", shadow_table("public", t)), columns=["k", "v", "n"],
                             rel_vertex=shadow_vertex("public", t),
                             delta_vertex=delta_vertex("public", t),
                             to_ts=vertex_ts.read(check, delta_vertex("public", t)))
                assert bag_difference(check, sql.Identifier("public", t),
                                      sql.Identifier("_smile", shadow_table("public", t))) == 0, rel
    finally:
        cap.stop()
        conn.close()
        for t in tables:
            unpublish_relation(dsn, f"public.{t}")
        with connect_retry(dsn) as c:
            for t in tables:
                c.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(t)))
            c.execute("DELETE FROM audit.log WHERE tbl = ANY(%s)", (tables,))


def test_decimal_strategy_is_exercised() -> None:
    """The strategy above must produce numerics with two places (the column is numeric)."""
    assert Decimal("1.50").as_tuple().exponent == -2
