"""The corpus beyond SPJ, pure: every accepted sharing parses into what it is (an aggregation,
an outer join, DISTINCT…), is planned by DPT/DPD into a plan whose every edge computes its
destination, and round-trips through the catalog's JSON; every refused one is refused with
what its 422 says. No services."""

from __future__ import annotations

import pytest

from smile.deploy.edge_specs import over_slots
from smile.deploy.physical import physical_plan
from smile.errors import PlanError
from smile.optimizer.admission import plan_sharing
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats
from smile.optimizer.codec import plan_from_json, plan_to_json
from smile.optimizer.parse_spj import parse_query
from smile.optimizer.plan import Aggregate, Pad
from smile.optimizer.sharing import Sharing
from tests.beyond_spj_corpus import ACCEPTED, REFUSED, SCHEMA

NAMES = {r: r for r in SCHEMA}
CAT = CatalogSnapshot(
    tuple(Machine(f"m{i}") for i in (1, 2, 3)),
    tuple(RelationStats(r, f"m{i + 1}", 1000, 10, tuple(ColumnStats(c, t, 50, 0.1, 4)
                                                         for c, t in cols))
          for i, (r, cols) in enumerate(SCHEMA.items())))


def test_the_corpus_is_large_enough() -> None:
    assert len(ACCEPTED) >= 80 and len(REFUSED) >= 30


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_parses_as_what_it_is(name: str) -> None:
    cls, sql = ACCEPTED[name]
    q = parse_query(sql.format(**NAMES), CAT)
    assert q.spj == (cls == "spj" or (cls == "merged" and "count" not in sql))
    if cls in ("group", "join_group", "global", "distinct", "having", "count_distinct",
               "outer_group"):
        assert q.aggregate is not None
        distinct = sql.startswith("SELECT DISTINCT")
        assert q.aggregate.global_ == ("GROUP BY" not in sql and not distinct)
    if cls in ("left", "right", "full", "outer_group"):
        assert q.outer is not None and q.outer.predicates


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_is_planned_and_stored(name: str) -> None:
    sql = ACCEPTED[name][1].format(**NAMES)
    decision = plan_sharing(CAT, Sharing(name, sql, 60, 0.001))
    assert decision.admitted and decision.plan is not None, decision.reason
    plan = decision.global_plan()
    assert plan.problems() == []
    assert plan_from_json(plan_to_json(plan)) == plan
    physical_plan(plan, CAT.schemas())
    kinds = {e.kind for e in plan.edges}
    q = parse_query(sql, CAT)
    assert ("aggregate" in kinds) == (q.aggregate is not None)
    assert ("pad" in kinds) == (q.outer is not None)
    for e in plan.edges:
        if isinstance(e, Aggregate):  # a min or max is recomputed from the input's relation
            assert (e.rel is not None) == e.dst.expr.agg.extreme
        if isinstance(e, Pad):
            assert len({v.machine for v in (*e.sources, e.dst)}) == 1
    entry = plan.sharings[0]
    if entry.mv.expr.agg:  # every output reads the aggregate's columns
        for _, text in entry.outputs:
            assert "__agg" not in over_slots(text, entry.mv.expr.agg)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_says_what(name: str) -> None:
    sql, message = REFUSED[name]
    with pytest.raises(PlanError) as refused:
        parse_query(sql.format(**NAMES), CAT)
    assert message in refused.value.message, refused.value.message


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT k, d FROM {t}", "the column {t}.d of type json, a type PostgreSQL cannot compare"),
    ("SELECT k, m FROM {t}", "of type mood, a type SMILE does not know"),
    ("SELECT k FROM {t} WHERE d IS NOT NULL", "of type json"),
])
def test_a_column_of_a_type_smile_cannot_compare_is_refused_by_name(sql: str,
                                                                   message: str) -> None:
    cat = CatalogSnapshot((Machine("m1"),), (RelationStats("t", "m1", 10, 1, (
        ColumnStats("k", "integer", 5, 0.0, 4), ColumnStats("d", "json", 5, 0.0, 20),
        ColumnStats("m", "mood", 3, 0.0, 4))),))
    with pytest.raises(PlanError) as refused:
        parse_query(sql.format(t="t"), cat)
    assert message.format(t="t") in refused.value.message
    assert parse_query("SELECT k FROM t", cat).core.needed_columns("t") == {"k"}
