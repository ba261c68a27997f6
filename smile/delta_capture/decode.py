"""pgoutput (protocol version 2, streaming on) decoding: bytes in, message values out.

Pure: no socket, no database. Each CopyData payload of a logical replication stream using the
`pgoutput` plugin is one message; `decode` turns it into a frozen value. Tuple columns are `bytes`
(the type's text output), `None` for NULL, or `UNCHANGED` for a TOASTed value an UPDATE did not
touch (the caller takes it from the old row, which REPLICA IDENTITY FULL always carries whole).

The per-row messages (Begin, Commit, Insert, Update, Delete) are NamedTuples rather than frozen
dataclasses: they are made hundreds of thousands of times a second, and a frozen dataclass's
`__init__` costs several times more; both are immutable values.

A transaction bigger than `logical_decoding_work_mem` arrives streamed, before its commit: in
blocks between StreamStart and StreamStop whose Relation, Type, Insert, Update, Delete, Truncate
and Message carry the (sub)transaction's xid after their tag (`unstream` splits it off, leaving
the protocol-1 message), and then a StreamCommit or StreamAbort. Streaming is what keeps a big
transaction on tables nobody captures (a vertex filled at deploy, a user's batch job) from being
spilled to disk and replayed at its commit, which would hold every later commit back
(docs/design/capture.md, "Streaming").

Timestamps are kept as PostgreSQL sends them: microseconds since 2000-01-01 00:00 UTC.
LSNs are integers (`format_lsn` gives PostgreSQL's `X/Y` text).

Must not: open connections or know SMILE's tables.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, NamedTuple

from smile.errors import CaptureError

if TYPE_CHECKING:
    from collections.abc import Callable

PG_EPOCH: Final = datetime(2000, 1, 1, tzinfo=UTC)


class _Unchanged:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
Value = bytes | None | _Unchanged
Row = tuple[Value, ...]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_BEGIN = struct.Struct(">qqI")
_COMMIT = struct.Struct(">bqqq")
_STREAM_COMMIT = struct.Struct(">Ibqqq")
_STREAM_ABORT = struct.Struct(">II")
STREAMED: Final = frozenset(b"RYIUDTM")
"""The tags that carry an xid inside a stream block."""


def format_lsn(lsn: int) -> str:
    """PostgreSQL's text form of an LSN.

    >>> format_lsn(0x16B3748)
    '0/16B3748'
    """
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """The integer of an LSN's text form.

    >>> parse_lsn("1/A") == (1 << 32) + 10
    True
    """
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def pg_time(micros: int) -> datetime:
    """A pgoutput timestamp as an aware datetime.

    >>> pg_time(86_400_000_000).isoformat()
    '2000-01-02T00:00:00+00:00'
    """
    return PG_EPOCH + timedelta(microseconds=micros)


def pg_micros(moment: datetime) -> int:
    """The inverse of `pg_time`."""
    delta = moment - PG_EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class Begin(NamedTuple):
    final_lsn: int
    commit_ts: int
    xid: int


class Commit(NamedTuple):
    commit_lsn: int
    end_lsn: int
    commit_ts: int


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    typmod: int
    key: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


class Insert(NamedTuple):
    relid: int
    new: Row


class Update(NamedTuple):
    relid: int
    old_kind: str  # 'O' (whole old row), 'K' (key only) or '' (none sent)
    old: Row | None
    new: Row


class Delete(NamedTuple):
    relid: int
    old_kind: str
    old: Row


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class Message:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class TypeInfo:
    oid: int
    namespace: str
    name: str


class StreamStart(NamedTuple):
    xid: int
    first: bool
    """The transaction's first block (a restarted walsender sends it all again)."""


class StreamStop(NamedTuple):
    pass


class StreamCommit(NamedTuple):
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int

    def begin(self) -> Begin:
        """The Begin this transaction would have had unstreamed (its final LSN is its
        commit's)."""
        return Begin(self.commit_lsn, self.commit_ts, self.xid)

    def commit(self) -> Commit:
        return Commit(self.commit_lsn, self.end_lsn, self.commit_ts)


class StreamAbort(NamedTuple):
    xid: int
    subxid: int
    """`xid` itself when the whole transaction aborted, else one of its subtransactions."""


