"""`smile machine add|remove|list`: attach an app's database to the running SMILE, detach it,
list the machines — through the REST API of `smile up` (the running executor must learn of
the machine), as the admin whose token is in `<state_dir>/admin.token`.

Must not: check, prepare or clear a database itself (the API's machine service does).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from smile.cli.arg_types import not_negative, positive

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    machine = sub.add_parser("machine", help="attach and detach apps' own databases")
    verbs = machine.add_subparsers(dest="verb", required=True, metavar="VERB")
    add = verbs.add_parser("add", help="attach a database: checked, prepared, supervised")
    add.add_argument("name", help="lower-case letters, digits and _, starting with a letter")
    add.add_argument("--dsn", required=True, help="libpq DSN of a role with the grants of "
                     "docs/configuration.md")
    add.add_argument("--cores", type=positive, help="its cores (default 2)")
    add.add_argument("--price", type=not_negative, help="$ per hour (default 0.34)")
    add.set_defaults(run=_add)
    remove = verbs.add_parser("remove", help="detach a machine; the app's data stays")
    remove.add_argument("name")
    remove.add_argument("--withdraw", action="store_true",
                        help="withdraw the sharings on it first")
    remove.set_defaults(run=_remove)
    show = verbs.add_parser("list", help="every machine: origin, cores, price, health")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=_list)


def _call(settings: Settings, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    from smile.api import client
    from smile.errors import ConfigError
    from smile.executor.consumers import admin_token

    url = f"http://{settings.api_host}:{settings.api_port}"
    try:
        return client.call(url, method, path, body, timeout=300,
                           token=admin_token(settings.state_dir))
    except OSError as exc:
        raise ConfigError(f"the API at {url} does not answer ({exc}): `smile up` first") \
            from exc


def _failed(status: int, doc: Any) -> int:
    from rich.console import Console

    err = Console(stderr=True)
    if isinstance(doc, dict) and doc.get("problems"):
        err.print(f"[bold red]error:[/] the database misses {len(doc['problems'])} "
                  "prerequisite(s):", highlight=False)
        for p in doc["problems"]:
            then = " (then restart the server)" if p["restart"] else ""
            err.print(f"  {p['item']}: {p['found']} → {p['fix']}{then}", highlight=False)
    else:
        detail = doc.get("detail") if isinstance(doc, dict) else doc
        err.print(f"[bold red]error:[/] HTTP {status}: {detail}", highlight=False)
    return 2


def _add(args: argparse.Namespace, settings: Settings) -> int:
    body = {"name": args.name, "dsn": args.dsn, "cores": args.cores,
            "price_per_hour": args.price}
    status, doc = _call(settings, "POST", "/machines", body)
    if status != 201:
        return _failed(status, doc)
    print(f"{args.name} attached ({doc['cores']:g} cores, ${doc['price_per_hour']:g}/h); "
          "publish its tables with POST /relations or `smile capture publish`")
    return 0


def _remove(args: argparse.Namespace, settings: Settings) -> int:
    query = "?withdraw=true" if args.withdraw else ""
    status, doc = _call(settings, "DELETE", f"/machines/{args.name}{query}")
    if status == 200:  # it could not be reached
        print(f"{args.name} detached, unreachable: {doc['unreachable']}\n{doc['left']}")
        return 0
    if status != 204:
        return _failed(status, doc)
    print(f"{args.name} detached")
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    status, doc = _call(settings, "GET", "/machines?edges=0")
    if status != 200:
        return _failed(status, doc)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    for m in doc:
        print(f"{m['name']:<12} {m['origin']:<9} {m['cores'] or 0:>6.2f} cores "
              f"${m['price_per_hour'] or 0:.2f}/h  {'healthy' if m['healthy'] else 'unhealthy'}")
    return 0
