"""What a streamed transaction sent before its commit: its messages in arrival order, each
tagged with the (sub)transaction that made it, in memory up to a few MB and in a temporary file
beyond, so a big published transaction streams through in bounded memory.

At StreamCommit the capturer replays them as if the transaction had come unstreamed, minus the
subtransactions a StreamAbort rolled back; at a StreamAbort of the whole transaction, or when the
session ends (a restarted walsender streams it again from its first block), they are dropped.

Must not: decode messages or know SMILE's tables.
"""

from __future__ import annotations

import struct
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

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
