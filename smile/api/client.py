"""A minimal JSON client for SMILE's REST API (standard library only), for the CLI and tests.

Must not: know the routes' meaning.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


def call(base_url: str, method: str, path: str, body: Any = None,
         timeout: float = 120, token: str | None = None) -> tuple[int, Any]:
    """(HTTP status, decoded JSON or text). Raises OSError when the API cannot be reached."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base_url.rstrip("/") + path, data=data, method=method,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            kind = resp.headers.get("Content-Type", "")
            return resp.status, json.loads(raw) if "json" in kind else raw.decode()
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw or b"null")
        except ValueError:
            return err.code, raw.decode(errors="replace")


@dataclass(frozen=True)
class Client:
    """The API at `url`, called with `token`."""

    url: str
    token: str | None = None

    def call(self, method: str, path: str, body: Any = None,
             timeout: float = 120) -> tuple[int, Any]:
        return call(self.url, method, path, body, timeout, self.token)
