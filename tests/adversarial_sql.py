"""An adversarial corpus of sharing SQL: each entry must be refused (PlanError in the parser,
4xx over REST) without running anything and without creating any object anywhere. Shared by the
pure parser test and the live security test."""

from __future__ import annotations

BASE = "SELECT u.uid FROM users u"
J = "SELECT u.uid, t.tid FROM users u, tweets t WHERE u.uid = t.uid"

REFUSED: dict[str, str] = {
    # several statements, DDL, DML, utility
    "two_statements": f"{BASE}; DROP TABLE users",
    "trailing_ddl": f"{BASE}; CREATE TABLE pwned (x int)",
    "drop": "DROP TABLE users",
    "create": "CREATE TABLE pwned AS SELECT * FROM users",
    "insert": "INSERT INTO users (uid) VALUES (1)",
    "update": "UPDATE users SET uid = 0",
    "delete": "DELETE FROM users",
    "truncate": "TRUNCATE users",
    "copy_program": "COPY users TO PROGRAM 'touch /tmp/pwned'",
    "copy_file": "COPY users FROM '/etc/passwd'",
    "set_role": "SET ROLE smile",
    "grant": "GRANT ALL ON users TO PUBLIC",
    "do_block": "DO $$ BEGIN PERFORM pg_sleep(10); END $$",
    "explain": f"EXPLAIN ANALYZE {BASE}",
    "select_into": "SELECT u.uid INTO pwned FROM users u",
    "cte_dml": "WITH x AS (DELETE FROM users RETURNING uid) SELECT uid FROM x",
    "for_update": f"{BASE} FOR UPDATE",
    # side effects and things that read the server
    "pg_sleep": f"{BASE} WHERE pg_sleep(10) IS NOT NULL",
    "pg_sleep_qualified": f"{BASE} WHERE pg_catalog.pg_sleep(10) IS NOT NULL",
    "terminate": "SELECT pg_terminate_backend(u.uid) AS x FROM users u",
    "set_config": "SELECT set_config('role', 'smile', false) AS x FROM users u",
    "lo_import": "SELECT lo_import('/etc/passwd') AS x FROM users u",
    "read_file": "SELECT pg_read_file('/etc/passwd') AS x FROM users u",
    "dblink": "SELECT dblink('host=evil', 'DROP TABLE users') AS x FROM users u",
    "current_setting": "SELECT current_setting('data_directory') AS x FROM users u",
    "random": f"{BASE} WHERE random() < 0.5",
    "now": "SELECT now() AS x FROM users u",
    "nextval": "SELECT nextval('s') AS x FROM users u",
    "query_to_xml": "SELECT query_to_xml('DROP TABLE users', true, true, '') AS x FROM users u",
    "shadowed_lower": "SELECT public.lower(u.screen_name) AS x FROM users u",
    "evil_schema_fn": "SELECT evil.lower(u.screen_name) AS x FROM users u",
    "variadic": "SELECT concat(VARIADIC ARRAY['a']) AS x FROM users u",
    # schema-qualified operators, casts, collations, arrays, rows
    "operator_schema": f"{BASE} WHERE u.uid OPERATOR(public.=) 1",
    "operator_evil": f"{BASE} WHERE u.uid OPERATOR(evil.+) 1 > 0",
    "regclass": f"{BASE} WHERE 'users'::regclass IS NOT NULL",
    "cast_oid": "SELECT u.uid::oid AS x FROM users u",
    "cast_evil_type": "SELECT u.uid::evil.t AS x FROM users u",
    "cast_array": "SELECT u.uid::int[] AS x FROM users u",
    "regproc": f"{BASE} WHERE 'pg_sleep'::regproc IS NOT NULL",
    "collate": f"{BASE} WHERE u.screen_name COLLATE \"C\" > 'a'",
    "array": "SELECT ARRAY[u.uid] AS x FROM users u",
    "row": f"{BASE} WHERE ROW(u.uid, 1) IS NOT NULL",
    "subscript": "SELECT (ARRAY[u.uid])[1] AS x FROM users u",
    "any_array": f"{BASE} WHERE u.uid = ANY('{{1,2}}')",
    "similar": f"{BASE} WHERE u.screen_name SIMILAR TO 'a%'",
    "regex": f"{BASE} WHERE u.screen_name ~ 'a'",
    # subqueries, set operations, other FROM items (outer joins, aggregates and DISTINCT are
    # sharings like any other now: tests/beyond_spj_corpus.py)
    "subquery": f"{BASE} WHERE u.uid IN (SELECT uid FROM tweets)",
    "exists": f"{BASE} WHERE EXISTS (SELECT 1 FROM pg_authid)",
    "scalar_sub": "SELECT (SELECT rolpassword FROM pg_authid LIMIT 1) AS x FROM users u",
    "union": f"{BASE} UNION SELECT uid FROM tweets",
    "from_function": "SELECT x FROM generate_series(1, 10) x",
    "from_catalog": "SELECT rolname FROM pg_authid",
    "from_other_schema": "SELECT * FROM smile_catalog.sharings",
    "from_other_db": "SELECT u.uid FROM otherdb.public.users u",
    "from_mv": 'SELECT * FROM smile_mv."S1"',
    "column_alias_list": "SELECT a FROM users u(a, b)",
    "values": "VALUES (1)",
    "lateral": f"{BASE}, LATERAL (SELECT 1) x",
    "tablesample": "SELECT u.uid FROM users u TABLESAMPLE SYSTEM (10)",
    # comments, quoting and escapes that try to smuggle a second statement
    "comment_smuggle": f"{BASE} /* */; DROP TABLE users --",
    "line_comment": f"{BASE} -- \n; DROP TABLE users",
    "dollar_quote": f"{BASE} WHERE u.screen_name = $$x$$; DROP TABLE users; --",
    "e_string": f"{BASE} WHERE u.screen_name = E'\\\\'; DROP TABLE users; --'",
    "unicode_escape": "SELECT U&\"\\0075id\" FROM users u; DROP TABLE users",
    "quote_in_alias_star": 'SELECT "u"" FROM pg_authid --".* FROM users "u"" FROM pg_authid --"'
                           "; SELECT 1",
    "quote_alias_unknown": 'SELECT "x""; DROP TABLE users; --".* FROM users u',
    "param": f"{BASE} WHERE u.uid = $1",
    "nul": f"{BASE} WHERE u.screen_name = 'a\x00b'",
    "lone_surrogate": 'SELECT u.uid AS "\ud800" FROM users u',
    "no_outputs": "SELECT FROM users u",
    # windows, ordering
    "window": "SELECT row_number() OVER () AS n FROM users u",
    "aggregate_window": "SELECT count(*) OVER () AS n FROM users u",
    "string_agg_injection": "SELECT string_agg(screen_name, '; DROP TABLE users') AS x "
                            "FROM users u",
    "order_limit": f"{BASE} ORDER BY u.uid LIMIT 1",
    # size and depth
    "deep_parens": f"{BASE} WHERE " + "(" * 10_000 + "u.uid = 1" + ")" * 10_000,
    "deep_not": f"{BASE} WHERE " + "NOT " * 3000 + "u.uid = 1",
    "long_sum": "SELECT " + " + ".join(["u.uid"] * 2000) + " AS x FROM users u",
    "one_megabyte": f"{BASE} WHERE u.screen_name = '" + "a" * 1_000_000 + "'",
    "many_statements": ";".join([BASE] * 50),
    # names that do not exist
    "unknown_relation": "SELECT x.a FROM nowhere x",
    "unknown_column": "SELECT u.password FROM users u",
    "cross_join": "SELECT u.uid, t.tid FROM users u, tweets t",
    "empty": "   ",
    "garbage": "\\x00\\xff DROP",
    "join_non_equi": f"{J} AND u.uid < t.uid + 0 * (SELECT 1)",
}

