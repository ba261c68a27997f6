-- 40k rows of a join step's delta (6 columns, __sign, __ts) inserted into a logged delta table
-- with a btree on __ts (as installed), a BRIN on __ts, and no index; two rounds each, then
-- inserted in __ts order. Run with psql on one machine of `smile up` (drops schema y).
SET jit=off; SET work_mem='64MB';
DROP SCHEMA IF EXISTS y CASCADE; CREATE SCHEMA y;
CREATE UNLOGGED TABLE y.src AS SELECT i AS a_k, md5(i::text) AS a_pa, i AS b_k, md5((i+1)::text) AS b_pb, i AS c_k, md5((i+2)::text) AS c_pc, (CASE WHEN i%2=0 THEN 1 ELSE -1 END)::smallint AS __sign, now() - (i % 5000) * interval '1 ms' AS __ts FROM generate_series(1,40000) i;
CREATE TABLE y.bt (LIKE y.src); CREATE INDEX ON y.bt (__ts);
CREATE TABLE y.br (LIKE y.src); CREATE INDEX ON y.br USING brin (__ts) WITH (pages_per_range = 16);
CREATE TABLE y.no (LIKE y.src);
INSERT INTO y.bt SELECT * FROM y.src; INSERT INTO y.br SELECT * FROM y.src; INSERT INTO y.no SELECT * FROM y.src;
TRUNCATE y.bt, y.br, y.no;
\timing on
INSERT INTO y.bt SELECT * FROM y.src;
INSERT INTO y.br SELECT * FROM y.src;
INSERT INTO y.no SELECT * FROM y.src;
INSERT INTO y.bt SELECT * FROM y.src;
INSERT INTO y.br SELECT * FROM y.src;
INSERT INTO y.no SELECT * FROM y.src;
INSERT INTO y.bt SELECT * FROM y.src ORDER BY __ts;
INSERT INTO y.br SELECT * FROM y.src ORDER BY __ts;
\timing off
DROP SCHEMA y CASCADE;
