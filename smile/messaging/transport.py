"""Messages over ActiveMQ with STOMP (stomp.py): the only module that speaks STOMP.

Each machine's agent listens on `/queue/smile.agent.<machine>`; the executor on
`/queue/smile.executor`; heartbeats go to `/topic/smile.heartbeat`. Received frames are decoded
(`protocol.decode`) and handed to the callback; malformed ones are dropped with a warning.

The connection outlives the broker: STOMP heart-beating notices a hung peer within
`HEARTBEAT_MS` × `RECEIVE_SCALE` (a closed connection at once), and a lost connection is
re-established in the background with backoff (`RECONNECT_S`), every subscription renewed
under its old id. A `send` while the broker is
away waits for it up to `SEND_WAIT_S`, then fails with `AgentError` (the caller's retry takes
over). A subscription made with `acked=True` is `client-individual`: the broker hands out at
most `prefetch` unacknowledged messages, and each is acknowledged by the callback's `ack`
once its work is done — a message whose receiver dies first goes to the next subscriber (the
restarted agent). Acknowledging a message of a connection since lost does nothing: the broker
redelivers it, and commands are idempotent.

Must not: interpret messages.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import stomp

from smile.errors import AgentError
from smile.messaging.protocol import Message, decode, encode

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("smile.transport")

EXECUTOR = "/queue/smile.executor"
HEARTBEATS = "/topic/smile.heartbeat"
HEARTBEAT_MS = 2000
"""STOMP heart-beating both ways, every 2 s."""
RECEIVE_SCALE = 5.0
"""A broker silent for this many heart-beat periods (10 s) is taken for lost; a closed
connection is noticed at once. stomp.py's default, 1.5 (3 s), took the broker for lost every
~30 s on this 2-core box at 1000 tweets/s, where its heart-beats come a second late when the
box is saturated: each agent reconnected, the commands it held were handed out again, pushes
waited out their 30-s timeout, and every sharing went over its SLA at once (218 violations in
a 3-minute round)."""
RECONNECT_S = (0.2, 5.0)
"""First and longest wait between attempts to reach a lost broker (doubling)."""
SEND_WAIT_S = 30.0
"""How long a `send` waits for a lost broker to come back before it fails."""



def agent_queue(machine: str) -> str:
    return f"/queue/smile.agent.{machine}"


@dataclass(frozen=True)
class _Subscription:
    destination: str
    handler: Callable[..., None]
    acked: bool
    prefetch: int


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    """One per connection: what a connection since replaced says is ignored (its messages
    are redelivered on the new one; its end was already handled)."""

    def __init__(self, transport: Transport, epoch: int) -> None:
        self.transport = transport
        self.epoch = epoch

    def on_message(self, frame: Any) -> None:
        if self.epoch != self.transport._epoch:
            return
        sub_id = frame.headers.get("subscription", "")
        sub = self.transport._subs.get(sub_id)
        if sub is None:
            return
        try:
            message = decode(frame.body)
        except AgentError as exc:
            log.warning("dropped a message: %s", exc)
            if sub.acked:
                self.transport._ack(frame.headers.get("ack", ""), self.transport._epoch)
            return
        if sub.acked:
            ack_id = frame.headers.get("ack", "")
            sub.handler(message, lambda: self.transport._ack(ack_id, self.epoch))
        else:
            sub.handler(message)

    def on_disconnected(self) -> None:
        if self.epoch == self.transport._epoch:
            self.transport._lost()

    def on_heartbeat_timeout(self) -> None:
        log.warning("the broker missed its heartbeats")


class Transport:
    def __init__(self, url: str, client: str) -> None:
        if not url.startswith("stomp://"):
            raise AgentError(f"broker URL must be stomp://host:port, got {url!r}")
        host, _, port = url.removeprefix("stomp://").partition(":")
        self.url = url
        self._address = (host, int(port or 61613))
        self._client = client
        self._subs: dict[str, _Subscription] = {}
        self._next = 0
        self._epoch = 0
        """Counts connections: what an earlier one says or acknowledges is dropped."""
        self._closing = False
        self._reconnecting = False
        self._up = threading.Event()
        self._lock = threading.Lock()
        self._conn: Any = None
        self.reconnects = 0
        """Connections re-established after the broker was lost."""
        try:
            self._connect()
        except stomp.exception.StompException as exc:
            raise AgentError(f"cannot reach the broker at {url}: {exc}") from exc

    def _connect(self) -> None:
        """A fresh connection (a stomp.py connection is not reused once lost), its
        subscriptions renewed."""
        with self._lock:
            epoch = self._epoch + 1
            conn = stomp.Connection12([self._address], heartbeats=(HEARTBEAT_MS, HEARTBEAT_MS),
                                      heart_beat_receive_scale=RECEIVE_SCALE,
                                      reconnect_attempts_max=1)
            conn.set_listener(self._client, _Listener(self, epoch))
            conn.connect(wait=True)
            old, self._conn, self._epoch = self._conn, conn, epoch
            for sub_id, sub in self._subs.items():
                self._subscribe(sub_id, sub)
        if old is not None:
            with contextlib.suppress(Exception):
                old.disconnect()
        self._up.set()

    def _subscribe(self, sub_id: str, sub: _Subscription) -> None:
        if sub.acked:
            self._conn.subscribe(sub.destination, id=sub_id, ack="client-individual",
                                 headers={"activemq.prefetchSize": str(sub.prefetch)})
        else:
            self._conn.subscribe(sub.destination, id=sub_id, ack="auto")

    def _lost(self) -> None:
        self._up.clear()
        with self._lock:
            if self._closing or self._reconnecting:
                return  # one reconnection at a time
            self._reconnecting = True
        log.warning("lost the broker at %s; reconnecting", self.url)
        threading.Thread(target=self._reconnect, daemon=True, name="stomp-reconnect").start()

    def _reconnect(self) -> None:
        wait = RECONNECT_S[0]
        try:
            while not self._closing:
                try:
                    self._connect()
                except Exception as exc:  # the broker is still away: try again later
                    log.info("broker at %s still unreachable: %s", self.url, exc)
                    time.sleep(wait)
                    wait = min(wait * 2, RECONNECT_S[1])
                    continue
                self.reconnects += 1
                log.warning("reconnected to the broker at %s", self.url)
                if self.closing:  # closed meanwhile: nobody will read or acknowledge
                    self.close()
                return
        finally:
            with self._lock:
                self._reconnecting = False

    def _ack(self, ack_id: str, epoch: int) -> None:
        if not ack_id or epoch != self._epoch or not self._up.is_set():
            return  # that connection is gone: the broker redelivers the message
        try:
            self._conn.ack(ack_id)
        except Exception as exc:
            log.info("could not acknowledge %s: %s", ack_id, exc)

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    def subscribe(self, destination: str, handler: Callable[..., None], *,
                  acked: bool = False, prefetch: int = 100) -> None:
        """`handler(message)`, or with `acked` `handler(message, ack)`: call `ack()` when the
        message's work is done."""
        with self._lock:
            self._next += 1
            sub_id = str(self._next)
            sub = _Subscription(destination, handler, acked, prefetch)
            self._subs[sub_id] = sub
            if self._up.is_set():
                self._subscribe(sub_id, sub)

    def send(self, destination: str, message: Message, wait_s: float = SEND_WAIT_S) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            if not self._up.wait(max(0.0, deadline - time.monotonic())):
                raise AgentError(f"the broker at {self.url} is unreachable")
            try:
                self._conn.send(destination, body=encode(message),
                                headers={"content-type": "application/json"})
                return
            except (stomp.exception.NotConnectedException, OSError, AttributeError):
                self._up.clear()  # the receiver notices too and reconnects
                if time.monotonic() >= deadline:
                    raise AgentError(f"the broker at {self.url} is unreachable") from None
                time.sleep(0.05)

    def close(self) -> None:
        self._closing = True
        conn = self._conn
        if conn is not None and conn.is_connected():
            with contextlib.suppress(Exception):
                conn.disconnect()
