"""The admin's way onto the cloud `smile up` started, for a benchmark or an experiment: its
client (`admin_client`), answers checked (`expect_ok`), sharings withdrawn (`withdraw_all`),
and the dataset loaded and published with nothing admitted (`prepared_cloud`).

Must not: replace data under an admitted sharing (`prepared_cloud` withdraws them first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from smile.api.client import Client
from smile.dataset.load import load_dataset
from smile.dataset.placement import default_placement
from smile.dataset.relations import RELATIONS
from smile.errors import CloudError
from smile.executor.consumers import admin_token
from smile.workload.driver import locate_relations

if TYPE_CHECKING:
    from smile.settings import Settings
    from smile.topology import Topology


def admin_client(settings: Settings) -> Client:
    """The admin's client of the API `settings` name."""
    return Client(f"http://{settings.api_host}:{settings.api_port}",
                  admin_token(settings.state_dir))


def expect_ok(status: int, body: Any, what: str) -> Any:
    if status >= 400:
        raise CloudError(f"{what} failed ({status}): {body}")
    return body


def withdraw_all(api: Client, suffix: str | None = None) -> None:
    for s in expect_ok(*api.call("GET", "/sharings"), "listing sharings"):
        if s["status"] == "admitted" and (suffix is None or s["name"].endswith(suffix)):
            expect_ok(*api.call("DELETE", f"/sharings/{s['id']}", timeout=900),
                      f"withdrawing {s['name']}")


def prepared_cloud(settings: Settings, topology: Topology, machines: list[str],
                   tweets: int) -> tuple[Client, dict[str, str]]:
    """The admin's client of the running API, with nothing admitted, the dataset loaded on
    `machines` and every relation published: (client, relation → machine)."""
    api = admin_client(settings)
    expect_ok(*api.call("GET", "/healthz"), "the API (is `smile up` running?)")
    withdraw_all(api)  # replacing a relation under an admitted sharing is refused
    load_dataset(settings, topology, default_placement(machines), tweets=tweets, replace=True)
    where = locate_relations(topology)
    for rel in RELATIONS:
        expect_ok(*api.call("POST", "/relations",
                            {"machine": where[rel], "table": f"public.{rel}"}),
                  f"publishing {rel}")
    return api, where
