"""The messages between the executor and the agents (NOTES §7), as frozen values with their
JSON form. Commands carry a stable id, so a duplicated or retried one is recognised; agents
answer every PUSH with PUSH_DONE or AGENT_ERROR carrying the same id.

Must not: know how messages travel (that is `transport.py`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from smile.errors import AgentError


@dataclass(frozen=True)
class Heartbeat:
    machine: str
    sent_at: datetime
    vertex_ts: dict[str, datetime] = field(default_factory=dict)
    """TS of every vertex on the machine."""
    load: float = 0.0
    """The machine's recent work: operator seconds per second."""
    type: Literal["heartbeat"] = "heartbeat"


@dataclass(frozen=True)
class Push:
    id: str
    plan: str
    """The installed plan (sharing) the vertex belongs to."""
    vertex: str
    """The vertex's label, e.g. `ΔS/a@m2`."""
    to_ts: datetime
    reply_to: str = "/queue/smile.executor"
    """Where the PUSH_DONE or AGENT_ERROR goes: each executor listens on a queue of its own, so
    two executors (or a benchmark beside a running one) never take each other's answers."""
    type: Literal["push"] = "push"


@dataclass(frozen=True)
class PushDone:
    id: str
    vertex: str
    ts: datetime
    """The vertex's TS after the push (≥ the asked-for one)."""
    elapsed_s: float
    rows_in: int
    rows_out: int
    bytes_moved: int = 0
    type: Literal["push_done"] = "push_done"


@dataclass(frozen=True)
class AgentFailure:
    id: str
    machine: str
    reason: str
    vertex: str | None = None
    type: Literal["agent_error"] = "agent_error"


Message = Heartbeat | Push | PushDone | AgentFailure
_TYPES: dict[str, type[Any]] = {"heartbeat": Heartbeat, "push": Push, "push_done": PushDone,
                                "agent_error": AgentFailure}
_TIMES = {"sent_at", "to_ts", "ts"}


def encode(message: Message) -> str:
    """JSON text; timestamps as ISO 8601 with their offset.

    >>> from datetime import UTC
    >>> json.loads(encode(Push("p1", "S", "ΔS@m1", datetime(2026, 1, 1, tzinfo=UTC))))["to_ts"]
    '2026-01-01T00:00:00+00:00'
    """
    def conv(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: conv(v) for k, v in value.items()}
        return value

    return json.dumps({k: conv(v) for k, v in asdict(message).items()}, ensure_ascii=False)


def decode(text: str | bytes) -> Message:
    """The message in `text`; anything malformed raises AgentError saying what."""
    try:
        doc = json.loads(text)
        cls = _TYPES[doc.pop("type")]
        for key in _TIMES & doc.keys():
            doc[key] = datetime.fromisoformat(doc[key])
        if "vertex_ts" in doc:
            doc["vertex_ts"] = {k: datetime.fromisoformat(v) for k, v in doc["vertex_ts"].items()}
        message: Message = cls(**doc)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AgentError(f"malformed message: {exc!r}") from exc
    return message