ACCEPTED: dict[str, str] = {
    # adversarial-looking identifiers that are fine: quoted output names, unicode, reserved words
    "quoted_output": 'SELECT u.uid AS "we""ird; DROP TABLE users --" FROM users u',
    "unicode_output": "SELECT u.uid AS \"ユーザー\" FROM users u",
    "reserved_output": 'SELECT u.uid AS "select", u.screen_name AS "from" FROM users u',
    "quoted_alias": 'SELECT "a""b".uid FROM users "a""b"',
    "unicode_alias": "SELECT ü.uid FROM users ü",
    "sixty_three_bytes": "SELECT u.uid AS " + "x" * 63 + " FROM users u",
    # longer names are truncated to 63 bytes by PostgreSQL's own parser, as psql would
    "long_name": "SELECT u.uid AS " + "x" * 100 + " FROM users u",
    "qualified_public": "SELECT u.uid FROM public.users u",
    "pg_catalog_fn": "SELECT pg_catalog.lower(u.screen_name) AS sn FROM users u",
    "builtin_cast": "SELECT u.uid::bigint AS big, u.uid::text AS t FROM users u",
    "string_tricks": "SELECT u.uid FROM users u WHERE u.screen_name <> E'\\'; DROP' AND "
                     "u.screen_name <> $q$'); DROP TABLE users; --$q$",
}
