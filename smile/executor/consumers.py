"""Consumers: the apps that call the API. Each has a name, a bearer token (random, shown once,
stored as its SHA-256: a 256-bit random token needs no salt or slow hash), an admin flag, and
the password of its PostgreSQL role on the machines that hold its MVs (`deploy.roles`).
`smile serve` makes sure an admin exists and that its token is in `<state_dir>/admin.token`
(mode 0600), which the CLI, `smile demo` and the benchmarks read by default.

Must not: speak HTTP (the API turns a missing or unknown token into 401), or touch machines.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.errors import ConfigError
from smile.executor.store import CatalogStore

if TYPE_CHECKING:
    from pathlib import Path

    from smile.executor.store import ConsumerRow

NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
"""Consumer names: their PostgreSQL role is `smile_c_<name>`, well within 63 bytes."""
ADMIN = "admin"
TOKEN_FILE = "admin.token"


@dataclass(frozen=True)
class Consumer:
    name: str
    admin: bool
    pg_password: str


@dataclass(frozen=True)
class Created:
    consumer: Consumer
    token: str
    """Shown once: only its hash is kept."""


def new_token() -> str:
    """A fresh bearer token: 32 random bytes, URL-safe, never beginning with `-` (a command
    line would take `--token -x…` for an option: one token in 64 did)."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(store: CatalogStore, name: str, admin: bool = False) -> Created:
    """A new consumer with a fresh token; ConfigError if the name is bad or taken."""
    if not NAME.match(name):
        raise ConfigError(f"consumer name {name!r}: lower-case letters, digits and _, starting "
                          "with a letter, at most 40 characters")
    token = new_token()
    consumer = Consumer(name, admin, secrets.token_urlsafe(24))
    if not store.add_consumer(name, hash_token(token), admin, consumer.pg_password):
        raise ConfigError(f"a consumer named {name!r} exists already")
    return Created(consumer, token)


def authenticate(store: CatalogStore, token: str) -> Consumer | None:
    """The consumer whose token this is, or None."""
    if not token:
        return None
    digest = hash_token(token)
    row = store.consumer(token_hash=digest)
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    return _consumer(row)


def lookup(store: CatalogStore, name: str) -> Consumer | None:
    row = store.consumer(name=name)
    return _consumer(row) if row else None


def _consumer(row: ConsumerRow) -> Consumer:
    """The row without its token hash: what the rest of SMILE may hold."""
    return Consumer(row.name, row.admin, row.pg_password)


def ensure_admin(catalog_dsn: str, state_dir: Path) -> Path:
    """`<state_dir>/admin.token` holds a valid admin token afterwards: kept if it already
    authenticates, else the admin is created or given a new token. Returns the file."""
    path = state_dir / TOKEN_FILE
    store = CatalogStore(catalog_dsn)
    try:
        token = path.read_text().strip() if path.exists() else ""
        known = authenticate(store, token)
        if known is not None and known.admin:
            return path
        if lookup(store, ADMIN) is None:
            token = create(store, ADMIN, admin=True).token
        else:
            token = new_token()
            store.set_token(ADMIN, hash_token(token))
    finally:
        store.close()
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def admin_token(state_dir: Path) -> str:
    """The admin token `smile serve` wrote, for the CLI and benchmarks."""
    path = state_dir / TOKEN_FILE
    if not path.exists():
        raise ConfigError(f"{path} does not exist: start SMILE with `smile up` (or `smile "
                          "serve`), or pass a token")
    return path.read_text().strip()
