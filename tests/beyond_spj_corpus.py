"""A corpus of sharings beyond SPJ over three small relations — `ra(k, v, n, x)`,
`rb(k, w, m)`, `rc(k, z)` — each accepted one in a class (aggregates, DISTINCT, HAVING, global
aggregates, outer joins, merged columns), and the ones that must be refused with what their
422 says. The pure parser test checks every entry; the live test runs the accepted ones over
random data and DML and holds each MV to PostgreSQL's answer."""

from __future__ import annotations

SCHEMA = {
    "ra": (("k", "integer"), ("v", "text"), ("n", "integer"), ("x", "numeric")),
    "rb": (("k", "integer"), ("w", "text"), ("m", "integer")),
    "rc": (("k", "integer"), ("z", "text")),
}

ACCEPTED: dict[str, tuple[str, str]] = {
    # name: (class, SQL with {ra}, {rb}, {rc} for the relations' names)
    # -- SPJ, as before
    "spj_single": ("spj", "SELECT a.k, a.v FROM {ra} a WHERE a.n > 1"),
    "spj_join": ("spj", "SELECT a.k, a.v, b.w FROM {ra} a JOIN {rb} b ON a.k = b.k"),
    "spj_three": ("spj", "SELECT a.v, b.w, c.z FROM {ra} a, {rb} b, {rc} c "
                         "WHERE a.k = b.k AND b.k = c.k"),
    "spj_expr": ("spj", "SELECT a.k, upper(a.v) AS uv, a.n * 2 AS n2 FROM {ra} a"),
    "spj_two_sides_expr": ("spj", "SELECT a.k, a.n + b.m AS nm FROM {ra} a JOIN {rb} b "
                                  "ON a.k = b.k"),
    # -- GROUP BY on one relation
    "count_star": ("group", "SELECT k, count(*) FROM {ra} GROUP BY k"),
    "count_col": ("group", "SELECT k, count(v) AS nv FROM {ra} GROUP BY k"),
    "sum_int": ("group", "SELECT k, sum(n) AS s FROM {ra} GROUP BY k"),
    "sum_numeric": ("group", "SELECT k, sum(x) AS s FROM {ra} GROUP BY k"),
    "avg_int": ("group", "SELECT k, avg(n) AS a FROM {ra} GROUP BY k"),
    "avg_numeric": ("group", "SELECT k, avg(x) AS a FROM {ra} GROUP BY k"),
    "min_int": ("group", "SELECT k, min(n) AS lo FROM {ra} GROUP BY k"),
    "max_int": ("group", "SELECT k, max(n) AS hi FROM {ra} GROUP BY k"),
    "min_text": ("group", "SELECT k, min(v) AS first_v FROM {ra} GROUP BY k"),
    "max_text": ("group", "SELECT k, max(v) AS last_v FROM {ra} GROUP BY k"),
    "all_five": ("group", "SELECT k, count(*) AS c, sum(n) AS s, avg(n) AS a, min(n) AS lo, "
                          "max(n) AS hi FROM {ra} GROUP BY k"),
    "two_keys": ("group", "SELECT k, v, count(*) AS c, sum(x) AS s FROM {ra} GROUP BY k, v"),
    "key_by_position": ("group", "SELECT v, count(*) AS c FROM {ra} GROUP BY 1"),
    "group_text_key": ("group", "SELECT v, sum(n) AS s, max(x) AS hi FROM {ra} GROUP BY v"),
    "sum_expr": ("group", "SELECT k, sum(n * 2 + 1) AS s FROM {ra} GROUP BY k"),
    "sum_cast": ("group", "SELECT k, sum(n::numeric) AS s FROM {ra} GROUP BY k"),
    "sum_function": ("group", "SELECT k, sum(length(v)) AS chars, avg(abs(n)) AS a, "
                              "max(round(x)) AS hi FROM {ra} GROUP BY k"),
    "output_expr": ("group", "SELECT k, count(*) * 10 AS c10, sum(n) - min(n) AS spread "
                             "FROM {ra} GROUP BY k"),
    "key_in_expr": ("group", "SELECT k + 1 AS k1, count(*) AS c FROM {ra} GROUP BY k"),
    "same_call_twice": ("group", "SELECT k, count(*) AS c, count(*) + 1 AS c1 FROM {ra} "
                                 "GROUP BY k"),
    "where_then_group": ("group", "SELECT k, count(*) AS c FROM {ra} WHERE v <> 'x' "
                                  "GROUP BY k"),
    "no_key_output": ("group", "SELECT count(*) AS c FROM {ra} GROUP BY v"),
    # -- aggregates over joins
    "join_count": ("join_group", "SELECT a.k, count(*) AS c FROM {ra} a JOIN {rb} b "
                                 "ON a.k = b.k GROUP BY a.k"),
    "join_sum_other": ("join_group", "SELECT a.v, sum(b.m) AS s FROM {ra} a JOIN {rb} b "
                                     "ON a.k = b.k GROUP BY a.v"),
    "join_max_other": ("join_group", "SELECT a.k, max(b.w) AS last_w FROM {ra} a JOIN {rb} b "
                                     "ON a.k = b.k GROUP BY a.k"),
    "join_min_both": ("join_group", "SELECT b.w, min(a.n) AS lo, min(b.m) AS mlo FROM {ra} a "
                                    "JOIN {rb} b ON a.k = b.k GROUP BY b.w"),
    "join_avg": ("join_group", "SELECT a.k, avg(b.m) AS am FROM {ra} a, {rb} b "
                               "WHERE a.k = b.k GROUP BY a.k"),
    "join_cross_expr": ("join_group", "SELECT a.k, sum(a.n * b.m) AS s FROM {ra} a JOIN {rb} b "
                                      "ON a.k = b.k GROUP BY a.k"),
    "join_group_other": ("join_group", "SELECT b.w, count(*) AS c, count(a.v) AS cv "
                                       "FROM {ra} a JOIN {rb} b ON a.k = b.k GROUP BY b.w"),
    "three_way_group": ("join_group", "SELECT c.z, count(*) AS c, sum(a.n) AS s FROM {ra} a "
                                      "JOIN {rb} b ON a.k = b.k JOIN {rc} c ON c.k = b.k "
                                      "GROUP BY c.z"),
    "join_two_keys": ("join_group", "SELECT a.k, b.w, count(*) AS c FROM {ra} a JOIN {rb} b "
                                    "ON a.k = b.k GROUP BY a.k, b.w"),
    "join_selection": ("join_group", "SELECT a.k, count(*) AS c FROM {ra} a JOIN {rb} b "
                                     "ON a.k = b.k WHERE b.m > 0 AND a.v IS NOT NULL "
                                     "GROUP BY a.k"),
    "self_join_group": ("join_group", "SELECT a1.k, count(*) AS c FROM {ra} a1 JOIN {ra} a2 "
                                      "ON a1.k = a2.k GROUP BY a1.k"),
    "join_all_five": ("join_group", "SELECT a.k, count(*) AS c, sum(b.m) AS s, avg(b.m) AS a, "
                                    "min(b.w) AS lo, max(a.x) AS hi FROM {ra} a JOIN {rb} b "
                                    "ON a.k = b.k GROUP BY a.k"),
    "join_using_group": ("join_group", "SELECT k, sum(m) AS s FROM {ra} JOIN {rb} USING (k) "
                                       "GROUP BY k"),
    "join_key_from_other": ("join_group", "SELECT b.k, count(*) AS c FROM {ra} a JOIN {rb} b "
                                          "ON a.k = b.k GROUP BY b.k"),
    "join_count_distinct": ("join_group", "SELECT a.k, count(DISTINCT b.w) AS ws FROM {ra} a "
                                          "JOIN {rb} b ON a.k = b.k GROUP BY a.k"),
    # -- global aggregates
    "global_count": ("global", "SELECT count(*) AS c FROM {ra}"),
    "global_sum": ("global", "SELECT sum(n) AS s, sum(x) AS sx FROM {ra}"),
    "global_avg": ("global", "SELECT avg(x) AS a FROM {ra}"),
    "global_min_max": ("global", "SELECT min(v) AS lo, max(v) AS hi FROM {ra}"),
    "global_where": ("global", "SELECT count(*) AS c, sum(n) AS s FROM {ra} WHERE n > 100"),
    "global_join": ("global", "SELECT count(*) AS c, max(b.m) AS hi FROM {ra} a JOIN {rb} b "
                              "ON a.k = b.k"),
    "global_count_distinct": ("global", "SELECT count(DISTINCT v) AS vs FROM {ra}"),
    "global_all": ("global", "SELECT count(*) AS c, count(n) AS cn, sum(n) AS s, avg(n) AS a, "
                             "min(n) AS lo, max(n) AS hi FROM {ra}"),
    # -- DISTINCT
    "distinct_one": ("distinct", "SELECT DISTINCT v FROM {ra}"),
    "distinct_two": ("distinct", "SELECT DISTINCT k, v FROM {ra}"),
    "distinct_renamed": ("distinct", "SELECT DISTINCT v AS value FROM {ra}"),
    "distinct_where": ("distinct", "SELECT DISTINCT k FROM {ra} WHERE n IS NOT NULL"),
    "distinct_join": ("distinct", "SELECT DISTINCT a.v, b.w FROM {ra} a JOIN {rb} b "
                                  "ON a.k = b.k"),
    "distinct_other_side": ("distinct", "SELECT DISTINCT b.w FROM {ra} a JOIN {rb} b "
                                        "ON a.k = b.k"),
    "distinct_three": ("distinct", "SELECT DISTINCT c.z FROM {ra} a, {rb} b, {rc} c "
                                   "WHERE a.k = b.k AND c.k = a.k"),
    "distinct_numeric": ("distinct", "SELECT DISTINCT x FROM {ra}"),
    # -- HAVING
    "having_count": ("having", "SELECT k, count(*) AS c FROM {ra} GROUP BY k "
                               "HAVING count(*) > 1"),
    "having_hidden": ("having", "SELECT k FROM {ra} GROUP BY k HAVING sum(n) > 3"),
    "having_key": ("having", "SELECT k, count(*) AS c FROM {ra} GROUP BY k HAVING k > 1"),
    "having_and": ("having", "SELECT v, sum(n) AS s FROM {ra} GROUP BY v "
                             "HAVING count(*) >= 2 AND sum(n) IS NOT NULL"),
    "having_avg": ("having", "SELECT k, avg(x) AS a FROM {ra} GROUP BY k HAVING avg(x) > 1"),
    "having_join": ("having", "SELECT a.k, count(*) AS c FROM {ra} a JOIN {rb} b ON a.k = b.k "
                              "GROUP BY a.k HAVING max(b.m) < 5"),
    "having_global": ("having", "SELECT count(*) AS c FROM {ra} HAVING count(*) > 2"),
    "having_min": ("having", "SELECT k, min(v) AS lo FROM {ra} GROUP BY k "
                             "HAVING min(v) <> 'a'"),
    # -- count(DISTINCT)
    "count_distinct": ("count_distinct", "SELECT k, count(DISTINCT v) AS vs FROM {ra} "
                                         "GROUP BY k"),
    "count_distinct_int": ("count_distinct", "SELECT v, count(DISTINCT n) AS ns FROM {ra} "
                                             "GROUP BY v"),
    "count_distinct_and_all": ("count_distinct", "SELECT k, count(*) AS c, count(v) AS cv, "
                                                 "count(DISTINCT v) AS dv FROM {ra} GROUP BY k"),
    "count_distinct_expr": ("count_distinct", "SELECT k, count(DISTINCT n * 2) AS d FROM {ra} "
                                              "GROUP BY k"),
    "two_count_distinct": ("count_distinct", "SELECT k, count(DISTINCT v) AS dv, "
                                             "count(DISTINCT n) AS dn FROM {ra} GROUP BY k"),
    # -- LEFT JOIN
    "left": ("left", "SELECT a.k, a.v, b.w FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k"),
    "left_outer_word": ("left", "SELECT a.k, b.m FROM {ra} a LEFT OUTER JOIN {rb} b "
                                "ON b.k = a.k"),
    "left_using": ("left", "SELECT k, v, w FROM {ra} LEFT JOIN {rb} USING (k)"),
    "left_where_preserved": ("left", "SELECT a.k, b.w FROM {ra} a LEFT JOIN {rb} b "
                                     "ON a.k = b.k WHERE a.n > 0"),
    "left_where_nullable": ("left", "SELECT a.k, b.w FROM {ra} a LEFT JOIN {rb} b "
                                    "ON a.k = b.k WHERE b.w IS NULL"),
    "left_on_filter": ("left", "SELECT a.k, b.w FROM {ra} a LEFT JOIN {rb} b "
                               "ON a.k = b.k AND b.m > 1"),
    "left_then_inner": ("left", "SELECT a.k, b.w, c.z FROM {ra} a LEFT JOIN {rb} b "
                                "ON a.k = b.k JOIN {rc} c ON c.k = a.k"),
    "inner_then_left": ("left", "SELECT a.k, c.z, b.w FROM {ra} a JOIN {rc} c ON c.k = a.k "
                                "LEFT JOIN {rb} b ON b.k = a.k"),
    "left_nested_right_side": ("left", "SELECT a.k, b.w, c.z FROM {ra} a LEFT JOIN "
                                       "({rb} b JOIN {rc} c ON b.k = c.k) ON a.k = b.k"),
    "left_two_keys": ("left", "SELECT a.k, a.v, b.w FROM {ra} a LEFT JOIN {rb} b "
                              "ON a.k = b.k AND a.v = b.w"),
    "left_self": ("left", "SELECT a1.k, a2.v FROM {ra} a1 LEFT JOIN {ra} a2 "
                          "ON a1.n = a2.k"),
    "left_star": ("left", "SELECT b.*, c.z FROM {rb} b LEFT JOIN {rc} c ON b.k = c.k"),
    "left_natural": ("left", "SELECT k, w, z FROM {rb} NATURAL LEFT JOIN {rc}"),
    # -- RIGHT JOIN
    "right": ("right", "SELECT a.v, b.k, b.w FROM {ra} a RIGHT JOIN {rb} b ON a.k = b.k"),
    "right_using": ("right", "SELECT k, v, m FROM {ra} RIGHT JOIN {rb} USING (k)"),
    "right_where_preserved": ("right", "SELECT a.v, b.w FROM {ra} a RIGHT JOIN {rb} b "
                                       "ON a.k = b.k WHERE b.m IS NOT NULL"),
    "right_on_filter": ("right", "SELECT a.v, b.w FROM {ra} a RIGHT JOIN {rb} b "
                                 "ON a.k = b.k AND a.n > 1"),
    "right_then_inner": ("right", "SELECT a.v, b.w, c.z FROM {ra} a RIGHT JOIN {rb} b "
                                  "ON a.k = b.k JOIN {rc} c ON c.k = b.k"),
    # -- FULL JOIN
    "full": ("full", "SELECT a.k AS ak, b.k AS bk, a.v, b.w FROM {ra} a FULL JOIN {rb} b "
                     "ON a.k = b.k"),
    "full_outer_word": ("full", "SELECT a.v, b.w FROM {ra} a FULL OUTER JOIN {rb} b "
                                "ON b.k = a.k"),
    "full_using": ("full", "SELECT k, v, w FROM {ra} FULL JOIN {rb} USING (k)"),
    "full_where_above": ("full", "SELECT a.v, b.w FROM {ra} a FULL JOIN {rb} b ON a.k = b.k "
                                 "WHERE a.v IS NULL OR b.w IS NULL"),
    "full_two_keys": ("full", "SELECT a.k, b.m FROM {ra} a FULL JOIN {rb} b "
                              "ON a.k = b.k AND a.n = b.m"),
    "full_natural": ("full", "SELECT k, w, z FROM {rb} NATURAL FULL JOIN {rc}"),
    # -- outer joins with aggregates and DISTINCT
    "left_count": ("outer_group", "SELECT a.k, count(b.w) AS c FROM {ra} a LEFT JOIN {rb} b "
                                  "ON a.k = b.k GROUP BY a.k"),
    "left_sum": ("outer_group", "SELECT a.k, count(*) AS rows, sum(b.m) AS s FROM {ra} a "
                                "LEFT JOIN {rb} b ON a.k = b.k GROUP BY a.k"),
    "left_max": ("outer_group", "SELECT a.v, max(b.w) AS last_w FROM {ra} a LEFT JOIN {rb} b "
                                "ON a.k = b.k GROUP BY a.v"),
    "full_count": ("outer_group", "SELECT count(*) AS c, count(a.k) AS ca, count(b.k) AS cb "
                                  "FROM {ra} a FULL JOIN {rb} b ON a.k = b.k"),
    "left_distinct": ("outer_group", "SELECT DISTINCT b.w FROM {ra} a LEFT JOIN {rb} b "
                                     "ON a.k = b.k"),
    "right_group": ("outer_group", "SELECT b.w, count(a.v) AS c FROM {ra} a RIGHT JOIN {rb} b "
                                   "ON a.k = b.k GROUP BY b.w"),
    "left_where_nullable_group": ("outer_group", "SELECT a.k, count(*) AS c FROM {ra} a "
                                                 "LEFT JOIN {rb} b ON a.k = b.k "
                                                 "WHERE b.m IS NULL OR b.m > 1 GROUP BY a.k"),
    # -- merged columns referenced unqualified
    "using_inner": ("merged", "SELECT k, v, w FROM {ra} JOIN {rb} USING (k)"),
    "using_three": ("merged", "SELECT k, v, w, z FROM {ra} JOIN {rb} USING (k) "
                              "JOIN {rc} USING (k)"),
    "natural_inner": ("merged", "SELECT k, w, z FROM {rb} NATURAL JOIN {rc}"),
    "using_star": ("merged", "SELECT * FROM {rb} JOIN {rc} USING (k)"),
    "using_in_where": ("merged", "SELECT k, w FROM {rb} JOIN {rc} USING (k) WHERE k > 1"),
    "using_group": ("merged", "SELECT k, count(*) AS c FROM {rb} JOIN {rc} USING (k) "
                              "GROUP BY k"),
}

