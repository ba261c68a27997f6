"""The delta sink: a thread that owns the target connection and writes what the capturer hands
it — COPY batches into delta tables, error marks, and commits with progress and watermarks
(`source.py`'s statements) — in the order it was handed, so the capturer can decode the next
rows while PostgreSQL stores the last ones.

Each `commit` ends a target transaction holding whole source transactions, their progress and
the new watermarks; once it is durable (synchronous_commit on) its progress appears in `done`,
and only then does the capturer confirm it to the slot. A failure stops the sink; the capturer
sees it in `failure`, drops the open transaction and restarts from the durable progress.

Must not: read the replication stream, decode, or spell SQL of its own.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import threading
from typing import TYPE_CHECKING, Any

import psycopg

from smile.db import SYNC_COMMIT
from smile.delta_capture import source

if TYPE_CHECKING:
    from collections.abc import Callable

    from smile.delta_capture.progress import Progress

_STOP = object()


class DeltaSink:
    def __init__(self, dsn: str, slot: str, depth: int = 8) -> None:
        self.slot = slot
        # synchronous commits: the slot is told only about what is on disk
        self.conn = psycopg.connect(dsn, connect_timeout=10, options=SYNC_COMMIT)
        self.conn.execute("SET application_name = 'smile-capture'")
        self.conn.commit()
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.done: collections.deque[Progress] = collections.deque()
        """Progress made durable, oldest first (appended here, taken by the capturer: a deque's
        ends are safe across threads, and an empty one costs the capturer nothing to look at
        between messages)."""
        self.failure: BaseException | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._work, name=f"sink-{slot}", daemon=True)
        self._thread.start()

    # -- called by the capturer ----------------------------------------------------------------
    @property
    def wake_fd(self) -> int:
        """Readable once a commit is durable (in `done`): the capturer waits on it beside the
        stream, so the slot hears of each commit at once, not at the next message."""
        return self._wake_r

    def rows(self, table: str, columns: tuple[str, ...], lines: list[bytes]) -> None:
        self._put(("rows", table, columns, lines))

    def do(self, fn: Callable[[psycopg.Connection[Any]], object]) -> None:
        """Run `fn(conn)` in order with what was handed before, without waiting for it."""
        self._put(("do", fn))

    def commit(
        self, progress: Progress, watermark_vertices: list[str], counts: dict[int, int]
    ) -> None:
        self._put(("commit", progress, watermark_vertices, dict(counts)))

    def call(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run `fn(conn)` in order with what was handed before, and wait for its result."""
        box: list[Any] = []
        ready = threading.Event()
        self._put(("call", fn, box, ready))
        while not ready.wait(0.1):
            self._raise_if_failed()
        self._raise_if_failed()
        return box[0]

    def close(self) -> None:
        """Stop the thread and abandon an uncommitted transaction."""
        with contextlib.suppress(queue.Full):
            self._q.put_nowait(_STOP)
        self._thread.join(timeout=2)
        with contextlib.suppress(psycopg.Error):
            self.conn.close()
        if not self._thread.is_alive():  # else it may still write its wake byte
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _put(self, item: Any) -> None:
        while True:
            self._raise_if_failed()
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    # -- the thread ----------------------------------------------------------------------------
    def _work(self) -> None:
        conn = self.conn
        try:
            while True:
                item = self._q.get()
                if item is _STOP:
                    return
                kind = item[0]
                if kind == "rows":
                    source.copy_rows(conn, *item[1:])
                elif kind == "do":
                    item[1](conn)
                elif kind == "call":
                    _, fn, box, ready = item
                    box.append(fn(conn))
                    ready.set()
                elif kind == "commit":
                    _, progress, vertices, counts = item
                    source.record_commit(conn, self.slot, progress, vertices, counts)
                    conn.commit()
                    self.done.append(progress)
                    with contextlib.suppress(BlockingIOError):  # full: a wake is pending
                        os.write(self._wake_w, b"\0")
        except BaseException as exc:  # handed to the capturer, which restarts
            self.failure = exc
