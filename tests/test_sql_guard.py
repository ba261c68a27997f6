"""The sharing SQL guard, pure: every entry of the adversarial corpus is refused by the parser
with a PlanError that says what (never another exception, never a crash, however deep or
long), and adversarial-looking identifiers that are harmless are accepted and come out quoted
in what is generated."""

from __future__ import annotations

import pytest
from pglast import parse_sql

from smile.dataset.catalog_model import paper_catalog
from smile.errors import PlanError
from smile.operators.rewrite import rewrite_columns
from smile.optimizer.expr import split_ref
from smile.optimizer.parse_spj import MAX_DEPTH, MAX_SQL, parse_query
from smile.optimizer.sharing import ColRef
from tests.adversarial_sql import ACCEPTED, REFUSED

CAT = paper_catalog(machines=3)


def test_the_corpus_is_large_enough() -> None:
    assert len(REFUSED) >= 50


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused(case: str) -> None:
    with pytest.raises(PlanError) as refused:
        parse_query(REFUSED[case], CAT)
    assert refused.value.message  # a message a user can read
    assert "Traceback" not in refused.value.message


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_accepted_and_regenerated(case: str) -> None:
    q = parse_query(ACCEPTED[case], CAT).core
    for p in q.projections:  # each output regenerates to one expression, nothing more
        text = rewrite_columns(p.sql, lambda a, c: ("t", f"{a}__{c}"))
        assert len(parse_sql(f"SELECT {text} AS x FROM t")) == 1
    for s in q.selections:
        text = rewrite_columns(s.sql, lambda a, c: ("t", f"{a}__{c}"))
        stmts = parse_sql(f"SELECT 1 FROM t WHERE {text}")
        assert len(stmts) == 1


def test_limits_are_named() -> None:
    with pytest.raises(PlanError, match=f"at most {MAX_SQL}"):
        parse_query(REFUSED["one_megabyte"], CAT)
    deep = "SELECT u.uid FROM users u WHERE " + "NOT " * 100 + "u.uid = 1"
    with pytest.raises(PlanError, match=f"deeper than {MAX_DEPTH}"):
        parse_query(deep, CAT)
    with pytest.raises(PlanError, match=r"operator"):
        parse_query(REFUSED["operator_schema"], CAT)
    with pytest.raises(PlanError, match="regclass"):
        parse_query(REFUSED["regclass"], CAT)
    with pytest.raises(PlanError, match=r"evil\.lower"):
        parse_query(REFUSED["evil_schema_fn"], CAT)


def test_output_names_are_kept_exactly() -> None:
    q = parse_query(ACCEPTED["quoted_output"], CAT).core
    assert [p.name for p in q.projections] == ['we"ird; DROP TABLE users --']


def test_long_names_are_truncated_as_postgresql_does() -> None:
    q = parse_query(ACCEPTED["long_name"], CAT).core
    assert [p.name for p in q.projections] == ["x" * 63]


def test_a_column_name_with_quotes_cannot_escape_its_reference() -> None:
    """Column names are the table owner's: `*` writes them as references that are parsed
    again, so a quote in one must stay inside the identifier."""
    evil = 'a"||(SELECT min(z.z) FROM pg_shadow z)--'
    ref = ColRef("users", evil)
    assert split_ref(ref.sql()) == ("users", evil)
    text = rewrite_columns(ref.sql(), lambda a, c: ("t", f"{a}__{c}"))
    stmt = parse_sql(f"SELECT {text} FROM t")[0].stmt
    assert [type(t.val).__name__ for t in stmt.targetList] == ["ColumnRef"]
