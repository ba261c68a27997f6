"""Row changes into delta rows: the timestamp a source transaction gets, and the COPY lines its
INSERTs, UPDATEs and DELETEs become in ΔR.

A captured transaction is stamped `__ts = max(commit_ts, prev + 1µs)`, and past the start time
of every relation whose snapshot its commit LSN crosses, so timestamps grow with the commit
LSN and every row of ΔR is later than the shadow copy's first contents. INSERT becomes `+new`,
UPDATE `-old, +new` (an unchanged TOASTed value taken from the old row, which REPLICA IDENTITY
FULL carries whole) and DELETE `-old`; each line ends with `sign, __ts, __lsn, __idx`, `__idx`
numbering the rows of the transaction from 1.

Pure: no socket, no connection, no SMILE table; `capturer.py` hands it decoded changes and
hands what it returns to the sink.
"""

from __future__ import annotations

import functools
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from smile.delta_capture import decode as d

if TYPE_CHECKING:
    from collections.abc import Iterable

    from smile.delta_capture.registry import CapturedRelation


@dataclass(slots=True)
class Txn:
    """The source transaction being captured (mutable: `idx` counts its delta rows)."""

    lsn: int = 0
    """Its final (commit) LSN."""
    xid: int = 0
    ts: int = 0
    """Its `__ts`, in microseconds since 2000-01-01."""
    skip: bool = False
    """Already in ΔR (a replay after a restart): its changes are dropped."""
    idx: int = 0
    tail: bytes = b""
    """`__ts` and `__lsn` as COPY text, the end of each of its lines."""


@dataclass(frozen=True, slots=True)
class Starts:
    """When each relation began streaming — (start LSN, start time in µs) — for the floor a
    transaction's `__ts` must pass: every delta row is later than its shadow copy's first
    contents. Built once per load of the relations, not per transaction.

    >>> Starts.of(()).floor(5)
    0
    >>> s = Starts(((10, 7), (20, 9)))
    >>> s.floor(5), s.floor(15), s.floor(25)
    (0, 7, 9)
    """

    points: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, rels: Iterable[CapturedRelation]) -> Starts:
        return cls(tuple(sorted(
            (r.start_lsn, d.pg_micros(r.start_ts)) for r in rels
            if r.start_ts is not None and r.start_lsn is not None)))

    def floor(self, lsn: int) -> int:
        """The latest start time of the relations streaming at `lsn` (0: none)."""
        points = self.points
        if points and lsn >= points[-1][0]:  # the common case: every relation streams
            return max(ts for _, ts in points) if len(points) > 1 else points[0][1]
        return max((ts for start, ts in points if start <= lsn), default=0)


@functools.lru_cache(maxsize=4)
def _second(second: int) -> bytes:
    return d.pg_time(second * 1_000_000).strftime("%Y-%m-%dT%H:%M:%S").encode()


def stamp(ts: int) -> bytes:
    """A `__ts` (µs since 2000-01-01) as COPY text; the second's text is made once per second.

    >>> stamp(86_400_000_001)
    b'2000-01-02T00:00:00.000001+00:00'
    """
    second, micros = divmod(ts, 1_000_000)
    return b"%s.%06d+00:00" % (_second(second), micros)


def open_txn(final_lsn: int, commit_ts: int, xid: int, durable_lsn: int, last_ts: int,
             floor: int) -> Txn:
    """The transaction a Begin (final LSN, commit time, xid) opens: skipped if its commit LSN is
    not beyond `durable_lsn`, else stamped after `last_ts` and after `floor`
    (`Starts.floor`, the start of every relation streaming by then).

    >>> open_txn(100, 5, 1, durable_lsn=100, last_ts=0, floor=0).skip
    True
    >>> t = open_txn(200, 5, 1, durable_lsn=100, last_ts=9, floor=0)
    >>> t.ts, t.tail
    (10, b'2000-01-01T00:00:00.000010+00:00\\t0/C8')
    """
    if final_lsn <= durable_lsn:
        return Txn(lsn=final_lsn, skip=True)
    ts = max(commit_ts, last_ts + 1, floor + 1)
    return Txn(lsn=final_lsn, xid=xid, ts=ts, tail=b"%s\t%X/%X" % (stamp(ts), final_lsn >> 32,
                                                         final_lsn & 0xFFFFFFFF))


_LENGTH = struct.Struct(">i")
_SPECIAL = b"\\\t\n\r"


def insert_line(payload: bytes, txn: Txn, width: int) -> bytes | None:
    """The COPY line of an INSERT message straight from its bytes, the hot path: the new
    tuple's values cut out of the payload and joined, no message value, no row tuple; None
    when it is not a plain INSERT of at least `width` columns of text or NULL (the slow path,
    through `decode.decode` and `change_lines`, says why or handles it). Columns past `width`
    (added since the table was published) are left out.

    >>> t = Txn(tail=b"T\\t0/1")
    >>> insert_line(b"I\\0\\0\\0\\x07N\\0\\x02t\\0\\0\\0\\x01xn", t, 2), t.idx
    (b'x\\t\\\\N\\t1\\tT\\t0/1\\t1\\n', 1)
    >>> insert_line(b"I\\0\\0\\0\\x07N\\0\\x01t\\0\\0\\0\\x01x", t, 2) is None
    True
    """
    if payload[5] != 0x4E or (payload[6] << 8 | payload[7]) < width:
        return None
    values: list[bytes | None] = []
    append = values.append
    unpack = _LENGTH.unpack_from
    pos = 8
    nulls = False
    for _ in range(width):
        kind = payload[pos]
        if kind == 0x74:  # 't'
            (length,) = unpack(payload, pos + 1)
            pos += 5 + length
            append(payload[pos - length : pos])
        elif kind == 0x6E:  # 'n'
            append(None)
            pos += 1
            nulls = True
        else:
            return None
    txn.idx += 1
    if not nulls:
        joined = b"\t".join(values)  # type: ignore[arg-type]
        # no value holds a byte COPY escapes: the line is the values as they came
        if len(joined.translate(None, _SPECIAL)) + width - 1 == len(joined):
            return b"%s\t1\t%s\t%d\n" % (joined, txn.tail, txn.idx)
    joined = b"\t".join([d.copy_field(v) for v in values])
    return b"%s\t1\t%s\t%d\n" % (joined, txn.tail, txn.idx)


