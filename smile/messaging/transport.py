"""Messages over ActiveMQ with STOMP (stomp.py): the only module that speaks STOMP.

Each machine's agent listens on `/queue/smile.agent.<machine>`; the executor on
`/queue/smile.executor`; heartbeats go to `/topic/smile.heartbeat`. Received frames are decoded
(`protocol.decode`) and handed to the callback; malformed ones are dropped with a warning.

Must not: interpret messages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import stomp

from smile.agent.protocol import Message, decode, encode
from smile.errors import AgentError

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("smile.transport")

EXECUTOR = "/queue/smile.executor"
HEARTBEATS = "/topic/smile.heartbeat"


def agent_queue(machine: str) -> str:
    return f"/queue/smile.agent.{machine}"


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, handlers: dict[str, Callable[[Message], None]]) -> None:
        self.handlers = handlers

    def on_message(self, frame: Any) -> None:
        handler = self.handlers.get(frame.headers.get("subscription", ""))
        if handler is None:
            return
        try:
            handler(decode(frame.body))
        except AgentError as exc:
            log.warning("dropped a message: %s", exc)


class Transport:
    def __init__(self, url: str, client: str) -> None:
        if not url.startswith("stomp://"):
            raise AgentError(f"broker URL must be stomp://host:port, got {url!r}")
        host, _, port = url.removeprefix("stomp://").partition(":")
        self._handlers: dict[str, Callable[[Message], None]] = {}
        self._conn = stomp.Connection12([(host, int(port or 61613))], heartbeats=(0, 0))
        self._conn.set_listener(client, _Listener(self._handlers))
        self._next = 0
        try:
            self._conn.connect(wait=True)
        except stomp.exception.StompException as exc:
            raise AgentError(f"cannot reach the broker at {url}: {exc}") from exc

    def subscribe(self, destination: str, handler: Callable[[Message], None]) -> None:
        self._next += 1
        sub = str(self._next)
        self._handlers[sub] = handler
        self._conn.subscribe(destination, id=sub, ack="auto")

    def send(self, destination: str, message: Message) -> None:
        self._conn.send(destination, body=encode(message),
                        headers={"content-type": "application/json"})

    def close(self) -> None:
        if self._conn.is_connected():
            self._conn.disconnect()
