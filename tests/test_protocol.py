"""Agent protocol values, their JSON, and their trip through the real broker."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from smile.errors import AgentError
from smile.messaging.protocol import (
    AgentFailure,
    Done,
    Heartbeat,
    Install,
    Message,
    Push,
    PushDone,
    Withdraw,
    decode,
    encode,
)

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

T = datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)
MESSAGES: list[Message] = [
    Heartbeat("m1", T, {"Δa~1f2e3d@m1": T, "delta:public.users": T}, 0.25, ("S1/4/0",)),
    Push("push-1", 7, "Δa~1f2e3d@m1", T, sharing="S"),
    Push("push-3", 7, "Δa~1f2e3d@m1", T, sharing="S", timeout_s=20.0, deadline=T),
    PushDone("push-1", "Δa~1f2e3d@m1", T, 0.012, 10, 20, 640),
    PushDone("push-2", "Δa~1f2e3d@m1", T, 0.012, 10, 20, 640, 0.004),
    PushDone("push-4", "Δa~1f2e3d@m1", T, 0.012, 10, 20, 640, 0.004,
             T - timedelta(seconds=4.5), T - timedelta(seconds=1)),
    AgentFailure("push-2", "m2", "vertex unknown", "b~1f2e3d@m2"),
    AgentFailure("push-5", "m2", "cannot skip: lease:7 reads it", "Δb~1f2e3d@m2", deferred=True),
    AgentFailure("push-6", "m2", "Δb~1f2e3d@m2 is stale", "Δb~1f2e3d@m2", stale=True),
    Install("install-1", 7, "lease"),
    Install("install-2", 7, "fill", T, ("a~1f2e3d@m1", "Δa~1f2e3d@m1"), ("Δb@m2",), ("S",)),
    Withdraw("withdraw-1", 8, 7, ("a~1f2e3d@m1",), ("S",), 7),
    Done("install-2", "m1", 0.5, "2 vertices"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.type)
def test_round_trip(message: Message) -> None:
    assert decode(encode(message)) == message


@pytest.mark.parametrize("text", ["", "{}", '{"type": "nope"}', '{"type": "push", "id": 1}',
                                  '{"type": "push", "id": "x", "version": 1, "vertex": "v", '
                                  '"to_ts": "yesterday"}'])
def test_malformed_messages_are_refused(text: str) -> None:
    with pytest.raises(AgentError, match="malformed"):
        decode(text)


def test_an_agent_takes_the_pushes_it_holds_earliest_deadline_first() -> None:
    """Pushes queued together run by their sharings' deadlines, those without one last (by
    arrival); an Install goes to the plan worker's inbox whatever its arrival."""
    from datetime import timedelta

    from smile.agent.process import Agent
    from smile.topology import MachineEndpoint, Topology

    agent = Agent("m1", Topology((MachineEndpoint("m1", "dbname=x"),), "dbname=c",
                                 "stomp://127.0.0.1:1", "external"))
    acked: list[str] = []
    arrivals: list[Message] = [
        Push("late", 1, "v", T, deadline=T + timedelta(seconds=50)), Push("none-1", 1, "v", T),
        Install("i", 1, "lease"), Push("soon", 1, "v", T, deadline=T + timedelta(seconds=5)),
        Push("none-2", 1, "v", T), Push("sooner", 1, "v", T, deadline=T + timedelta(seconds=1))]
    for m in arrivals:
        agent._receive(m, lambda: acked.append("?"))
    order = [agent.inbox.get_nowait()[3].id for _ in range(agent.inbox.qsize())]
    assert order == ["sooner", "soon", "late", "none-1", "none-2"]
    assert agent.plan_inbox.get_nowait()[3].id == "i" and acked == []


@pytest.mark.services
def test_messages_cross_the_broker(cloud: CloudHandle) -> None:
    from smile.messaging.transport import Transport, agent_queue

    got: list[Message] = []
    done = threading.Event()

    def handler(message: Message) -> None:
        got.append(message)
        if len(got) == len(MESSAGES):
            done.set()

    receiver = Transport(cloud.topology.broker_url, "receiver")
    sender = Transport(cloud.topology.broker_url, "sender")
    try:
        receiver.subscribe(agent_queue("m9"), handler)
        for m in MESSAGES:
            sender.send(agent_queue("m9"), m)
        assert done.wait(10)
        assert got == MESSAGES
    finally:
        sender.close()
        receiver.close()
    with pytest.raises(AgentError, match="stomp://"):
        Transport("tcp://x:1", "bad")
