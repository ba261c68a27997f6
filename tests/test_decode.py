"""pgoutput decoding: hand-made messages, and real bytes from PostgreSQL's own pgoutput."""

from __future__ import annotations

import secrets
import struct
from typing import TYPE_CHECKING

import psycopg
import pytest

from smile.delta_capture import decode as d
from smile.delta_capture.spool import Spool, Streams
from smile.errors import CaptureError

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle


def _tuple(*values: bytes | str | None) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == "u":
            out += b"u"
        else:
            assert isinstance(v, bytes)
            out += b"t" + struct.pack(">i", len(v)) + v
    return out


def test_insert_update_delete() -> None:
    ins = d.decode(b"I" + struct.pack(">I", 42) + b"N" + _tuple(b"1", None, b"x"))
    assert ins == d.Insert(42, (b"1", None, b"x"))
    upd = d.decode(b"U" + struct.pack(">I", 42) + b"O" + _tuple(b"1", b"old")
                   + b"N" + _tuple(b"1", "u"))
    assert isinstance(upd, d.Update) and upd.old_kind == "O"
    assert upd.old == (b"1", b"old") and upd.new == (b"1", d.UNCHANGED)
    upd2 = d.decode(b"U" + struct.pack(">I", 7) + b"N" + _tuple(b"2"))
    assert isinstance(upd2, d.Update) and upd2.old is None and upd2.old_kind == ""
    dele = d.decode(b"D" + struct.pack(">I", 42) + b"O" + _tuple(b"1", b"old"))
    assert dele == d.Delete(42, "O", (b"1", b"old"))


def test_begin_commit_relation_truncate_message() -> None:
    assert d.decode(b"B" + struct.pack(">qqI", 100, 5, 9)) == d.Begin(100, 5, 9)
    assert d.decode(b"C" + struct.pack(">bqqq", 0, 100, 120, 5)) == d.Commit(100, 120, 5)
    rel = d.decode(b"R" + struct.pack(">I", 42) + b"public\0users\0f" + struct.pack(">h", 2)
                   + b"\x01uid\0" + struct.pack(">Ii", 20, -1)
                   + b"\x00name\0" + struct.pack(">Ii", 25, -1))
    assert isinstance(rel, d.Relation)
    assert (rel.namespace, rel.name, rel.replica_identity) == ("public", "users", "f")
    assert rel.columns == (d.Column("uid", 20, -1, True), d.Column("name", 25, -1, False))
    tr = d.decode(b"T" + struct.pack(">ib", 2, 1) + struct.pack(">II", 42, 43))
    assert tr == d.Truncate((42, 43), True, False)
    msg = d.decode(b"M" + struct.pack(">bq", 1, 77) + b"smile.tick\0" + struct.pack(">i", 2)
                   + b"hi")
    assert msg == d.Message(True, 77, "smile.tick", b"hi")


def test_malformed_messages_raise_capture_errors() -> None:
    with pytest.raises(CaptureError, match="unknown message type"):
        d.decode(b"Z")
    with pytest.raises(CaptureError, match="malformed"):
        d.decode(b"I\x00\x00")
    with pytest.raises(CaptureError, match="empty"):
        d.decode(b"")


def test_copy_line_escapes_what_copy_needs() -> None:
    line = d.copy_line((b"a\tb", None, b"back\\slash", b"l1\nl2\r"), b"1\tts")
    assert line == b"a\\tb\t\\N\tback\\\\slash\tl1\\nl2\\r\t1\tts\n"
    assert d.copy_line((b"plain", b"x"), b"T") == b"plain\tx\tT\n"


@pytest.mark.services
def test_real_pgoutput_bytes(cloud: CloudHandle) -> None:
    """Decode what PostgreSQL 15's pgoutput really sends for each kind of change."""
    dsn = cloud.topology.machines[0].dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS dec_t")
        conn.execute("CREATE TABLE dec_t (k int, v text, big text)")
        conn.execute("ALTER TABLE dec_t REPLICA IDENTITY FULL")
        conn.execute("DROP PUBLICATION IF EXISTS dec_pub")
        conn.execute("CREATE PUBLICATION dec_pub FOR TABLE dec_t")
        conn.execute("SELECT pg_create_logical_replication_slot('dec_slot', 'pgoutput')")
        try:
            big = secrets.token_hex(10_000)  # incompressible: stored out of line (TOAST)
            conn.execute("INSERT INTO dec_t VALUES (1, 'a\tb', %s), (2, NULL, 'small')", (big,))
            conn.execute("UPDATE dec_t SET v = 'new' WHERE k = 1")
            conn.execute("DELETE FROM dec_t WHERE k = 2")
            conn.execute("TRUNCATE dec_t")
            rows = conn.execute(
                "SELECT data FROM pg_logical_slot_get_binary_changes('dec_slot', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'dec_pub')").fetchall()
        finally:
            conn.execute("SELECT pg_drop_replication_slot('dec_slot')")
            conn.execute("DROP PUBLICATION dec_pub")
            conn.execute("DROP TABLE dec_t")
    msgs = [d.decode(bytes(r[0])) for r in rows]
    kinds = [type(m).__name__ for m in msgs if not isinstance(m, (d.Begin, d.Commit, d.Relation))]
    assert kinds == ["Insert", "Insert", "Update", "Delete", "Truncate"]
    assert isinstance(msgs[1], d.Relation)  # a Relation comes before the first change
    rel = next(m for m in msgs if isinstance(m, d.Relation))
    assert [c.name for c in rel.columns] == ["k", "v", "big"] and rel.replica_identity == "f"
    ins = [m for m in msgs if isinstance(m, d.Insert)]
    assert ins[0].new == (b"1", b"a\tb", big.encode()) and ins[1].new == (b"2", None, b"small")
    upd = next(m for m in msgs if isinstance(m, d.Update))
    assert upd.old_kind == "O" and upd.old == (b"1", b"a\tb", big.encode())  # FULL: whole old row
    assert upd.new == (b"1", b"new", d.UNCHANGED)  # the untouched TOASTed value is not resent
    dele = next(m for m in msgs if isinstance(m, d.Delete))
    assert dele.old == (b"2", None, b"small")
    begins = [m for m in msgs if isinstance(m, d.Begin)]
    commits = [m for m in msgs if isinstance(m, d.Commit)]
    assert len(begins) == len(commits) == 4
    assert all(b.final_lsn == c.commit_lsn for b, c in zip(begins, commits, strict=True))