Decoded = (
    Begin | Commit | Relation | Insert | Update | Delete | Truncate | Message | Origin | TypeInfo
    | StreamStart | StreamStop | StreamCommit | StreamAbort
)


def unstream(buf: bytes) -> tuple[int, bytes]:
    """(xid, the message without it) for a message sent inside a stream block.

    >>> unstream(bytes([0x49]) + (7).to_bytes(4, "big") + b"rest")
    (7, b'Irest')
    """
    if len(buf) < 5 or buf[0] not in STREAMED:
        raise CaptureError(f"pgoutput: {buf[:1]!r} is not a message a stream block carries")
    return int.from_bytes(buf[1:5], "big"), buf[:1] + buf[5:]


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\0", pos)
    return buf[pos:end].decode(), end + 1


def read_tuple(buf: bytes, pos: int) -> tuple[Row, int]:
    """TupleData at `pos`: the row and the position after it."""
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    values: list[Value] = []
    append = values.append
    for _ in range(n):
        kind = buf[pos]
        pos += 1
        if kind == 0x74:  # 't'
            (length,) = _I32.unpack_from(buf, pos)
            pos += 4
            append(buf[pos : pos + length])
            pos += length
        elif kind == 0x6E:  # 'n'
            append(None)
        elif kind == 0x75:  # 'u'
            append(UNCHANGED)
        else:
            raise CaptureError(f"pgoutput: unexpected tuple column kind {chr(kind)!r}")
    return tuple(values), pos


def _insert(buf: bytes) -> Insert:
    (relid,) = _U32.unpack_from(buf, 1)
    if buf[5] != 0x4E:
        raise CaptureError("pgoutput: INSERT without a new tuple")
    row, _ = read_tuple(buf, 6)
    return Insert(relid, row)


def _update(buf: bytes) -> Update:
    (relid,) = _U32.unpack_from(buf, 1)
    pos = 5
    old: Row | None = None
    old_kind = ""
    if buf[pos] in (0x4B, 0x4F):  # 'K' | 'O'
        old_kind = chr(buf[pos])
        old, pos = read_tuple(buf, pos + 1)
    if buf[pos] != 0x4E:
        raise CaptureError("pgoutput: UPDATE without a new tuple")
    new, _ = read_tuple(buf, pos + 1)
    return Update(relid, old_kind, old, new)


def _delete(buf: bytes) -> Delete:
    (relid,) = _U32.unpack_from(buf, 1)
    kind = chr(buf[5])
    row, _ = read_tuple(buf, 6)
    return Delete(relid, kind, row)


def _begin(buf: bytes) -> Begin:
    final_lsn, ts, xid = _BEGIN.unpack_from(buf, 1)
    return Begin(final_lsn, ts, xid)


def _commit(buf: bytes) -> Commit:
    _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(buf, 1)
    return Commit(commit_lsn, end_lsn, ts)


