"""The capturer of one machine: pgoutput stream → signed delta rows, exactly once.

For each source transaction (in commit-LSN order; a big one streamed before its commit is spooled
and handled at its commit, `spool.py`) it stamps `__ts = max(commit_ts, prev + 1µs)`
(and past the start time of any relation whose snapshot it crosses), turns INSERT into `+new`,
UPDATE into `-old, +new` (unchanged TOASTed values taken from the old row) and DELETE into
`-old`, and writes them to ΔR with COPY. Several source transactions go into one target
transaction, which also writes the progress (`progress.py`) and the watermarks TS(ΔR) of all
relations; only after it commits is the slot told (`stream.confirm`). A replayed transaction
(commit LSN not beyond the progress) is skipped, so a SIGKILL or a source restart at any point
leaves every committed change in ΔR exactly once.

When the source is idle the capturer commits a transactional logical message (`smile.tick`)
every `tick_s`; its arrival proves every earlier commit was seen, so watermarks follow the
source's clock. TRUNCATE becomes `-row` for every row of R at that point (R̂ rolled forward with
ΔR). A schema change, a dropped table or an UPDATE without the whole old row stops that
relation's capture with an error in `_smile.capture_state`; the others go on. A slot that
PostgreSQL invalidated (`max_slot_wal_keep_size`) is replaced and every relation's ΔR caught up
from a snapshot before streaming resumes (`resync.py`). Retention of ΔR and the advance of
shadow copies run beside the stream, on threads and connections of their own, so that a lock
they wait for never stops the stream from being read.

Must not: decode bytes itself (`decode.py`), own the socket (`stream.py`), or create the first
contents of a shadow copy (`snapshot.py`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from smile.db import SYNC_COMMIT, every
from smile.delta_capture import decode as d
from smile.delta_capture.progress import Progress, read_progress
from smile.delta_capture.publish import ensure_capture_setup
from smile.delta_capture.registry import (
    PUBLICATION,
    SLOT,
    TICK_PREFIX,
    CapturedRelation,
    load_errors,
    load_relations,
)
from smile.delta_capture.resync import resync, slot_lost
from smile.delta_capture.sink import DeltaSink
from smile.delta_capture.spool import Spool
from smile.delta_capture.stream import ReplicationStream
from smile.errors import CaptureError, SmileError
from smile.operators import retention, vertex_ts
from smile.operators.delta_to_rel import delta_to_rel

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("smile.capture")


class _Restart(Exception):
    """Abandon the open target transaction and restart the stream from the durable progress."""

    def __init__(self, wait_for: int | None = None) -> None:
        super().__init__(wait_for)
        self.wait_for = wait_for


@dataclass
class CaptureOptions:
    tick_s: float = 0.25
    batch_s: float = 0.1
    batch_rows: int = 100_000
    flush_rows: int = 20_000
    housekeeping_s: float = 2.0
    retention_s: float = 5.0
    shadow_s: float = 10.0
    """How often shadow copies are advanced to their watermark (0: never, leave it to agents)."""
    snapshot_wait_s: float = 120.0


@dataclass
class _Txn:
    lsn: int = 0
    ts: int = 0
    skip: bool = False
    idx: int = 0
    tail: bytes = b""


@dataclass
class _Session:
    sink: DeltaSink
    side: psycopg.Connection[Any]
    stream: ReplicationStream
    progress: Progress
    rels: dict[int, CapturedRelation]
    errors: dict[int, str]
    relmsgs: dict[int, d.Relation] = field(default_factory=dict)
    buf: dict[int, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    buf_rows: int = 0
    counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    pending: Progress | None = None
    pending_since: float = 0.0
    pending_rows: int = 0
    pending_drop: dict[int, tuple[int, str]] = field(default_factory=dict)
    txn: _Txn | None = None
    streaming: int | None = None
    """The transaction whose stream block is open (between StreamStart and StreamStop)."""
    spools: dict[int, Spool] = field(default_factory=dict)
    streams: set[int] = field(default_factory=set)
    """Transactions whose first stream block this session has seen (and not yet ended)."""


class Capturer:
    def __init__(
        self,
        dsn: str,
        *,
        slot: str = SLOT,
        publication: str = PUBLICATION,
        options: CaptureOptions | None = None,
        on_commit: Callable[[Progress], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self.opt = options or CaptureOptions()
        self.on_commit = on_commit
        self.s: _Session | None = None

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None) -> None:
        """Capture until `stop` is set, reconnecting after failures."""
        stop = stop or threading.Event()
        keepers = self._start_housekeeping(stop)
        backoff = 0.2
        while not stop.is_set():
            try:
                self._session(stop)
                backoff = 0.2
            except _Restart as restart:
                self._close()
                if restart.wait_for is not None:
                    self._wait_for_snapshot(restart.wait_for, stop)
            except Exception as exc:
                self._close()
                log.warning("capture of %s interrupted: %s; retrying in %.1fs",
                            self.slot, exc, backoff, exc_info=not isinstance(
                                exc, (SmileError, psycopg.Error, OSError)))
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self._close()
        for keeper in keepers:
            keeper.join(timeout=5)

    def _start_housekeeping(self, stop: threading.Event) -> list[threading.Thread]:
        """Retention of ΔR and the advance of shadow copies, each on a thread and a connection
        of its own: they wait for locks (a join holds R̂ still, a withdrawal drops a table),
        and the loop that reads the stream must never wait with them — a capturer that
        stops reading lags every sharing on the machine and, after `wal_sender_timeout`,
        loses its stream."""
        jobs = [(self.opt.retention_s, prune_deltas, "retention"),
                (self.opt.shadow_s, advance_shadows, "shadows")]
        keepers = [threading.Thread(
            target=every, args=(self.dsn, period, stop, body),
            kwargs={"what": f"capture {what} of {self.slot}",
                    "application_name": f"smile-capture-{what}"},
            daemon=True, name=f"capture-{what}") for period, body, what in jobs if period > 0]
        for keeper in keepers:
            keeper.start()
        return keepers

    def _close(self) -> None:
        if self.s is None:
            return
        self.s.stream.close()
        self.s.sink.close()
        for spool in self.s.spools.values():
            spool.close()
        with contextlib.suppress(psycopg.Error):
            self.s.side.close()
        self.s = None

    def _session(self, stop: threading.Event) -> None:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as probe:
            lost = slot_lost(probe, self.slot)
        if lost:  # the WAL it needed is gone: ΔR catches up from snapshots (resync.py)
            resync(self.dsn, self.slot)
        ensure_capture_setup(self.dsn, self.slot)
        side = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10, options=SYNC_COMMIT)
        progress = read_progress(side, self.slot)
        rels, errors = load_relations(side), load_errors(side)
        stream = ReplicationStream(self.dsn, self.slot, self.publication)
        self.s = s = _Session(DeltaSink(self.dsn, self.slot), side, stream, progress, rels, errors)
        stream.open(progress.end_lsn)
        last_seen = last_tick = last_house = time.monotonic()
        while not stop.is_set():
            item = stream.read(self.opt.batch_s if s.pending else self.opt.tick_s / 2)
            now = time.monotonic()
            self._confirm_durable()
            if item is not None and self._receive(item[0]):
                last_seen = now
            if s.pending is not None and s.txn is None and (
                item is None or s.pending_rows >= self.opt.batch_rows
                or now - s.pending_since >= self.opt.batch_s
            ):
                self._commit()
            if s.txn is None and item is None:
                if now - last_seen >= self.opt.tick_s and now - last_tick >= self.opt.tick_s:
                    side.execute("SELECT pg_logical_emit_message(true, %s, '')", (TICK_PREFIX,))
                    last_tick = now
                if now - last_house >= self.opt.housekeeping_s:
                    self._check_relations()
                    last_house = now

    def _confirm_durable(self) -> None:
        """Tell the slot about every target commit the sink has made durable."""
        s = self.s
        assert s is not None
        if s.sink.failure is not None:
            raise CaptureError(f"writing deltas failed: {s.sink.failure}") from s.sink.failure
        while True:
            try:
                done = s.sink.done.get_nowait()
            except queue.Empty:
                return
            s.stream.confirm(done.end_lsn)
            if self.on_commit:
                self.on_commit(done)

    # -- messages ------------------------------------------------------------------------------
    def _receive(self, payload: bytes) -> bool:
        """One message off the stream; True if it committed a transaction. Inside a stream
        block a change is spooled (`spool.py`) until its transaction's StreamCommit."""
        s = self.s
        assert s is not None
        if s.streaming is not None and payload[0] in d.STREAMED:
            subxid, inner = d.unstream(payload)
            spool = s.spools.get(s.streaming)
            if spool is None:
                spool = s.spools[s.streaming] = Spool()
            spool.add(subxid, inner)
            return False
        return self._apply(payload)

    def _apply(self, payload: bytes) -> bool:
        if payload[0] == 0x49 and self._insert(payload):  # 'I' is the hot path
            return False
        msg = d.decode(payload)
        self._handle(msg)
        return isinstance(msg, (d.Commit, d.StreamCommit))

    def _streamed(self, msg: d.StreamStart | d.StreamStop | d.StreamCommit | d.StreamAbort
                  ) -> None:
        """A transaction too big for the server's `logical_decoding_work_mem`, streamed before
        its commit: spooled, then handled at its commit as if it had come whole."""
        s = self.s
        assert s is not None
        if isinstance(msg, d.StreamStart):
            if msg.first:
                s.streams.add(msg.xid)
                if msg.xid in s.spools:  # sent again from its start
                    s.spools.pop(msg.xid).close()
            elif msg.xid not in s.streams:  # its first blocks went to an earlier session
                raise CaptureError(f"transaction {msg.xid} streams on without its first block "
                                   "in this session; restarting the stream")
            s.streaming = msg.xid
        elif isinstance(msg, d.StreamStop):
            s.streaming = None
        elif isinstance(msg, d.StreamAbort):
            spool = s.spools.get(msg.xid)
            if msg.subxid == msg.xid:
                s.streams.discard(msg.xid)
                if spool is not None:
                    s.spools.pop(msg.xid).close()
            elif spool is not None:
                spool.abort(msg.subxid)
        else:
            assert s.txn is None, "a stream commit inside a transaction"
            s.streams.discard(msg.xid)
            spool = s.spools.pop(msg.xid, None)
            self._begin(msg.begin())
            if spool is not None:
                try:
                    for payload in spool.replay():
                        self._apply(payload)
                finally:
                    spool.close()
            self._end(msg.commit())

    def _handle(self, msg: d.Decoded) -> None:
        s = self.s
        assert s is not None
        if isinstance(msg, (d.Insert, d.Update, d.Delete)):
            if s.txn is None or s.txn.skip:
                return
            rel = self._relation(msg.relid)
            if rel is not None:
                self._row_change(rel, msg)
        elif isinstance(msg, d.Begin):
            self._begin(msg)
        elif isinstance(msg, d.Commit):
            self._end(msg)
        elif isinstance(msg, d.Relation):
            s.relmsgs[msg.relid] = msg
            rel = s.rels.get(msg.relid)
            if rel is not None and msg.relid not in s.errors:
                have = tuple((c.name, c.type_oid) for c in msg.columns)
                if have != rel.columns:
                    self._error(rel, _schema_change(rel.columns, have))
        elif isinstance(msg, (d.StreamStart, d.StreamStop, d.StreamCommit, d.StreamAbort)):
            self._streamed(msg)
        elif isinstance(msg, d.Truncate) and s.txn is not None and not s.txn.skip:
            for relid in msg.relids:
                rel = self._relation(relid)
                if rel is not None:
                    self._truncate(rel)

    def _begin(self, msg: d.Begin) -> None:
        s = self.s
        assert s is not None
        if msg.final_lsn <= s.progress.commit_lsn:
            s.txn = _Txn(lsn=msg.final_lsn, skip=True)
            return
        last = s.pending.last_ts if s.pending else s.progress.last_ts
        floor = max(
            (d.pg_micros(r.start_ts) for r in s.rels.values()
             if r.start_ts is not None and r.start_lsn is not None
             and r.start_lsn <= msg.final_lsn),
            default=0,
        )
        ts = max(msg.commit_ts, last + 1, floor + 1)
        stamp = d.pg_time(ts).isoformat().encode()
        tail = b"%s\t%s" % (stamp, d.format_lsn(msg.final_lsn).encode())
        s.txn = _Txn(lsn=msg.final_lsn, ts=ts, tail=tail)
        if s.pending is None:
            s.pending_since = time.monotonic()

    def _end(self, msg: d.Commit) -> None:
        s = self.s
        assert s is not None
        txn, s.txn = s.txn, None
        if txn is None or txn.skip:
            return
        s.pending = Progress(msg.commit_lsn, msg.end_lsn, txn.ts)
        s.pending_rows += txn.idx

    def _relation(self, relid: int) -> CapturedRelation | None:
        """The registered, healthy relation whose changes at this point belong in its delta."""
        s = self.s
        assert s is not None and s.txn is not None
        if relid in s.errors:
            return None
        rel = s.rels.get(relid)
        if rel is None:
            s.rels = load_relations(s.side)
            rel = s.rels.get(relid)
            if rel is None:
                return None  # in the publication but not SMILE's: not ours to capture
        if rel.state != "streaming" or rel.start_lsn is None:
            raise _Restart(wait_for=relid)
        if s.txn.lsn < rel.start_lsn:
            return None  # already in the shadow copy's snapshot
        return rel

    def _insert(self, payload: bytes) -> bool:
        """An INSERT straight from its bytes to a COPY line; False if it needs the slow path."""
        s = self.s
        assert s is not None
        txn = s.txn
        if txn is None or txn.skip or payload[5] != 0x4E:
            return txn is not None and txn.skip
        relid = int.from_bytes(payload[1:5], "big")
        rel = self._relation(relid)
        if rel is None:
            return True
        values, _ = d.read_tuple(payload, 6)
        if len(values) != len(rel.columns):
            return False
        txn.idx += 1
        s.buf[relid].append(d.copy_line(values, b"1\t%s\t%d" % (txn.tail, txn.idx)))
        s.counts[relid] += 1
        s.buf_rows += 1
        if s.buf_rows >= self.opt.flush_rows:
            self._flush()
        return True

    def _row_change(self, rel: CapturedRelation, msg: d.Insert | d.Update | d.Delete) -> None:
        s = self.s
        assert s is not None and s.txn is not None
        width = len(rel.columns)
        if isinstance(msg, d.Insert):
            rows = [(b"1", msg.new)]
        elif isinstance(msg, d.Delete):
            if msg.old_kind != "O":
                self._error(rel, "a DELETE came without the old row: REPLICA IDENTITY is not FULL")
                return
            rows = [(b"-1", msg.old)]
        else:
            if msg.old_kind != "O" or msg.old is None:
                self._error(rel, "an UPDATE came without the old row: REPLICA IDENTITY is not FULL")
                return
            new = msg.new
            if d.UNCHANGED in new:
                new = tuple(o if v is d.UNCHANGED else v for v, o in zip(new, msg.old, strict=True))
            rows = [(b"-1", msg.old), (b"1", new)]
        out = s.buf[rel.relid]
        txn = s.txn
        for sign, values in rows:
            if len(values) != width:
                self._error(rel, f"a change has {len(values)} columns, the relation {width}")
                return
            txn.idx += 1
            out.append(d.copy_line(values, b"%s\t%s\t%d" % (sign, txn.tail, txn.idx)))
        s.buf_rows += len(rows)
        s.counts[rel.relid] += len(rows)
        if s.buf_rows >= self.opt.flush_rows:
            self._flush()

    def _truncate(self, rel: CapturedRelation) -> None:
        """`-row` for every row R holds now: R̂ rolled forward with ΔR past TS(R̂)."""
        s = self.s
        assert s is not None and s.txn is not None
        self._flush()
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in rel.column_names)
        delta = sql.Identifier("_smile", rel.delta_table)
        query = sql.SQL(
            "INSERT INTO {delta} ({cols}, __sign, __ts, __lsn, __idx) "
            "SELECT {cols}, -1, %(ts)s, %(lsn)s::pg_lsn, %(idx)s + row_number() OVER () "
            "FROM (SELECT {cols}, __n FROM ("
            "  SELECT {cols}, sum(__m) AS __n FROM ("
            "    SELECT {cols}, 1 AS __m FROM {shadow} "
            "    UNION ALL SELECT {cols}, __sign FROM {delta} WHERE __ts > "
            "      (SELECT ts FROM _smile.vertex_ts WHERE vertex = %(sv)s)"
            "  ) u GROUP BY {cols} HAVING sum(__m) > 0) c) x, generate_series(1, x.__n)"
        ).format(delta=delta, cols=cols, shadow=sql.Identifier("_smile", rel.shadow_table))
        params = {
            "ts": d.pg_time(s.txn.ts), "lsn": d.format_lsn(s.txn.lsn), "idx": s.txn.idx,
            "sv": rel.shadow_vertex,
        }
        n = int(s.sink.call(lambda conn: conn.execute(query, params).rowcount))
        s.txn.idx += n
        s.counts[rel.relid] += n

    def _error(self, rel: CapturedRelation, reason: str) -> None:
        s = self.s
        assert s is not None
        lsn = s.txn.lsn if s.txn else s.progress.commit_lsn
        message = f"capture of {rel.qualified} stopped: {reason}; publish it again to restart"
        log.error("%s (at LSN %s)", message, d.format_lsn(lsn))
        self._flush()  # what came before the error point is good: keep it
        s.errors[rel.relid] = message
        s.sink.execute(
            "UPDATE _smile.capture_state SET error = %s, error_lsn = %s::pg_lsn, "
            "error_at = clock_timestamp() WHERE relid = %s AND error IS NULL",
            (message, d.format_lsn(lsn), rel.relid),
        )

    # -- writing -------------------------------------------------------------------------------
    def _flush(self) -> None:
        s = self.s
        assert s is not None
        for relid, lines in s.buf.items():
            if lines:
                rel = s.rels[relid]
                s.sink.rows(rel.delta_table, rel.column_names, lines)
        s.buf = defaultdict(list)
        s.buf_rows = 0

    def _commit(self) -> None:
        s = self.s
        assert s is not None and s.pending is not None
        self._flush()
        done = s.pending
        for relid, (lsn, reason) in list(s.pending_drop.items()):
            if done.commit_lsn >= lsn and relid not in s.errors and relid in s.rels:
                self._error(s.rels[relid], reason)
                del s.pending_drop[relid]
        live = [r.delta_vertex for r in s.rels.values()
                if r.relid not in s.errors and r.state == "streaming"
                and r.start_lsn is not None and r.start_lsn <= done.commit_lsn]
        s.sink.commit(done, live, s.counts)
        s.progress, s.pending, s.pending_rows = done, None, 0
        s.counts.clear()

    # -- housekeeping (between transactions, on the side connection) ---------------------------
    def _check_relations(self) -> None:
        """Notice dropped tables and changed schemas even when no change of theirs flows."""
        s = self.s
        assert s is not None
        s.rels = load_relations(s.side)
        rows = s.side.execute(
            "SELECT r.relid, pg_current_wal_lsn()::text, c.oid IS NULL, "
            "  (SELECT coalesce(jsonb_agg(jsonb_build_object('name', a.attname, "
            "     'type', a.atttypid::int) ORDER BY a.attnum), '[]') "
            "   FROM pg_attribute a WHERE a.attrelid = r.relid AND a.attnum > 0 "
            "   AND NOT a.attisdropped) <> r.columns "
            "FROM _smile.captured_relations r LEFT JOIN pg_class c ON c.oid = r.relid "
            "WHERE r.state = 'streaming'"
        ).fetchall()
        for relid, lsn, dropped, changed in rows:
            if relid in s.errors or relid in s.pending_drop:
                continue
            if dropped:
                s.pending_drop[relid] = (d.parse_lsn(lsn), "the table was dropped")
            elif changed:
                s.pending_drop[relid] = (d.parse_lsn(lsn), "its columns changed (ALTER TABLE)")
        if s.pending_drop and s.pending is None and s.txn is None:
            # a tick makes the stream pass the LSNs above even if nothing else happens
            s.side.execute("SELECT pg_logical_emit_message(true, %s, '')", (TICK_PREFIX,))

    def _wait_for_snapshot(self, relid: int, stop: threading.Event) -> None:
        """A relation is being published: wait (outside any transaction) for its snapshot."""
        deadline = time.monotonic() + self.opt.snapshot_wait_s
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not stop.is_set() and time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT state FROM _smile.captured_relations WHERE relid = %s", (relid,)
                ).fetchone()
                if row is None or row[0] == "streaming":
                    return
                stop.wait(0.1)
            if not stop.is_set():
                conn.execute(
                    "UPDATE _smile.capture_state SET error = %s, error_at = clock_timestamp() "
                    "WHERE relid = %s AND error IS NULL",
                    ("its snapshot never finished; publish it again", relid),
                )