def test_stream_messages_and_the_xid_inside_a_block() -> None:
    """Protocol 2: the control messages of a streamed transaction, and a change inside a
    block whose xid `unstream` splits off, leaving the protocol-1 message."""
    assert d.decode(b"S" + struct.pack(">I", 77) + b"\x01") == d.StreamStart(77, True)
    assert d.decode(b"S" + struct.pack(">I", 77) + b"\x00") == d.StreamStart(77, False)
    assert d.decode(b"E") == d.StreamStop()
    commit = d.decode(b"c" + struct.pack(">Ibqqq", 77, 0, 0x100, 0x180, 5_000_000))
    assert commit == d.StreamCommit(77, 0x100, 0x180, 5_000_000)
    assert isinstance(commit, d.StreamCommit)
    assert commit.begin() == d.Begin(0x100, 5_000_000, 77)
    assert commit.commit() == d.Commit(0x100, 0x180, 5_000_000)
    assert d.decode(b"A" + struct.pack(">II", 77, 78)) == d.StreamAbort(77, 78)
    body = struct.pack(">I", 42) + b"N" + _tuple(b"1", None)
    xid, inner = d.unstream(b"I" + struct.pack(">I", 78) + body)
    assert xid == 78 and d.decode(inner) == d.Insert(42, (b"1", None))
    with pytest.raises(CaptureError, match="stream block"):
        d.unstream(b"B" + struct.pack(">qqI", 1, 2, 3))
    with pytest.raises(CaptureError, match="malformed"):
        d.decode(b"c" + struct.pack(">I", 77))


def test_a_spool_replays_in_order_without_rolled_back_subtransactions() -> None:
    """Past its memory share the spool goes to a file; a rolled-back subtransaction's
    messages are not replayed, the others come back in arrival order."""
    spool = Spool(in_memory=64)
    sent = [(7, b"I" + bytes([i]) * 40) for i in range(3)] + [(8, b"U" * 50), (7, b"D" * 10)]
    for subxid, payload in sent:
        spool.add(subxid, payload)
    spool.abort(8)
    assert list(spool.replay()) == [p for x, p in sent if x != 8]
    spool.close()


def test_a_stream_block_whose_first_this_session_missed_restarts_the_stream() -> None:
    """A transaction may stream on in blocks after its first only if this session saw the
    first: otherwise its earlier changes were spooled by a session that is gone."""
    streams = Streams()
    streams.start(d.StreamStart(5, True))
    streams.stop()
    streams.start(d.StreamStart(5, False))  # its first block came earlier: fine
    streams.stop()
    with pytest.raises(CaptureError, match="without its first block"):
        streams.start(d.StreamStart(6, False))


def test_streams_spool_blocks_and_drop_what_aborts() -> None:
    """Inside a block a change is spooled under its transaction (its xid split off); a
    subtransaction's abort drops its messages, the whole transaction's abort its spool, and a
    first block sent again starts the spool afresh."""
    streams = Streams()

    def change(xid: int, tag: bytes = b"I") -> bytes:
        return tag + struct.pack(">I", xid) + b"body"

    assert not streams.spool(change(7))  # no block open
    streams.start(d.StreamStart(7, True))
    assert streams.spool(change(7)) and streams.spool(change(8, b"U"))
    assert not streams.spool(b"E")  # not a message of the transaction
    streams.stop()
    streams.abort(d.StreamAbort(7, 8))
    spool = streams.commit(7)
    assert spool is not None and list(spool.replay()) == [b"Ibody"]
    spool.close()
    streams.start(d.StreamStart(9, True))
    streams.spool(change(9))
    streams.start(d.StreamStart(9, True))  # sent again from its start
    assert streams.spool(change(9, b"D"))
    streams.stop()
    streams.abort(d.StreamAbort(9, 9))
    assert streams.commit(9) is None and not streams.spools
    streams.close()