def _signed_rows(change: d.Insert | d.Update | d.Delete) -> list[tuple[bytes, d.Row]] | str:
    if isinstance(change, d.Insert):
        return [(b"1", change.new)]
    if isinstance(change, d.Delete):
        if change.old_kind != "O":
            return "a DELETE came without the old row: REPLICA IDENTITY is not FULL"
        return [(b"-1", change.old)]
    if change.old_kind != "O" or change.old is None:
        return "an UPDATE came without the old row: REPLICA IDENTITY is not FULL"
    new = change.new
    if d.UNCHANGED in new:
        new = tuple(o if v is d.UNCHANGED else v for v, o in zip(new, change.old, strict=True))
    return [(b"-1", change.old), (b"1", new)]


def change_lines(change: d.Insert | d.Update | d.Delete, txn: Txn, width: int,
                 places: tuple[int | None, ...] | None = None) -> list[bytes] | str:
    """The COPY lines of one row change of a relation of `width` columns (at `places` in the
    row, from `layout`, when they no longer lead it), or why it cannot be captured (then
    `txn` is left as it was).

    >>> t = Txn(tail=b"T\\t0/1")
    >>> change_lines(d.Update(7, "O", (b"a", b"big"), (b"b", d.UNCHANGED)), t, 2)
    [b'a\\tbig\\t-1\\tT\\t0/1\\t1\\n', b'b\\tbig\\t1\\tT\\t0/1\\t2\\n']
    >>> change_lines(d.Delete(7, "K", (b"a", None)), t, 2)
    'a DELETE came without the old row: REPLICA IDENTITY is not FULL'
    >>> change_lines(d.Insert(7, (b"b", b"z")), t, 2, (1, None))
    [b'z\\t\\\\N\\t1\\tT\\t0/1\\t3\\n']
    """
    rows = _signed_rows(change)
    if isinstance(rows, str):
        return rows
    if places is not None:
        rows = [(sign, tuple(None if at is None else values[at] for at in places))
                for sign, values in rows]
    for _, values in rows:
        if len(values) < width:
            return f"a change has {len(values)} columns, the relation {width}"
    lines = []
    for sign, values in rows:  # columns added after the published ones are left out
        txn.idx += 1
        lines.append(d.copy_line(values[:width], b"%s\t%s\t%d" % (sign, txn.tail, txn.idx)))
    return lines


def layout(before: tuple[tuple[str, int], ...], after: tuple[tuple[str, int], ...]
           ) -> tuple[int | None, ...] | None:
    """Where a relation's published columns (name, type oid) are in its rows now: None while
    they still lead the table (columns only added after them, `ALTER TABLE … ADD COLUMN`,
    whose values capture leaves out — the hot path); else each one's position, None for one
    the table no longer has as published — dropped, renamed (the stream cannot tell the two
    apart) or retyped: its values are captured as NULL, and the sharings that read it fail
    (`executor/capture_watch.py`). ΔR and R̂ keep the published columns; publishing the
    table again takes the new ones in.

    >>> layout((("k", 23),), (("k", 23), ("z", 23))) is None
    True
    >>> layout((("k", 23), ("v", 25), ("w", 25)), (("k", 23), ("w", 25), ("n", 25)))
    (0, None, 1)
    >>> layout((("k", 23), ("v", 25)), (("k", 23), ("v", 23)))
    (0, None)
    """
    if after[:len(before)] == before:
        return None
    now = {n: (i, t) for i, (n, t) in enumerate(after)}
    return tuple(now[n][0] if n in now and now[n][1] == t else None for n, t in before)


def gone(before: tuple[tuple[str, int], ...], places: tuple[int | None, ...]) -> list[str]:
    """The published columns a `layout` finds no more.

    >>> gone((("k", 23), ("v", 25)), (0, None))
    ['v']
    """
    return [n for (n, _), at in zip(before, places, strict=True) if at is None]


@dataclass
class Batch:
    """COPY lines not yet handed to the sink, per relation, and the rows captured per relation
    since the last target commit (for `rows_captured`)."""

    lines: dict[int, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    rows: int = 0
    """Lines held now."""
    counts: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    """Rows taken per relation since the last `take_counts` (TRUNCATE's are added apart)."""

    def add(self, relid: int, lines: list[bytes]) -> None:
        self.lines[relid].extend(lines)
        self.rows += len(lines)

    def lines_of(self, relid: int) -> list[bytes]:
        """The list of a relation's lines, for the INSERT hot path to append to itself (and
        count in `rows`) until the next `take`.

        >>> b = Batch()
        >>> b.lines_of(7).append(b"x"); b.rows += 1
        >>> b.take(), b.take_counts()
        ({7: [b'x']}, {7: 1})
        """
        return self.lines[relid]

    def take(self) -> dict[int, list[bytes]]:
        """The lines held, per relation with any; the batch keeps none after."""
        out = {relid: lines for relid, lines in self.lines.items() if lines}
        for relid, lines in out.items():
            self.counts[relid] += len(lines)
        self.lines = defaultdict(list)
        self.rows = 0
        return out

    def take_counts(self) -> dict[int, int]:
        out, self.counts = dict(self.counts), defaultdict(int)
        return out
