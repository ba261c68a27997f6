"""Which machine holds which base relation.

A placement file is JSON mapping each of the nine relations to a machine name, e.g.
`{"users": "m1", "tweets": "m2", ...}`. Without one, relations go round-robin over the machines
in the order of `RELATIONS`.

Must not: touch a database.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from smile.dataset.relations import RELATIONS
from smile.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from smile.topology import Topology


def default_placement(machines: list[str]) -> Mapping[str, str]:
    """Round-robin: relation i goes to machine i mod N.

    >>> dict(default_placement(["m1", "m2"]))["tweets"]
    'm2'
    """
    if not machines:
        raise ConfigError("no machines to place relations on")
    return MappingProxyType({r: machines[i % len(machines)] for i, r in enumerate(RELATIONS)})


def parse_placement(doc: object, machines: list[str]) -> Mapping[str, str]:
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in doc.items()
    ):
        raise ConfigError('a placement is a JSON object {"relation": "machine", ...}')
    unknown = sorted(set(doc) - set(RELATIONS))
    if unknown:
        raise ConfigError(f"unknown relations {unknown}; the relations are {list(RELATIONS)}")
    missing = [r for r in RELATIONS if r not in doc]
    if missing:
        raise ConfigError(f"the placement does not place {missing}")
    bad = sorted({m for m in doc.values() if m not in machines})
    if bad:
        raise ConfigError(
            f"the placement names unknown machines {bad}; the machines are {machines}"
        )
    return MappingProxyType({r: doc[r] for r in RELATIONS})


def read_placement(path: str | None, topology: Topology) -> Mapping[str, str]:
    names = [m.name for m in topology.machines]
    if path is None:
        return default_placement(names)
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read placement file {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"placement file {path} is not valid JSON: {exc}") from exc
    return parse_placement(doc, names)
