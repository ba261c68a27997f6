"""SPJ parsing with pglast: what is accepted, what is refused and how it is reported."""

from __future__ import annotations

import pytest

from smile.dataset.catalog_model import paper_catalog
from smile.dataset.sharings import table1
from smile.errors import PlanError
from smile.optimizer.parse_spj import parse_sharing_sql
from smile.optimizer.sharing import ColRef, JoinPredicate

CAT = paper_catalog(machines=3)


def test_join_forms_are_equivalent() -> None:
    forms = [
        "SELECT u.uid, t.text FROM users u JOIN tweets t ON u.uid = t.uid",
        "SELECT u.uid, t.text FROM users u JOIN tweets t USING (uid)",
        "SELECT u.uid, t.text FROM users u, tweets t WHERE t.uid = u.uid",
    ]
    joins = {parse_sharing_sql(f, CAT).joins for f in forms}
    # aliases are canonical: the relation's name, whatever the author called it
    assert joins == {(JoinPredicate(ColRef("tweets", "uid"), ColRef("users", "uid")),)}


def test_selections_projections_and_resolution() -> None:
    q = parse_sharing_sql(
        "SELECT u.uid, lower(screen_name) AS sn, text FROM users u JOIN tweets t "
        "ON u.uid = t.uid WHERE t.lang IN ('en', 'es') AND (u.followers BETWEEN 1 AND 9 OR "
        "NOT u.screen_name LIKE 'a%') AND t.created_at IS NOT NULL", CAT)
    assert [s.alias for s in q.selections] == ["tweets", "users", "tweets"]
    assert q.selections[0].sql == "tweets.lang IN ('en', 'es')"
    assert [(p.name, p.sql, p.alias) for p in q.projections] == [
        ("uid", "users.uid", "users"), ("sn", "lower(users.screen_name)", "users"),
        ("text", "tweets.text", "tweets")]
    assert q.needed_columns("users") == frozenset({"uid", "screen_name"})


def test_star_and_self_join() -> None:
    q = parse_sharing_sql("SELECT a.uid AS a_uid, b.uid2 FROM socnet a JOIN socnet b "
                          "ON a.uid2 = b.uid", CAT)
    assert [r.relation for r in q.relations] == ["socnet", "socnet"]
    assert [r.alias for r in q.relations] == ["socnet", "socnet#2"]
    assert [p.sql for p in q.projections] == ["socnet.uid", '"socnet#2".uid2']
    q2 = parse_sharing_sql("SELECT * FROM urls", CAT)
    assert [p.name for p in q2.projections] == ["tid", "url"]


def test_all_table1_sharings_parse() -> None:
    for spec in table1():
        q = parse_sharing_sql(spec.sql, CAT)
        assert sorted(r.relation for r in q.relations) == sorted(spec.relations)
        assert len(q.joins) == len(spec.relations) - 1


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT uid FROM users WHERE uid IN (SELECT uid FROM tweets)", "a subquery"),
    ("SELECT uid FROM users ORDER BY uid", "ORDER BY"),
    ("SELECT uid FROM users LIMIT 3", "LIMIT"),
    ("SELECT uid, row_number() OVER () AS r FROM users", "window function"),
    ("SELECT uid, now() AS t FROM users", r"volatile function \(now\(\)\)"),
    ("SELECT uid FROM users WHERE created_at < CURRENT_TIMESTAMP", "volatile value"),
    ("SELECT u.uid FROM users u, tweets t", "cross join"),
    ("SELECT u.uid FROM users u CROSS JOIN tweets t", "cross join"),
    ("SELECT uid FROM users UNION SELECT uid FROM tweets", "set operation"),
    ("WITH x AS (SELECT 1) SELECT uid FROM users", "WITH"),
    ("SELECT nope FROM users", r"unknown column 'nope' \(columns: \{'users': \['uid'"),
    ("SELECT u.uid FROM userz u", r"unknown relation 'userz'; relations: \['curloc'"),
    ("SELECT uid FROM users u JOIN tweets t ON u.uid = t.uid", "ambiguous column 'uid'"),
    ("SELECT u.uid FROM users u JOIN tweets t ON u.uid < t.uid", "not an equality"),
    ("SELECT u.uid, t.uid FROM users u JOIN tweets t ON u.uid = t.uid", "duplicate output"),
    ("SELECT md5x(screen_name) AS h FROM users", "not known to be deterministic"),
    ("DELETE FROM users", "a sharing is a SELECT"),
    ("SELEC uid FROM users", "syntax error at line 1, column 1"),
])
def test_refusals_name_the_construct_and_position(sql: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_sharing_sql(sql, CAT)


def test_position_is_line_and_column() -> None:
    with pytest.raises(PlanError, match="a subquery, at line 2, column 26"):
        parse_sharing_sql("SELECT uid\nFROM   users u WHERE uid IN (SELECT 1)", CAT)


def test_a_column_lost_since_publication_is_refused_by_name() -> None:
    """A published column its table dropped, renamed or retyped (captured NULL since) may not
    be read: by name, unqualified, or through `*`; the table's other columns still may."""
    from dataclasses import replace
    lost = replace(CAT, relations=tuple(
        replace(r, lost=("screen_name",)) if r.name == "users" else r for r in CAT.relations))
    for sql in ("SELECT u.screen_name FROM users u", "SELECT uid FROM users "
                "WHERE screen_name = 'a'", "SELECT * FROM users"):
        with pytest.raises(PlanError, match=r"columns \['screen_name'\] of users \(on m\d\), "
                                            "which were dropped, renamed or retyped"):
            parse_sharing_sql(sql, lost)
    q = parse_sharing_sql("SELECT uid, followers FROM users", lost)
    assert [p.name for p in q.projections] == ["uid", "followers"]