REFUSED: dict[str, tuple[str, str]] = {
    # name: (SQL, what the 422 must say)
    "window": ("SELECT k, row_number() OVER () AS r FROM {ra}", "window function"),
    "subquery": ("SELECT k FROM {ra} WHERE k IN (SELECT k FROM {rb})", "subquery"),
    "union": ("SELECT k FROM {ra} UNION SELECT k FROM {rb}", "set operation"),
    "order_by": ("SELECT k, count(*) AS c FROM {ra} GROUP BY k ORDER BY k", "ORDER BY"),
    "limit": ("SELECT DISTINCT v FROM {ra} LIMIT 3", "LIMIT"),
    "volatile": ("SELECT k, count(*) AS c FROM {ra} WHERE n < random() GROUP BY k",
                 "volatile function"),
    "non_equi_outer": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON a.k < b.k",
                       "not an equality between its sides"),
    "outer_on_preserved": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k AND a.n > 1",
                           "preserved side"),
    "full_on_filter": ("SELECT a.k FROM {ra} a FULL JOIN {rb} b ON a.k = b.k AND b.m > 1",
                       "one side in the ON of a FULL JOIN"),
    "two_outer": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k "
                  "LEFT JOIN {rc} c ON c.k = a.k", "second outer join"),
    "null_rejecting_join": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k "
                            "JOIN {rc} c ON c.k = b.k", "NULL-padded side"),
    "full_with_more": ("SELECT a.k FROM {ra} a FULL JOIN {rb} b ON a.k = b.k "
                       "JOIN {rc} c ON c.k = a.k", "FULL JOIN's result"),
    "ungrouped": ("SELECT k, v FROM {ra} GROUP BY k", "neither grouped nor inside"),
    "sum_text": ("SELECT sum(v) AS s FROM {ra}", "sum and avg take numbers"),
    "avg_text": ("SELECT k, avg(v) AS a FROM {ra} GROUP BY k", "sum and avg take numbers"),
    "sum_distinct": ("SELECT sum(DISTINCT n) AS s FROM {ra}", "only count(DISTINCT"),
    "string_agg": ("SELECT k, string_agg(v, ',') AS vs FROM {ra} GROUP BY k",
                   "maintained: count, sum, avg, min, max"),
    "array_agg": ("SELECT array_agg(v) AS vs FROM {ra}", "maintained"),
    "filter_clause": ("SELECT count(*) FILTER (WHERE n > 1) AS c FROM {ra}", "FILTER"),
    "nested_aggregate": ("SELECT max(count(*)) AS c FROM {ra} GROUP BY k", "inside another"),
    "aggregate_in_where": ("SELECT k FROM {ra} WHERE count(*) > 1 GROUP BY k",
                           "aggregate (count) in WHERE"),
    "group_by_expression": ("SELECT count(*) AS c FROM {ra} GROUP BY k + 1",
                            "not a column"),
    "group_by_bad_position": ("SELECT k, count(*) AS c FROM {ra} GROUP BY 3",
                              "GROUP BY position 3"),
    "rollup": ("SELECT k, count(*) AS c FROM {ra} GROUP BY ROLLUP (k)", "grouping set"),
    "distinct_on": ("SELECT DISTINCT ON (k) k, v FROM {ra}", "DISTINCT ON"),
    "distinct_expression": ("SELECT DISTINCT upper(v) AS uv FROM {ra}",
                            "DISTINCT of an expression"),
    "distinct_with_group": ("SELECT DISTINCT count(*) AS c FROM {ra} GROUP BY k",
                            "DISTINCT with GROUP BY"),
    "distinct_star": ("SELECT DISTINCT * FROM {ra}", "DISTINCT *"),
    "ambiguous": ("SELECT k FROM {ra} a JOIN {rb} b ON a.k = b.k", "ambiguous column 'k'"),
    "count_star_distinct": ("SELECT count(DISTINCT *) AS c FROM {ra}", "syntax error"),
    "min_of_boolean": ("SELECT min(n > 1) AS b FROM {ra}", "min and max take"),
    "outer_without_equality": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON b.m > 1",
                               "without an equality"),
    "where_equality_with_padded": ("SELECT a.k FROM {ra} a LEFT JOIN {rb} b ON a.k = b.k "
                                   "WHERE b.m = a.n", "NULL-padded side"),
    "having_ungrouped": ("SELECT k FROM {ra} GROUP BY k HAVING v = 'a'",
                         "neither grouped nor inside"),
    "ordered_aggregate": ("SELECT k, max(v ORDER BY v) AS m FROM {ra} GROUP BY k",
                          "ordered aggregate"),
}
