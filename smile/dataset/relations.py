"""The nine base relations: names, DDL (from `smile/sql/base_relations.sql`) and update ratios.

The update ratio of a relation is the chance that one new tweet adds a row to it (paper §9.1:
users 0.3, socnet 0.25, loc 0.02, curloc 0.1, urls 0.2 after warm-up; the rest are ours).
The same numbers drive the bulk generator and the live workload.

Must not: touch a database or Spark.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType

RELATIONS: tuple[str, ...] = (
    "users", "tweets", "socnet", "loc", "curloc", "urls", "hashtags", "photos", "foursq",
)

# Rows added per new tweet. The first five are the paper's; hashtags, photos and foursq are ours
# (hashtags are common, photos rarer, check-ins rarest); tweets is 1 by definition.
UPDATE_RATIOS = MappingProxyType({
    "users": 0.30,
    "tweets": 1.0,
    "socnet": 0.25,
    "loc": 0.02,
    "curloc": 0.10,
    "urls": 0.20,
    "hashtags": 0.15,
    "photos": 0.05,
    "foursq": 0.03,
})

SQL_DIR = resources.files("smile") / "sql"
"""The DDL shipped inside the package."""


def _split_ddl(text: str) -> dict[str, str]:
    parts = re.split(r"^-- relation: (\w+)\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def ddl(relation: str) -> str:
    """The CREATE TABLE IF NOT EXISTS statement of one base relation."""
    statements = _split_ddl((SQL_DIR / "base_relations.sql").read_text())
    return statements[relation]

# Live traffic beyond inserts (the workload driver): per new tweet, the chance of
#   an UPDATE of the author's follower count when the author is not new,
#   an UPDATE of an earlier tweet's text (an edit),
#   a DELETE of an earlier tweet (a delete notice).
UPDATE_USER_CHANCE = 0.10
EDIT_TWEET_CHANCE = 0.01
DELETE_TWEET_CHANCE = 0.005