def _relation(buf: bytes) -> Relation:
    (relid,) = _U32.unpack_from(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, pos = _cstring(buf, pos)
    ident = chr(buf[pos])
    (ncols,) = _I16.unpack_from(buf, pos + 1)
    pos += 3
    cols = []
    for _ in range(ncols):
        flags = buf[pos]
        cname, pos = _cstring(buf, pos + 1)
        type_oid, typmod = struct.unpack_from(">Ii", buf, pos)
        pos += 8
        cols.append(Column(cname, type_oid, typmod, bool(flags & 1)))
    return Relation(relid, namespace or "pg_catalog", name, ident, tuple(cols))


def _truncate(buf: bytes) -> Truncate:
    (nrels,) = _I32.unpack_from(buf, 1)
    options = buf[5]
    relids = struct.unpack_from(f">{nrels}I", buf, 6)
    return Truncate(tuple(relids), bool(options & 1), bool(options & 2))


def _message(buf: bytes) -> Message:
    flags = buf[1]
    (lsn,) = _I64.unpack_from(buf, 2)
    prefix, pos = _cstring(buf, 10)
    (length,) = _I32.unpack_from(buf, pos)
    return Message(bool(flags & 1), lsn, prefix, buf[pos + 4 : pos + 4 + length])


def _origin(buf: bytes) -> Origin:
    (lsn,) = _I64.unpack_from(buf, 1)
    name, _ = _cstring(buf, 9)
    return Origin(lsn, name)


def _stream_start(buf: bytes) -> StreamStart:
    (xid,) = _U32.unpack_from(buf, 1)
    return StreamStart(xid, buf[5] == 1)


def _stream_stop(_buf: bytes) -> StreamStop:
    return StreamStop()


def _stream_commit(buf: bytes) -> StreamCommit:
    xid, _flags, commit_lsn, end_lsn, ts = _STREAM_COMMIT.unpack_from(buf, 1)
    return StreamCommit(xid, commit_lsn, end_lsn, ts)


def _stream_abort(buf: bytes) -> StreamAbort:
    xid, subxid = _STREAM_ABORT.unpack_from(buf, 1)
    return StreamAbort(xid, subxid)


def _type(buf: bytes) -> TypeInfo:
    (oid,) = _U32.unpack_from(buf, 1)
    namespace, pos = _cstring(buf, 5)
    name, _ = _cstring(buf, pos)
    return TypeInfo(oid, namespace, name)


_COMMIT_FIELDS = struct.Struct(">xqqq")


def begin_fields(buf: bytes) -> tuple[int, int, int]:
    """A Begin's (final LSN, commit time, xid) straight from its bytes, without a message
    value: one of the three messages of every small transaction.

    >>> begin_fields(b"B" + _BEGIN.pack(100, 5, 9))
    (100, 5, 9)
    """
    return _BEGIN.unpack_from(buf, 1)


def commit_fields(buf: bytes) -> tuple[int, int, int]:
    """A Commit's (commit LSN, end LSN, commit time) straight from its bytes.

    >>> commit_fields(b"C" + _COMMIT.pack(0, 100, 120, 5))
    (100, 120, 5)
    """
    return _COMMIT_FIELDS.unpack_from(buf, 1)


_DECODERS: Final[dict[int, Callable[[bytes], Decoded]]] = {
    0x49: _insert, 0x55: _update, 0x44: _delete, 0x42: _begin, 0x43: _commit,  # I U D B C
    0x52: _relation, 0x54: _truncate, 0x4D: _message, 0x4F: _origin, 0x59: _type,  # R T M O Y
    0x53: _stream_start, 0x45: _stream_stop, 0x63: _stream_commit, 0x41: _stream_abort,  # S E c A
}
"""One decoder per message tag."""


def decode(buf: bytes) -> Decoded:
    """One pgoutput message."""
    if not buf:
        raise CaptureError("pgoutput: empty message")
    decoder = _DECODERS.get(buf[0])
    if decoder is None:
        raise CaptureError(f"pgoutput: unknown message type {chr(buf[0])!r}")
    try:
        return decoder(buf)
    except (struct.error, IndexError, ValueError) as exc:
        raise CaptureError(f"pgoutput: malformed {chr(buf[0])!r} message: {exc}") from exc


_SPECIAL = b"\\\t\n\r"


def copy_line(values: Row, tail: bytes) -> bytes:
    """One COPY text line: the escaped values, then `tail` (already COPY text), then newline.

    >>> copy_line((b"1", None, b"a\\tb"), b"+1")
    b'1\\t\\\\N\\ta\\\\tb\\t+1\\n'
    """
    if None not in values and UNCHANGED not in values:
        joined = b"\t".join(values)  # type: ignore[arg-type]
        # fast path: no value holds a special byte, so the only tabs are the separators
        if len(joined.translate(None, _SPECIAL)) + len(values) - 1 == len(joined):
            return joined + b"\t" + tail + b"\n"
    fields = [copy_field(v) for v in values]  # type: ignore[arg-type]
    fields.append(tail)
    return b"\t".join(fields) + b"\n"


def copy_field(value: bytes | None) -> bytes:
    """One field in COPY text format.

    >>> copy_field(b"a\\tb"), copy_field(None), copy_field(b"x\\\\y")
    (b'a\\\\tb', b'\\\\N', b'x\\\\\\\\y')
    """
    if value is None:
        return b"\\N"
    if len(value.translate(None, _SPECIAL)) == len(value):
        return value
    return (
        value.replace(b"\\", b"\\\\").replace(b"\t", b"\\t").replace(b"\n", b"\\n")
        .replace(b"\r", b"\\r")
    )
