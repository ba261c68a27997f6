"""`smile consumer create NAME [--admin] [--json]`: a new consumer and its token, printed once
(straight into the catalog; the API's `POST /consumers` does the same for an admin).

Must not: hold consumer logic (`smile.executor.consumers` does).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    consumer = sub.add_parser("consumer", help="consumers of the API (apps) and their tokens")
    verbs = consumer.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = verbs.add_parser("create", help="create a consumer and print its token once")
    create.add_argument("name", help="lower-case letters, digits and _, at most 40 characters")
    create.add_argument("--admin", action="store_true", help="may publish and see everything")
    create.add_argument("--json", action="store_true", help='print {"name", "token", "admin"}')
    create.set_defaults(run=_create)


def _create(args: argparse.Namespace, settings: Settings) -> int:
    from smile.executor import consumers
    from smile.executor.store import CatalogStore
    from smile.topology import resolve_topology

    store = CatalogStore(resolve_topology(settings).catalog_dsn)
    try:
        created = consumers.create(store, args.name, args.admin)
    finally:
        store.close()
    out = {"name": args.name, "token": created.token, "admin": args.admin}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"consumer {args.name}{' (admin)' if args.admin else ''}; its token, shown once:")
        print(created.token)
    return 0
