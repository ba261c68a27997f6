-- SMILE's capture metadata on each machine (schema `_smile`). Idempotent.
-- Never published: nothing in schema _smile is ever added to the publication.
-- Processes starting together take turns (held to the end of the caller's transaction):
-- `CREATE … IF NOT EXISTS` alone lets the loser of a race fail on the catalog's unique index.
SELECT pg_advisory_xact_lock(hashtext('smile.capture.ddl'));
CREATE SCHEMA IF NOT EXISTS _smile;

-- TS(v) of every vertex kept on this machine is created beside these tables by
-- smile/operators/vertex_ts.py (`ensure_table`), the one module that names that table.

-- Durable capture progress, written in the same transaction as the delta rows: the commit LSN
-- and end LSN of the last source transaction fully in the deltas, and the (monotone) timestamp
-- given to it. The stream restarts from here, never from the slot's confirmed_flush_lsn.
CREATE TABLE IF NOT EXISTS _smile.capture_progress (
    slot       text PRIMARY KEY,
    commit_lsn pg_lsn NOT NULL,
    end_lsn    pg_lsn NOT NULL,
    last_ts    timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_xid   bigint  -- the last captured transaction's: those begun since are capture's lag
);

-- Published relations (written by the publisher only). A relation is 'snapshotting' from the
-- moment it joins the publication (commit LSN P) until its shadow copy is filled under the
-- exported snapshot of a temporary slot whose consistent point is start_lsn (L > P); then
-- 'streaming': changes from transactions committing at or after start_lsn go to the delta.
CREATE TABLE IF NOT EXISTS _smile.captured_relations (
    relid        oid PRIMARY KEY,
    schema_name  text NOT NULL,
    table_name   text NOT NULL,
    delta_table  text NOT NULL,
    shadow_table text NOT NULL,
    columns      jsonb NOT NULL,
    state        text NOT NULL CHECK (state IN ('snapshotting', 'streaming')),
    start_lsn    pg_lsn,
    start_ts     timestamptz,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (schema_name, table_name)
);

-- What the capturer knows of each relation (written by the capturer only): rows captured, and
-- the error that stopped its capture, if any (schema change, drop, missing old rows).
CREATE TABLE IF NOT EXISTS _smile.capture_state (
    relid         oid PRIMARY KEY,
    rows_captured bigint NOT NULL DEFAULT 0,
    error         text,
    error_lsn     pg_lsn,
    error_at      timestamptz,
    -- the last time the machine's slot was found invalidated (WAL beyond
    -- max_slot_wal_keep_size) and this relation's delta re-synchronised from a fresh snapshot
    -- (delta_capture/resync.py), and the rows that took
    resynced_at   timestamptz,
    resync_rows   bigint,
    -- published columns the table no longer has (dropped, renamed, retyped): NULL in R from the
    -- point capture met their loss on (source.write_columns_gone), and the sharings that read
    -- one fail (executor/capture_watch.py)
    gone          text[] NOT NULL DEFAULT '{}'
);

-- Which vertices read which delta: retention deletes delta rows every reader is past.
CREATE TABLE IF NOT EXISTS _smile.delta_readers (
    delta_vertex  text NOT NULL,
    reader_vertex text NOT NULL,
    PRIMARY KEY (delta_vertex, reader_vertex)
);

-- How far retention pruned each delta (capture's ΔR and the plan's intermediate deltas): rows
-- stamped at or below `ts` may be gone. A vertex that starts reading a delta (installed at t0,
-- or re-routed onto it) must already be past it (operators/retention.py).
CREATE TABLE IF NOT EXISTS _smile.delta_pruned (
    delta_vertex text PRIMARY KEY,
    ts           timestamptz NOT NULL
);

-- Columns added since a machine's tables were first created. This file runs inside deploys
-- and beside a streaming capturer: `ALTER TABLE … ADD COLUMN IF NOT EXISTS` would take an
-- ACCESS EXCLUSIVE lock even when the column is there (a deadlock with the capturer's
-- progress upsert), so each is added only when missing.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM (VALUES
            ('capture_progress', 'last_xid', 'bigint'),
            ('capture_state', 'resynced_at', 'timestamptz'),
            ('capture_state', 'resync_rows', 'bigint'),
            ('capture_state', 'gone', 'text[] NOT NULL DEFAULT ''{}''')) AS v (tab, col, typ)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_attribute
                       WHERE attrelid = ('_smile.' || c.tab)::regclass
                         AND attname = c.col AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE _smile.%I ADD COLUMN %I %s', c.tab, c.col, c.typ);
        END IF;
    END LOOP;
END $$;

-- An ACCESS EXCLUSIVE lock on `rel` for the caller's transaction if it is free at once, else
-- false (retention's TRUNCATE, operators/retention.py). The refusal is caught here, so the
-- server's log gets no ERROR line for what is an answer, not a fault.
CREATE OR REPLACE FUNCTION _smile.lock_at_once(rel regclass) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE NOWAIT', rel);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END $$;
