"""A catalog snapshot of the paper's setting without a cloud: the nine relations at 7 million
tweets (sizes from the update ratios) under a given tweet rate, on N machines.

Used by the optimizer benchmark and tests; `smile catalog snapshot` measures a live cloud
instead. Widths follow `smile/sql/base_relations.sql`; distinct counts are the key columns' domains.

Must not: connect to anything.
"""

from __future__ import annotations

from smile.dataset.relations import RELATIONS, UPDATE_RATIOS
from smile.optimizer.catalog import CatalogSnapshot, ColumnStats, Machine, RelationStats

_COLUMNS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "users": (("uid", "bigint", 8), ("screen_name", "text", 12), ("lang", "text", 3),
              ("followers", "integer", 4), ("created_at", "timestamptz", 8)),
    "tweets": (("tid", "bigint", 8), ("uid", "bigint", 8), ("text", "text", 30),
               ("lang", "text", 3), ("created_at", "timestamptz", 8)),
    "socnet": (("uid", "bigint", 8), ("uid2", "bigint", 8), ("since", "timestamptz", 8)),
    "loc": (("uid", "bigint", 8), ("place", "text", 10), ("lat", "double precision", 8),
            ("lng", "double precision", 8)),
    "curloc": (("tid", "bigint", 8), ("lat", "double precision", 8),
               ("lng", "double precision", 8)),
    "urls": (("tid", "bigint", 8), ("url", "text", 24)),
    "hashtags": (("tid", "bigint", 8), ("tags", "text", 8)),
    "photos": (("tid", "bigint", 8), ("urls", "text", 32)),
    "foursq": (("tid", "bigint", 8), ("rid", "bigint", 8), ("venue", "text", 10)),
}
_SMALL_DOMAINS = {"lang": 7, "place": 12, "rid": 5000, "tags": 2000}


def paper_catalog(machines: int = 6, tweets: float = 7e6, tweet_rate: float = 1000.0,
                  cores: float = 2.0) -> CatalogSnapshot:
    users = UPDATE_RATIOS["users"] * tweets
    rels = []
    for i, name in enumerate(RELATIONS):
        rows = UPDATE_RATIOS[name] * tweets
        cols = []
        for col, typ, width in _COLUMNS[name]:
            if col in _SMALL_DOMAINS:
                nd = float(_SMALL_DOMAINS[col])
            elif col in ("uid", "uid2"):
                nd = min(rows, users)
            elif col == "tid":
                nd = rows
            else:
                nd = rows
            cols.append(ColumnStats(col, typ, nd, 0.0, width))
        rels.append(RelationStats(name, f"m{i % machines + 1}", rows,
                                  UPDATE_RATIOS[name] * tweet_rate, tuple(cols)))
    return CatalogSnapshot(
        machines=tuple(Machine(f"m{i + 1}", cpu_cores=cores) for i in range(machines)),
        relations=tuple(rels),
    )
