"""The executor's mirror of the machines: every vertex's TS as the agents last reported it
(heartbeats, every second and after each push; a PUSH_DONE's TS at once), when each machine
last beat, which pushes each agent holds, and which machines have gone quiet.

The machines themselves are the truth (a vertex's TS is stored with its contents,
docs/design/semantics.md §1): this mirror only decides when to push. Reports cross — a
heartbeat read before a push's answer may arrive after it — so the newer news wins.

Must not: read the machines itself (the executor hands it what `deploy.machine_state` read at
start), or decide anything.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

UNREACHABLE_S = 5.0
"""A machine whose agent has not sent a heartbeat for this long (they come every second) is
unreachable: the sharings that need it are not pushed and say so, the others go on."""

Key = tuple[str, str]
"""(machine, the vertex's key in its TS table)."""


@dataclass
class Beat:
    """What a machine's last heartbeat said of it."""

    last_beat: float = 0.0
    """When it came (wall clock, seconds since the epoch)."""
    load: float = 0.0
    """The machine's recent work, operator seconds per second, as its agent measured it."""
    holding: frozenset[str] = frozenset()
    """The PUSH ids its agent held, queued or running."""


class VertexClock:
    def __init__(self, machines: Iterable[str] = (), started_at: float | None = None) -> None:
        self.started_at = time.time() if started_at is None else started_at
        """Until `UNREACHABLE_S` after this, a machine that has not beaten yet is not quiet."""
        self.lock = threading.Lock()
        self.beats: dict[str, Beat] = {m: Beat() for m in machines}
        """Each machine's last heartbeat: those of the topology from the start, so that one
        whose agent never beats is quiet too."""
        self._ts: dict[Key, datetime] = {}
        self._read_at: dict[str, datetime] = {}
        """When each machine's timestamps were read (its clock)."""
        self._learnt_at: dict[str, float] = {}
        """When they reached this executor (its monotonic clock)."""
        self._pushed: dict[Key, tuple[datetime, datetime]] = {}
        """Vertices a PUSH_DONE took further than the last heartbeat said: (their TS, when the
        answer came, on this host's clock), until a heartbeat read after it."""

    def beat(self, machine: str, load: float, now: float | None = None,
             holding: Iterable[str] = ()) -> None:
        """A heartbeat of `machine` came (`now`: wall clock), its agent holding the pushes
        `holding`."""
        with self.lock:
            b = self.beats.setdefault(machine, Beat())
            b.last_beat, b.load = time.time() if now is None else now, load
            b.holding = frozenset(holding)

    def holds(self, machine: str, push_id: str, now: float | None = None) -> bool:
        """Whether `machine`'s agent, not quiet, said in its last heartbeat that it holds the
        push `push_id` (taken, not yet answered)."""
        at = time.time() if now is None else now
        with self.lock:
            b = self.beats.get(machine)
            return b is not None and at - b.last_beat <= UNREACHABLE_S and push_id in b.holding

    def learn(self, machine: str, stamps: dict[str, datetime], read_at: datetime) -> None:
        """A machine's timestamps as read at `read_at`, unless newer ones are known (its
        heartbeats and a reconciling read may cross). They replace what was known: a vertex
        dropped and made again starts over at its new t0."""
        with self.lock:
            if read_at < self._read_at.get(machine, read_at):
                return
            self._read_at[machine] = read_at
            self._learnt_at[machine] = time.monotonic()
            for key in [k for k in self._ts if k[0] == machine and k[1] not in stamps]:
                del self._ts[key]
                self._pushed.pop(key, None)
            for vertex, ts in stamps.items():
                key = (machine, vertex)
                pushed = self._pushed.get(key)
                if pushed is not None and pushed[1] > read_at and pushed[0] > ts:
                    continue  # read before the push's answer came: its TS is older news
                self._pushed.pop(key, None)
                self._ts[key] = ts

    def forget(self, machine: str) -> None:
        """A machine detached: its beats and timestamps go (it is not quiet, it is gone)."""
        with self.lock:
            self.beats.pop(machine, None)
            self._read_at.pop(machine, None)
            self._learnt_at.pop(machine, None)
            for key in [k for k in self._ts if k[0] == machine]:
                del self._ts[key]
                self._pushed.pop(key, None)

    def learn_pushed(self, key: Key, ts: datetime) -> None:
        """A PUSH_DONE's TS of the vertex at `key`, at once: the agent's heartbeat after the
        push comes a moment later, and until then a sharing whose MV was just pushed would
        look as stale as before it and be pushed again at the next tick."""
        with self.lock:
            known = self._ts.get(key)
            if known is not None and ts > known:
                self._ts[key] = ts
                self._pushed[key] = (ts, datetime.now(UTC))

    def pushed_ahead(self) -> set[Key]:
        """The vertices a PUSH_DONE took past what the last heartbeat said, until a heartbeat
        read after it comes."""
        with self.lock:
            return set(self._pushed)

    def get(self, key: Key) -> datetime | None:
        """The TS last known of the vertex at `key`."""
        with self.lock:
            return self._ts.get(key)

    def get_many(self, keys: list[Key]) -> list[datetime | None]:
        """`get` of each of `keys`, read together."""
        with self.lock:
            return [self._ts.get(k) for k in keys]

    def source_clocks(self, machines: set[str]) -> tuple[float, list[datetime]]:
        """For these machines: how long ago (seconds, the oldest) their last timestamps
        reached the executor, and each one's own clock now — when its agent read them, aged
        since: what the auditor holds TS(MV) against, so capture lag counts too."""
        now = time.monotonic()
        with self.lock:
            ages = {m: now - self._learnt_at.get(m, now) for m in machines}
            clocks = [self._read_at[m] + timedelta(seconds=ages[m]) for m in machines
                      if m in self._read_at]
        return max(ages.values(), default=0.0), clocks

    def quiet(self, now: float | None = None) -> dict[str, float]:
        """The machines whose agents have not beaten for `UNREACHABLE_S`, with their last beat
        (wall clock; the start for one that never beat)."""
        at = time.time() if now is None else now
        with self.lock:
            last = {m: max(b.last_beat, self.started_at) for m, b in self.beats.items()}
        return {m: t for m, t in last.items() if at - t > UNREACHABLE_S}

    def unreachable(self, machines: set[str]) -> dict[str, datetime]:
        """Those of `machines` that are quiet, with their last heartbeat."""
        quiet = self.quiet()
        return {m: datetime.fromtimestamp(quiet[m], UTC) for m in sorted(machines & quiet.keys())}
