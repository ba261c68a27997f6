"""The executor's inbox: the answers agents send to its commands (PUSH_DONE, AGENT_ERROR,
DONE), each kept under its command's id until the waiter that sent the command claims it.

Commands carry stable ids (docs/design/semantics.md §7) and an agent may answer twice (a
redelivered command) or after its waiter gave up (a timed-out push): such answers are never
claimed, so what nobody claims within `ANSWER_KEEP_S` of its coming goes.

Must not: send anything, or decide what an answer means (the dataflow and the deployer do).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

    from smile.messaging.protocol import AgentFailure, Done, Message, PushDone

ANSWER_KEEP_S = 600.0
"""How long an answer nobody has claimed is kept: one that came after its push timed out, or
twice (an agent that redelivered it), is never claimed."""


class Inbox:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._got: dict[str, Message] = {}
        self._received: dict[str, float] = {}
        """When each kept answer came (monotonic), oldest first."""

    def put(self, m: PushDone | AgentFailure | Done, now: float | None = None) -> None:
        """Keep answer `m` for its waiter and wake the waiters; let go of those no one claimed
        within `ANSWER_KEEP_S` of their coming (a waiter claims its own within a tick)."""
        at = time.monotonic() if now is None else now
        with self._cond:
            self._received.pop(m.id, None)  # one that came twice goes last: oldest first
            self._got[m.id], self._received[m.id] = m, at
            oldest = next(iter(self._received.values()))
            if oldest < at - ANSWER_KEEP_S:
                for gone in [i for i, t in self._received.items() if t < at - ANSWER_KEEP_S]:
                    self._got.pop(gone, None)
                    del self._received[gone]
            self._cond.notify_all()

    def take(self, mid: str) -> tuple[Message, float] | None:
        """The answer to `mid` and when it came, if it has; taken once."""
        with self._cond:
            return self._take(mid)

    def _take(self, mid: str) -> tuple[Message, float] | None:
        if mid not in self._got:
            return None
        return self._got.pop(mid), self._received.pop(mid)

    def held(self) -> dict[str, float]:
        """The ids of the answers kept now, and when each came (oldest first)."""
        with self._cond:
            return dict(self._received)

    def wait_any(self, ids: Collection[str], timeout_s: float,
                 stop: threading.Event) -> dict[str, tuple[Message, float]]:
        """Wait up to `timeout_s` until an answer to one of `ids` is here (or `stop` is set),
        then take every answer to `ids` that is here, with when it came."""
        with self._cond:
            self._cond.wait_for(lambda: any(i in self._got for i in ids) or stop.is_set(),
                                timeout_s)
            return {i: a for i in list(ids) if (a := self._take(i)) is not None}

    def wait_all(self, ids: Collection[str], timeout_s: float,
                 stop: threading.Event) -> dict[str, Message | None]:
        """Wait up to `timeout_s` for an answer to each of `ids` (or until `stop`); take them:
        None for each that did not come."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.wait_for(lambda: all(i in self._got for i in ids) or stop.is_set()
                                or time.monotonic() > deadline, timeout_s)
            return {i: a[0] if (a := self._take(i)) else None for i in ids}
