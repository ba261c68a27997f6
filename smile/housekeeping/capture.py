"""Housekeeping of what capture produces, run beside each capturer: retention of ΔR (rows
every reader is past are deleted, `operators.retention`) and the advance of each shadow copy R̂
to its ΔR's watermark (`operators.delta_to_rel`).

Each job runs on a thread and a connection of its own, every `retention_s` / `shadow_s`: they
wait for locks (a join holds R̂ still, a withdrawal drops a table), and the loop that reads the
stream must never wait with them — a capturer that stops reading lags every sharing on the
machine and, after `wal_sender_timeout`, loses its stream. `run_beside` is how a capture
process composes the two: `smile capture run`, the benchmarks and the tests' capturers.

Must not: read the replication stream or write ΔR (the capturer does), or decide who reads a
delta (install registers readers).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from smile.db import every
from smile.delta_capture.registry import SCHEMA, load_errors, load_relations
from smile.errors import SmileError
from smile.operators import retention, vertex_ts
from smile.operators.delta_to_rel import delta_to_rel

if TYPE_CHECKING:
    from smile.delta_capture.capturer import Capturer

log = logging.getLogger("smile.capture")

SHADOW_LOCK_WAIT = "200ms"
"""How long advancing a shadow waits for it: a join holding R̂ still goes first, and the shadow
is advanced in a later round (a waiting advance would hold every later join behind it)."""


@dataclass(frozen=True)
class Housekeeping:
    retention_s: float = 5.0
    """How often ΔR rows every reader is past are deleted (0: never)."""
    shadow_s: float = 10.0
    """How often shadow copies are advanced to their watermark (0: never, leave it to agents)."""


def prune_deltas(conn: psycopg.Connection[Any]) -> None:
    """Delete the ΔR rows every reader of each streaming relation is past."""
    retention.prune_due(conn, {rel.delta_vertex: (SCHEMA, rel.delta_table)
                               for rel in load_relations(conn).values()
                               if rel.state == "streaming"})


def advance_shadows(conn: psycopg.Connection[Any]) -> None:
    """Advance the shadow copy R̂ of each healthy streaming relation to its ΔR's watermark."""
    errors = load_errors(conn)
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (SHADOW_LOCK_WAIT,))
    for rel in load_relations(conn).values():
        if rel.state != "streaming" or rel.relid in errors:
            continue
        try:
            delta_to_rel(
                conn, delta=(SCHEMA, rel.delta_table), rel=(SCHEMA, rel.shadow_table),
                columns=rel.column_names, rel_vertex=rel.shadow_vertex,
                delta_vertex=rel.delta_vertex, to_ts=vertex_ts.read(conn, rel.delta_vertex),
            )
        except psycopg.errors.LockNotAvailable:
            continue  # in use by a join: next round
        except (psycopg.Error, SmileError) as exc:
            log.warning("advancing the shadow of %s failed: %s", rel.qualified, exc)


def start(dsn: str, slot: str, stop: threading.Event,
          options: Housekeeping | None = None) -> list[threading.Thread]:
    """The jobs of `options` with a period above 0, each on a daemon thread until `stop`."""
    options = options or Housekeeping()
    jobs = [(options.retention_s, prune_deltas, "retention"),
            (options.shadow_s, advance_shadows, "shadows")]
    keepers = [threading.Thread(
        target=every, args=(dsn, period, stop, body),
        kwargs={"what": f"capture {what} of {slot}",
                "application_name": f"smile-capture-{what}"},
        daemon=True, name=f"capture-{what}") for period, body, what in jobs if period > 0]
    for keeper in keepers:
        keeper.start()
    return keepers


def run_beside(capturer: Capturer, stop: threading.Event,
               options: Housekeeping | None = None) -> None:
    """`capturer.run(stop)` with its machine's housekeeping beside it, until `stop`."""
    keepers = start(capturer.dsn, capturer.slot, stop, options)
    capturer.run(stop)
    for keeper in keepers:
        keeper.join(timeout=5)
