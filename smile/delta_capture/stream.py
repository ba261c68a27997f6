"""The replication stream of one machine: a psycopg2 `LogicalReplicationConnection` reading the
main slot with pgoutput (protocol 2 with streaming on, transactional messages on).

Streaming matters for what is not captured: without it PostgreSQL spills a transaction bigger
than `logical_decoding_work_mem` to disk and, at its commit, reads it all back before any later
commit reaches us, even when none of its tables is published; a vertex's fill of 557k rows held
a machine's watermark still for 15 s. Streamed, its changes to unpublished tables are dropped as
they are decoded.

It hands out raw payloads, as many at a time as have arrived, and confirms only what the caller
says is durable (`confirm`), so the slot never moves past a change that is not in a delta table.

Must not: decode payloads or write to the database.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from typing import Any

import psycopg2
import psycopg2.extras

from smile.errors import CaptureError


class ReplicationStream:
    def __init__(self, dsn: str, slot: str, publication: str) -> None:
        self.dsn = dsn
        self.slot = slot
        self.publication = publication
        self._conn: Any = None
        self._cur: Any = None

    def open(self, start_lsn: int) -> None:
        try:
            self._conn = psycopg2.connect(
                self.dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
            self._cur = self._conn.cursor()
            self._cur.start_replication(
                slot_name=self.slot,
                decode=False,
                start_lsn=start_lsn,
                status_interval=1,
                options={
                    "proto_version": "2",
                    "streaming": "on",
                    "publication_names": self.publication,
                    "messages": "true",
                },
            )
        except psycopg2.Error as exc:
            self.close()
            raise CaptureError(f"cannot start replication from slot {self.slot}: {exc}",
                               sqlstate=exc.pgcode) from exc

    def read(self, timeout: float, linger: float = 0.0, wake: int | None = None,
             most: int = 2048) -> list[bytes] | None:
        """The messages that have arrived (at most `most`), waiting up to `timeout` seconds for
        the first; [] after that long a quiet, None if the file descriptor `wake` became
        readable first (its bytes are drained). Having waited for the first, it lingers
        `linger` seconds for those behind it: a stream of small transactions then costs a
        few system calls per read instead of a few per message (the walsender sends each
        message as it is decoded)."""
        cur = self._cur
        try:
            msg = cur.read_message()
            if msg is None:
                ready, _, _ = select.select([cur] if wake is None else [cur, wake], [], [],
                                            timeout)
                if not ready:
                    return []
                if cur not in ready and wake is not None:
                    _drain(wake)
                    return None
                if linger > 0:
                    time.sleep(linger)
                msg = cur.read_message()
            out: list[bytes] = []
            while msg is not None:
                out.append(msg.payload)
                if len(out) >= most:
                    break
                msg = cur.read_message()
        except psycopg2.Error as exc:
            raise CaptureError(f"replication stream broke: {exc}", sqlstate=exc.pgcode) from exc
        return out

    def confirm(self, lsn: int) -> None:
        """Tell the server everything before `lsn` is durable on our side."""
        try:
            self._cur.send_feedback(write_lsn=lsn, flush_lsn=lsn)
        except psycopg2.Error as exc:
            raise CaptureError(f"replication feedback failed: {exc}",
                               sqlstate=exc.pgcode) from exc

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
        self._conn = None
        self._cur = None


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass
