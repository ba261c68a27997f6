"""Consumers' webhooks for breach alerts: one URL per sharing, kept in the catalog
(`smile_catalog.webhooks`) with the secret its calls are signed with, and the signed call
itself — retried with backoff.

Each call is a `POST` of the alert's JSON with `X-Smile-Timestamp` (seconds since the epoch)
and `X-Smile-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" under the secret>`: the
consumer recomputes it to know the call is SMILE's and fresh. A call that fails (no answer
within `TIMEOUT_S`, or not a 2xx) is made again after 0.5, 1, 2, 4 s, then given up (logged).

Must not: decide when to call (`alerts.py`), or read the secret back out to anyone.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from smile.executor.store import CatalogStore

log = logging.getLogger("smile.alerts")
DDL = """
CREATE TABLE IF NOT EXISTS smile_catalog.webhooks (
    sharing_id int PRIMARY KEY,
    url        text NOT NULL,
    secret     text NOT NULL,
    set_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""
ATTEMPTS = 5
BACKOFF_S = 0.5
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Hook:
    sharing_id: int
    url: str
    secret: str


class _Ready:
    done: ClassVar[set[str]] = set()
    lock: ClassVar[threading.Lock] = threading.Lock()


def _ensure(store: CatalogStore) -> None:
    with _Ready.lock:  # once per catalog and process: concurrent DDL deadlocks
        if store.dsn not in _Ready.done:
            store.conn.execute(DDL)
            _Ready.done.add(store.dsn)


def set_hook(store: CatalogStore, sharing_id: int, url: str, secret: str) -> None:
    _ensure(store)
    store.conn.execute("INSERT INTO smile_catalog.webhooks (sharing_id, url, secret) VALUES "
                       "(%s, %s, %s) ON CONFLICT (sharing_id) DO UPDATE SET url = excluded.url,"
                       " secret = excluded.secret, set_at = clock_timestamp()",
                       (sharing_id, url, secret))


def hook(store: CatalogStore, sharing_id: int) -> Hook | None:
    _ensure(store)
    row = store.conn.execute("SELECT sharing_id, url, secret FROM smile_catalog.webhooks "
                             "WHERE sharing_id = %s", (sharing_id,)).fetchone()
    return Hook(*row) if row else None


def delete_hook(store: CatalogStore, sharing_id: int) -> bool:
    _ensure(store)
    return store.conn.execute("DELETE FROM smile_catalog.webhooks WHERE sharing_id = %s",
                              (sharing_id,)).rowcount > 0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value.

    >>> sign("k", "1700000000", b"{}")[:15]
    'sha256=c6ef4734'
    """
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def call(h: Hook, body: bytes, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S) -> bool:
    """POST `body` to the hook, signed, until a 2xx or `attempts` tries; whether it got one."""
    for attempt in range(attempts):
        stamp = str(int(time.time()))
        req = urllib.request.Request(h.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "smile-alerts",
            "X-Smile-Timestamp": stamp, "X-Smile-Signature": sign(h.secret, stamp, body)})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # http(s): API checks
                if 200 <= resp.status < 300:
                    return True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.info("webhook %s of sharing %d: %s", h.url, h.sharing_id, exc)
        if attempt + 1 < attempts:
            time.sleep(backoff_s * 2 ** attempt)
    log.warning("webhook %s of sharing %d: given up after %d tries", h.url, h.sharing_id,
                attempts)
    return False
