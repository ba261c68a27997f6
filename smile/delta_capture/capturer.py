"""The capturer of one machine: the session loop that takes the pgoutput stream into signed
delta rows, exactly once.

Source transactions are handled in commit-LSN order (a big one streamed before its commit is
spooled and handled at its commit, `spool.py`); `transform.py` stamps each and turns its row
changes into COPY lines. Several source transactions go into one target transaction, which also
writes the progress (`progress.py`) and the watermarks TS(ΔR) of all relations; only after it
commits is the slot told (`stream.confirm`). A replayed transaction (commit LSN not beyond the
progress) is skipped, so a SIGKILL or a source restart at any point leaves every committed
change in ΔR exactly once.

When the source is idle the capturer commits a transactional logical message (`smile.tick`)
every `tick_s`; its arrival proves every earlier commit was seen, so watermarks follow the
source's clock. TRUNCATE becomes `-row` for every row of R at that point (R̂ rolled forward with
ΔR). A column added, dropped, renamed or retyped is followed (`transform.layout`: from a
column's loss on, R holds NULL in it); a dropped table or an UPDATE without the whole old row
stops that relation's capture with an error in `_smile.capture_state`; the others go on. A slot that
PostgreSQL invalidated (`max_slot_wal_keep_size`) is replaced and every relation's ΔR caught up
from a snapshot before streaming resumes (`resync.py`).

Must not: decode bytes (`decode.py`), build delta rows (`transform.py`), own the socket
(`stream.py`), spell SQL (`source.py`), create the first contents of a shadow copy
(`snapshot.py`), or run operators: retention of ΔR and the advance of R̂ run beside it
(`smile.housekeeping.capture`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg

from smile.db import SYNC_COMMIT
from smile.delta_capture import decode as d
from smile.delta_capture import source
from smile.delta_capture.progress import Progress, read_progress
from smile.delta_capture.publish import ensure_capture_setup
from smile.delta_capture.registry import (
    PUBLICATION,
    SLOT,
    CapturedRelation,
    load_errors,
    load_relations,
)
from smile.delta_capture.resync import resync, slot_lost
from smile.delta_capture.sink import DeltaSink
from smile.delta_capture.spool import Streams
from smile.delta_capture.stream import ReplicationStream
from smile.delta_capture.transform import (
    Batch,
    Starts,
    Txn,
    change_lines,
    gone,
    insert_line,
    layout,
    open_txn,
)
from smile.errors import CaptureError, SmileError

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("smile.capture")


class _Restart(Exception):
    """Abandon the open target transaction and restart the stream from the durable progress."""

    def __init__(self, wait_for: int | None = None) -> None:
        super().__init__(wait_for)
        self.wait_for = wait_for


@dataclass(frozen=True)
class CaptureOptions:
    tick_s: float = 0.25
    """How long the source may be idle before a tick message moves the watermarks on."""
    batch_s: float = 0.1
    """How long source transactions gather in one target transaction at most."""
    batch_rows: int = 100_000
    flush_rows: int = 5_000
    """COPY lines held before they are handed to the sink."""
    read_linger_s: float = 0.002
    """How long a read waits, once a message is there, for those behind it (`stream.read`)."""
    housekeeping_s: float = 2.0
    """How often dropped tables and changed schemas are looked for between transactions."""
    snapshot_wait_s: float = 120.0


@dataclass
class _Session:
    sink: DeltaSink
    side: psycopg.Connection[Any]
    stream: ReplicationStream
    progress: Progress
    rels: dict[int, CapturedRelation]
    errors: dict[int, str]
    starts: Starts = field(default_factory=lambda: Starts(()))
    batch: Batch = field(default_factory=Batch)
    pending: Progress | None = None
    pending_since: float = 0.0
    pending_rows: int = 0
    pending_drop: dict[int, tuple[int, str]] = field(default_factory=dict)
    txn: Txn | None = None
    streams: Streams = field(default_factory=Streams)
    hot_txn: Txn | None = None
    """The last INSERT's transaction, its relation id (as the message's bytes), what
    `_relation` said of it, its width and the batch's list of its lines."""
    hot_relid: bytes = b""
    hot_rel: CapturedRelation | None = None
    hot_width: int = 0
    hot_lines: list[bytes] = field(default_factory=list)
    places: dict[int, tuple[tuple[tuple[str, int], ...], tuple[int | None, ...]]] = field(
        default_factory=dict)
    """Where the published columns (as they were: published again, the relation has others)
    are in the rows of a relation whose columns no longer lead its table
    (`transform.layout`): its changes take the slow path."""

    def places_of(self, rel: CapturedRelation) -> tuple[int | None, ...] | None:
        got = self.places.get(rel.relid)
        return got[1] if got is not None and got[0] == rel.columns else None


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
        self._handlers: dict[type, Callable[[Any], None]] = {
            d.Insert: self._change, d.Update: self._change, d.Delete: self._change,
            d.Relation: self._relation_message,
            d.Truncate: self._truncate_message, d.StreamStart: self._stream_control,
            d.StreamStop: self._stream_control, d.StreamAbort: self._stream_control,
            d.StreamCommit: self._stream_commit,
        }

    # -- the loop ------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None) -> None:
        """Capture until `stop` is set, reconnecting after failures."""
        stop = stop or threading.Event()
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

    def _close(self) -> None:
        if self.s is None:
            return
        self.s.stream.close()
        self.s.sink.close()
        self.s.streams.close()
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
        self.s = s = _Session(DeltaSink(self.dsn, self.slot), side, stream, progress, rels, errors,
                              Starts.of(rels.values()))
        stream.open(progress.end_lsn)
        last_seen = last_tick = last_house = time.monotonic()
        while not stop.is_set():
            got = stream.read(self.opt.batch_s if s.pending else self.opt.tick_s / 2,
                              self.opt.read_linger_s, s.sink.wake_fd)
            now = time.monotonic()
            self._confirm_durable()
            if got is None:  # woken by the sink: a commit is durable, and confirmed above
                continue
            if got and self._receive_all(got, now):
                last_seen = now
            if s.pending is not None and s.txn is None and (not got or self._due(now)):
                self._commit()
            if s.txn is None and not got:
                if now - last_seen >= self.opt.tick_s and now - last_tick >= self.opt.tick_s:
                    source.emit_tick(side)
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
        done = s.sink.done
        while done:
            durable = done.popleft()
            s.stream.confirm(durable.end_lsn)
            if self.on_commit:
                self.on_commit(durable)

    def _due(self, now: float) -> bool:
        """Whether the pending source transactions have gathered long enough (or enough rows)
        for their target commit."""
        s = self.s
        assert s is not None
        return s.pending_rows >= self.opt.batch_rows or now - s.pending_since >= self.opt.batch_s

    # -- messages ------------------------------------------------------------------------------
    def _receive_all(self, batch: list[bytes], now: float) -> bool:
        """The messages of one read, in order; True if one committed a source transaction.
        Inside a stream block a change is spooled (`spool.py`) until its transaction's
        StreamCommit. A target commit falls due at a source commit, so a load that never
        leaves the socket empty between transactions still commits every `batch_s`."""
        s = self.s
        assert s is not None
        committed = False
        streams = s.streams
        for payload in batch:  # once per message: the INSERT path before `_apply`'s dispatch
            if streams.open is not None and streams.spool(payload):
                continue
            if payload[0] == 0x49 and self._insert(payload):
                continue
            if self._apply(payload):
                committed = True
                if s.pending is not None and s.txn is None and self._due(now):
                    self._commit()
        return committed

    def _apply(self, payload: bytes) -> bool:
        """One message; Begin, INSERT and Commit — a small transaction's three — straight from
        their bytes, the others decoded into a value and dispatched by type."""
        tag = payload[0]
        if tag == 0x49:  # 'I'
            if self._insert(payload):
                return False
        elif tag == 0x42:  # 'B'
            self._begin(*d.begin_fields(payload))
            return False
        elif tag == 0x43:  # 'C'
            commit_lsn, end_lsn, _ = d.commit_fields(payload)
            self._end(commit_lsn, end_lsn)
            return True
        msg = d.decode(payload)
        handler = self._handlers.get(type(msg))
        if handler is not None:  # Message, Origin and Type need nothing
            handler(msg)
        return isinstance(msg, (d.Commit, d.StreamCommit))

    def _live_txn(self) -> Txn | None:
        """The transaction whose changes go to ΔR now (None outside one, or in a replay)."""
        s = self.s
        assert s is not None
        return None if s.txn is None or s.txn.skip else s.txn

    def _change(self, msg: d.Insert | d.Update | d.Delete) -> None:
        s = self.s
        assert s is not None
        txn = self._live_txn()
        rel = None if txn is None else self._relation(msg.relid)
        if txn is None or rel is None:
            return
        lines = change_lines(msg, txn, len(rel.columns), s.places_of(rel))
        if isinstance(lines, str):
            self._error(rel, lines)
        else:
            self._hold(rel.relid, lines)

    def _relation_message(self, msg: d.Relation) -> None:
        s = self.s
        assert s is not None
        # pgoutput sends one when the table changed and when its publication did: a table
        # published again (its columns as they are now) must not be laid out by its old
        # registration, which would find its retyped columns lost once more
        self._reload_relations()
        s.places.pop(msg.relid, None)
        rel = s.rels.get(msg.relid)
        if rel is None or msg.relid in s.errors or rel.state != "streaming":
            return
        s.hot_txn = None  # the hot path's width may be this relation's no more
        places = layout(rel.columns, tuple((c.name, c.type_oid) for c in msg.columns))
        if places is not None:
            s.places[rel.relid] = (rel.columns, places)
            txn = self._live_txn()
            if txn is not None and self._relation(rel.relid) is not None:
                self._columns_gone(rel, txn, gone(rel.columns, places))

    def _columns_gone(self, rel: CapturedRelation, txn: Txn, columns: list[str]) -> None:
        """From here R holds NULL in `columns` (`source.write_columns_gone`)."""
        s = self.s
        assert s is not None
        self._flush()
        n = int(s.sink.call(partial(source.write_columns_gone, rel=rel, columns=columns,
                                    ts=d.pg_time(txn.ts), lsn=txn.lsn, idx=txn.idx)))
        txn.idx += n
        s.batch.counts[rel.relid] += n

    def _truncate_message(self, msg: d.Truncate) -> None:
        if self._live_txn() is None:
            return
        for relid in msg.relids:
            rel = self._relation(relid)
            if rel is not None:
                self._truncate(rel)

    # -- streamed transactions (bigger than the server's `logical_decoding_work_mem`) ----------
    def _stream_control(self, msg: d.StreamStart | d.StreamStop | d.StreamAbort) -> None:
        assert self.s is not None
        self.s.streams.control(msg)

    def _stream_commit(self, msg: d.StreamCommit) -> None:
        """Handled at its commit as if it had come whole."""
        s = self.s
        assert s is not None
        assert s.txn is None, "a stream commit inside a transaction"
        spool = s.streams.commit(msg.xid)
        self._begin(msg.commit_lsn, msg.commit_ts, msg.xid)
        if spool is not None:
            try:
                for payload in spool.replay():
                    self._apply(payload)
            finally:
                spool.close()
        self._end(msg.commit_lsn, msg.end_lsn)

    # -- transactions --------------------------------------------------------------------------
    def _begin(self, final_lsn: int, commit_ts: int, xid: int) -> None:
        s = self.s
        assert s is not None
        last = s.pending.last_ts if s.pending else s.progress.last_ts
        s.txn = open_txn(final_lsn, commit_ts, xid, s.progress.commit_lsn, last,
                         s.starts.floor(final_lsn))
        if not s.txn.skip and s.pending is None:
            s.pending_since = time.monotonic()

    def _end(self, commit_lsn: int, end_lsn: int) -> None:
        s = self.s
        assert s is not None
        txn, s.txn = s.txn, None
        if txn is None or txn.skip:
            return
        s.pending = Progress(commit_lsn, end_lsn, txn.ts, txn.xid)
        s.pending_rows += txn.idx

    def _relation(self, relid: int) -> CapturedRelation | None:
        """The registered, healthy relation whose changes at this point belong in its delta."""
        s = self.s
        assert s is not None and s.txn is not None
        if relid in s.errors:
            return None
        rel = s.rels.get(relid)
        if rel is None:
            self._reload_relations()
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
        if txn is None or txn.skip:
            return txn is not None
        if s.hot_txn is not txn or s.hot_relid != payload[1:5]:
            self._heat(txn, payload[1:5])  # not the transaction's last relation again
        if s.hot_rel is None:
            return True
        line = insert_line(payload, txn, s.hot_width)
        if line is None:
            return False
        s.hot_lines.append(line)
        batch = s.batch
        batch.rows += 1
        if batch.rows >= self.opt.flush_rows:
            self._flush()
        return True

    def _heat(self, txn: Txn, relid: bytes) -> None:
        """The relation an INSERT of `txn` is on, remembered for the next one."""
        s = self.s
        assert s is not None
        rel = self._relation(int.from_bytes(relid, "big"))
        s.hot_txn, s.hot_relid, s.hot_rel = txn, relid, rel
        if rel is not None:  # a relation whose columns moved never takes the hot path
            s.hot_width = len(rel.columns) if s.places_of(rel) is None else 1 << 16
            s.hot_lines = s.batch.lines_of(rel.relid)

    def _hold(self, relid: int, lines: list[bytes]) -> None:
        s = self.s
        assert s is not None
        s.batch.add(relid, lines)
        if s.batch.rows >= self.opt.flush_rows:
            self._flush()

    def _truncate(self, rel: CapturedRelation) -> None:
        """`-row` for every row R holds now: R̂ rolled forward with ΔR past TS(R̂)."""
        s = self.s
        assert s is not None and s.txn is not None
        self._flush()
        txn = s.txn
        n = int(s.sink.call(partial(source.write_truncate, rel=rel, ts=d.pg_time(txn.ts),
                                    lsn=txn.lsn, idx=txn.idx)))
        txn.idx += n
        s.batch.counts[rel.relid] += n

    def _error(self, rel: CapturedRelation, reason: str) -> None:
        s = self.s
        assert s is not None
        lsn = s.txn.lsn if s.txn else s.progress.commit_lsn
        message = f"capture of {rel.qualified} stopped: {reason}; publish it again to restart"
        log.error("%s (at LSN %s)", message, d.format_lsn(lsn))
        self._flush()  # what came before the error point is good: keep it
        s.errors[rel.relid] = message
        s.hot_txn = None
        s.sink.do(partial(source.mark_error, relid=rel.relid, message=message, lsn=lsn))

    # -- writing -------------------------------------------------------------------------------
    def _flush(self) -> None:
        s = self.s
        assert s is not None
        s.hot_txn = None  # its list of lines goes with the batch
        for relid, lines in s.batch.take().items():
            rel = s.rels[relid]
            s.sink.rows(rel.delta_table, rel.column_names, lines)

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
        s.sink.commit(done, live, s.batch.take_counts())
        s.progress, s.pending, s.pending_rows = done, None, 0

    # -- between transactions, on the side connection ------------------------------------------
    def _reload_relations(self) -> None:
        s = self.s
        assert s is not None
        s.rels = load_relations(s.side)
        s.starts = Starts.of(s.rels.values())

    def _check_relations(self) -> None:
        """Notice dropped tables and changed schemas even when no change of theirs flows."""
        s = self.s
        assert s is not None
        self._reload_relations()
        for relid, lsn, reason in source.changed_relations(s.side):
            if relid not in s.errors and relid not in s.pending_drop:
                s.pending_drop[relid] = (lsn, reason)
        if s.pending_drop and s.pending is None and s.txn is None:
            # a tick makes the stream pass the LSNs above even if nothing else happens
            source.emit_tick(s.side)

    def _wait_for_snapshot(self, relid: int, stop: threading.Event) -> None:
        """A relation is being published: wait (outside any transaction) for its snapshot."""
        deadline = time.monotonic() + self.opt.snapshot_wait_s
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not stop.is_set() and time.monotonic() < deadline:
                if source.relation_state(conn, relid) in (None, "streaming"):
                    return
                stop.wait(0.1)
            if not stop.is_set():
                source.mark_error(conn, relid, "its snapshot never finished; publish it again")
