"""Breach alerts in SQL: `NOTIFY smile_sla` on the machine holding a sharing's MV, so that a
consumer's session that `LISTEN smile_sla`s there (with its own DSN) hears that its MV is about
to pass its SLA, and when the risk has passed. The payload is the alert as JSON
(`executor.alerts`).

Must not: decide when to alert (the executor's `alerts.py` does); it only sends.
"""

from __future__ import annotations

from smile.db import connect

CHANNEL = "smile_sla"


def notify(dsn: str, payload: str) -> None:
    """`pg_notify(CHANNEL, payload)` on the machine of `dsn` (SMILE's own DSN of it)."""
    with connect(dsn, autocommit=True, what="the MV's machine",
                 application_name="smile-alerts") as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
