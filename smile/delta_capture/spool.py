"""What a streamed transaction sent before its commit: its messages in arrival order, each
tagged with the (sub)transaction that made it, in memory up to a few MB and in a temporary file
beyond, so a big published transaction streams through in bounded memory.

At StreamCommit the capturer replays them as if the transaction had come unstreamed, minus the
subtransactions a StreamAbort rolled back; at a StreamAbort of the whole transaction, or when the
session ends (a restarted walsender streams it again from its first block), they are dropped.
`Streams` keeps the spools of one session and the state of its stream blocks.

Must not: decode a message beyond the xid a stream block adds to it (`decode.unstream`), or
know SMILE's tables.
"""

from __future__ import annotations

import struct
import tempfile
from typing import TYPE_CHECKING

from smile.delta_capture.decode import STREAMED, StreamAbort, StreamStart, unstream
from smile.errors import CaptureError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from smile.delta_capture.decode import StreamStop

_ENTRY = struct.Struct(">II")  # subxid, payload length
IN_MEMORY = 4 << 20


class Spool:
    def __init__(self, in_memory: int = IN_MEMORY) -> None:
        self._file = tempfile.SpooledTemporaryFile(max_size=in_memory)  # noqa: SIM115
        self.aborted: set[int] = set()
        self.messages = 0

    def add(self, subxid: int, payload: bytes) -> None:
        self._file.write(_ENTRY.pack(subxid, len(payload)))
        self._file.write(payload)
        self.messages += 1

    def abort(self, subxid: int) -> None:
        """A subtransaction rolled back: its messages will not be replayed."""
        self.aborted.add(subxid)

    def replay(self) -> Iterator[bytes]:
        """The payloads of the subtransactions that did not roll back, in arrival order."""
        f = self._file
        f.seek(0)
        for _ in range(self.messages):
            subxid, length = _ENTRY.unpack(f.read(_ENTRY.size))
            payload = f.read(length)
            if subxid not in self.aborted:
                yield payload

    def close(self) -> None:
        self._file.close()


class Streams:
    """The transactions streaming in one session: the open block (between StreamStart and
    StreamStop), the transactions whose first block this session saw, and their spools.

    >>> streams = Streams()
    >>> streams.start(StreamStart(5, True))
    >>> streams.spool(bytes([0x49]) + (5).to_bytes(4, "big") + b"rest")
    True
    >>> streams.stop()
    >>> streams.spool(b"Irest")
    False
    >>> [list(s.replay()) for s in [streams.commit(5)] if s is not None]
    [[b'Irest']]
    """

    def __init__(self) -> None:
        self.open: int | None = None
        """The transaction whose stream block is open."""
        self.seen: set[int] = set()
        """Transactions whose first stream block this session has seen (and not yet ended)."""
        self.spools: dict[int, Spool] = {}

    def control(self, msg: StreamStart | StreamStop | StreamAbort) -> None:
        """A block opens or closes, or (part of) a transaction aborts."""
        if isinstance(msg, StreamAbort):
            self.abort(msg)
        elif isinstance(msg, StreamStart):
            self.start(msg)
        else:
            self.stop()

    def start(self, msg: StreamStart) -> None:
        """A block opens; one that is not its transaction's first is refused unless this
        session saw the first (else its earlier changes were spooled by a session now gone)."""
        if msg.first:
            self.seen.add(msg.xid)
            if msg.xid in self.spools:  # sent again from its start
                self.spools.pop(msg.xid).close()
        elif msg.xid not in self.seen:
            raise CaptureError(f"transaction {msg.xid} streams on without its first block "
                               "in this session; restarting the stream")
        self.open = msg.xid

    def stop(self) -> None:
        self.open = None

    def spool(self, payload: bytes) -> bool:
        """Keep a message of the open block for its commit; False if it is not one (no block
        open, or a message that does not belong to a transaction)."""
        if self.open is None or payload[0] not in STREAMED:
            return False
        subxid, inner = unstream(payload)
        spool = self.spools.get(self.open)
        if spool is None:
            spool = self.spools[self.open] = Spool()
        spool.add(subxid, inner)
        return True

    def abort(self, msg: StreamAbort) -> None:
        """The whole transaction (its spool dropped) or one subtransaction rolled back."""
        spool = self.spools.get(msg.xid)
        if msg.subxid == msg.xid:
            self.seen.discard(msg.xid)
            if spool is not None:
                self.spools.pop(msg.xid).close()
        elif spool is not None:
            spool.abort(msg.subxid)

    def commit(self, xid: int) -> Spool | None:
        """The spool of a transaction that committed, to replay and close (None: it sent
        nothing this session spooled)."""
        self.seen.discard(xid)
        return self.spools.pop(xid, None)

    def close(self) -> None:
        for spool in self.spools.values():
            spool.close()
        self.spools.clear()