def prune_deltas(conn: psycopg.Connection[Any]) -> None:
    """Delete the ΔR rows every reader of each streaming relation is past
    (`operators.retention`)."""
    retention.prune_due(conn, {rel.delta_vertex: ("_smile", rel.delta_table)
                               for rel in load_relations(conn).values()
                               if rel.state == "streaming"})


SHADOW_LOCK_WAIT = "200ms"
"""How long advancing a shadow waits for it: a join holding R̂ still goes first, and the shadow
is advanced in a later round (a waiting advance would hold every later join behind it)."""


def advance_shadows(conn: psycopg.Connection[Any]) -> None:
    """Advance the shadow copy R̂ of each healthy streaming relation to its ΔR's watermark."""
    errors = load_errors(conn)
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (SHADOW_LOCK_WAIT,))
    for rel in load_relations(conn).values():
        if rel.state != "streaming" or rel.relid in errors:
            continue
        try:
            delta_to_rel(
                conn, delta=("_smile", rel.delta_table), rel=("_smile", rel.shadow_table),
                columns=rel.column_names, rel_vertex=rel.shadow_vertex,
                delta_vertex=rel.delta_vertex, to_ts=vertex_ts.read(conn, rel.delta_vertex),
            )
        except psycopg.errors.LockNotAvailable:
            continue  # in use by a join: next round
        except (psycopg.Error, SmileError) as exc:
            log.warning("advancing the shadow of %s failed: %s", rel.qualified, exc)


def _schema_change(before: tuple[tuple[str, int], ...], after: tuple[tuple[str, int], ...]) -> str:
    added = [n for n, _ in after if n not in dict(before)]
    removed = [n for n, _ in before if n not in dict(after)]
    retyped = [n for n, t in after if n in dict(before) and dict(before)[n] != t]
    parts = [f"{label} {names}" for label, names in
             (("added", added), ("removed", removed), ("retyped", retyped)) if names]
    return "its columns changed (" + (", ".join(parts) or "reordered") + ")"
