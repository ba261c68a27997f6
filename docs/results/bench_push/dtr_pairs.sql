-- DeltaToRel's pairing of updates, two ways, on a 1M-row relation of the push bench's MV shape
-- (6 columns, fillfactor 90, an index on a_k) and a 60k-row slice (10k keys, each updated on
-- a, b and c: 20k net rows, 10k in-place updates). Setup, then each statement in a rolled-back
-- transaction (SET jit = off; SET work_mem = '64MB'; BEGIN; \i ...; ROLLBACK;) and VACUUM x.mv
-- between runs. as built: the pairs by array_agg (the statement _net_at_once writes);
-- joined back: the keys with one row leaving and one arriving, joined back to the net rows.

-- setup
DROP SCHEMA IF EXISTS x CASCADE; CREATE SCHEMA x;
CREATE TABLE x.mv (a_k int, a_pa text, b_k int, b_pb text, c_k int, c_pc text) WITH (fillfactor=90);
INSERT INTO x.mv SELECT i, md5(i::text), i, md5((i+1)::text), i, md5((i+2)::text) FROM generate_series(1,1000000) i;
CREATE INDEX ON x.mv (a_k);
CREATE UNLOGGED TABLE x.d1 (a_k int, a_pa text, b_k int, b_pb text, c_k int, c_pc text, __sign smallint not null, __ts timestamptz not null);
CREATE UNLOGGED TABLE x.d2 (LIKE x.d1);
CREATE INDEX ON x.d1 (__ts); CREATE INDEX ON x.d2 (__ts);
-- Δa part (20k): -(pa0,pb0,pc0) +(pa1,pb0,pc0) at ts 2
INSERT INTO x.d2 SELECT i, md5(i::text), i, md5((i+1)::text), i, md5((i+2)::text), -1, '2026-01-01 00:00:02' FROM generate_series(100,1000000,100) i;
INSERT INTO x.d2 SELECT i, md5(i::text)||'x', i, md5((i+1)::text), i, md5((i+2)::text), 1, '2026-01-01 00:00:02' FROM generate_series(100,1000000,100) i;
-- Δ(bc) part (40k): b at ts 3, c at ts 4
INSERT INTO x.d1 SELECT i, md5(i::text)||'x', i, md5((i+1)::text), i, md5((i+2)::text), -1, '2026-01-01 00:00:03' FROM generate_series(100,1000000,100) i;
INSERT INTO x.d1 SELECT i, md5(i::text)||'x', i, md5((i+1)::text)||'x', i, md5((i+2)::text), 1, '2026-01-01 00:00:03' FROM generate_series(100,1000000,100) i;
INSERT INTO x.d1 SELECT i, md5(i::text)||'x', i, md5((i+1)::text)||'x', i, md5((i+2)::text), -1, '2026-01-01 00:00:04' FROM generate_series(100,1000000,100) i;
INSERT INTO x.d1 SELECT i, md5(i::text)||'x', i, md5((i+1)::text)||'x', i, md5((i+2)::text)||'x', 1, '2026-01-01 00:00:04' FROM generate_series(100,1000000,100) i;
CREATE VIEW x.d AS SELECT * FROM x.d1 UNION ALL SELECT * FROM x.d2;
VACUUM ANALYZE x.mv; VACUUM ANALYZE x.d1; VACUUM ANALYZE x.d2;
CHECKPOINT;

-- as built
WITH __all AS MATERIALIZED (SELECT ROW(a_k, a_pa, b_k, b_pb, c_k, c_pc)::x.mv AS __r, __n FROM ( SELECT a_k, a_pa, b_k, b_pb, c_k, c_pc, sum(__sign)::bigint AS __n FROM (SELECT * FROM x.d WHERE __ts > '2026-01-01' AND __ts <= '2026-01-01 00:00:05') d GROUP BY a_k, a_pa, b_k, b_pb, c_k, c_pc HAVING sum(__sign) <> 0) g),
pr AS ( SELECT (array_agg(__r) FILTER (WHERE __n < 0))[1] AS __old, (array_agg(__r) FILTER (WHERE __n > 0))[1] AS __new FROM __all WHERE (__r).a_k IS NOT NULL GROUP BY (__r).a_k HAVING count(*) = 2 AND min(__n) = -1 AND max(__n) = 1),
done AS ( UPDATE x.mv __u SET a_k = (v.__new).a_k, a_pa = (v.__new).a_pa, b_k = (v.__new).b_k, b_pb = (v.__new).b_pb, c_k = (v.__new).c_k, c_pc = (v.__new).c_pc FROM (  SELECT x.c, pr.__new FROM pr, LATERAL (SELECT __t.ctid AS c   FROM x.mv __t WHERE __t.a_k = (pr.__old).a_k AND __t = pr.__old LIMIT 1) x) v WHERE __u.ctid = v.c RETURNING __u.a_k AS __k),
__rest AS MATERIALIZED (SELECT __r, __n FROM __all WHERE (__r).a_k IS NULL OR (__r).a_k NOT IN (SELECT __k FROM done)),
net AS (SELECT __r, __n FROM __rest WHERE __n < 0),
found AS ( SELECT __t.ctid AS c, __t AS __r FROM x.mv __t WHERE __t.a_k = ANY(ARRAY(SELECT DISTINCT (__r).a_k FROM net  WHERE (__r).a_k IS NOT NULL)) UNION ALL SELECT __t.ctid, __t FROM x.mv __t WHERE __t.a_k IS NULL AND EXISTS (SELECT FROM net WHERE (__r).a_k IS NULL)),
victims AS (SELECT f.c, row_number() OVER (PARTITION BY f.__r) AS __rn, -net.__n AS __k FROM found f JOIN net ON f.__r = net.__r),
gone AS (DELETE FROM x.mv WHERE ctid = ANY(ARRAY(SELECT c FROM victims WHERE __rn <= __k)) RETURNING 1),
__w AS (INSERT INTO x.mv (a_k, a_pa, b_k, b_pb, c_k, c_pc) SELECT (__r).* FROM __rest,  generate_series(1, __n) WHERE __n > 0 RETURNING 1)
SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM gone), (SELECT count(*) FROM __w);

-- joined back: the statement above with its `pr` CTE replaced by this one
pr AS (SELECT o.__r AS __old, n.__r AS __new FROM (SELECT (__r).a_k AS __k FROM __all WHERE (__r).a_k IS NOT NULL GROUP BY 1 HAVING count(*) = 2 AND min(__n) = -1 AND max(__n) = 1) p JOIN __all o ON (o.__r).a_k = p.__k AND o.__n < 0 JOIN __all n ON (n.__r).a_k = p.__k AND n.__n > 0),
