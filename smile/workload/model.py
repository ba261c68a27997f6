"""What one new tweet does to the nine base relations, as plain values (no database).

With the update ratios of `smile.dataset.relations`: a tweet's author is new with chance 0.3
(INSERT users) or else a Zipf-skewed existing user (and then, with chance 0.1, an UPDATE of that
user's follower count); the tweet is inserted; each entity relation gets a row with its ratio;
with small chances an earlier tweet is edited (UPDATE) or deleted (DELETE).

Must not: touch a database (the driver applies the changes).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from smile.dataset.generate import CITIES, LANGS, TAGS, VENUES
from smile.dataset.relations import (
    DELETE_TWEET_CHANCE,
    EDIT_TWEET_CHANCE,
    UPDATE_RATIOS,
    UPDATE_USER_CHANCE,
)

Op = Literal["insert", "update", "delete"]


@dataclass(frozen=True)
class Change:
    """One row-level change: `values` are the row for an insert, the key-and-new-values for an
    update (`followers_inc` or `text`), the key for a delete."""

    relation: str
    op: Op
    values: tuple[object, ...]


def zipf_rank(rng: random.Random, n: int) -> int:
    """A rank in [0, n) with P(k) = ln((k+2)/(k+1)) / ln(n+1) ≈ 1/((k+1.5)·ln(n+1)) (Zipf, s=1),
    as the bulk generator draws it.

    >>> all(0 <= zipf_rank(random.Random(1), 10) < 10 for _ in range(100))
    True
    """
    return min(n - 1, max(0, math.floor(math.exp(rng.random() * math.log(n + 1))) - 1))


@dataclass
class TweetModel:
    """Generates the changes of successive tweets; holds only counters (next ids)."""

    next_tid: int
    users: int
    seed: int = 7
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _existing_user(self) -> int:
        rank = zipf_rank(self.rng, self.users)
        return (rank * 1_000_003 + 12345) % self.users + 1

    def tweet(self, now: datetime | None = None) -> list[Change]:
        rng, ratios = self.rng, UPDATE_RATIOS
        now = now or datetime.now(UTC)
        out: list[Change] = []
        if self.users == 0 or rng.random() < ratios["users"]:
            self.users += 1
            uid = self.users
            out.append(Change("users", "insert", (uid, f"user{uid}", rng.choice(LANGS), 0, now)))
        else:
            uid = self._existing_user()
            if rng.random() < UPDATE_USER_CHANCE:
                out.append(Change("users", "update", (uid,)))
        tid = self.next_tid
        self.next_tid += 1
        city = rng.choice(CITIES)
        out.append(Change("tweets", "insert", (tid, uid, f"tweet {tid} about {city}",
                                               rng.choice(LANGS), now)))
        if rng.random() < ratios["socnet"] and self.users > 1:
            out.append(Change("socnet", "insert", (uid, self._existing_user(), now)))
        if rng.random() < ratios["loc"]:
            out.append(Change("loc", "insert", (uid, rng.choice(CITIES), 24 + 25 * rng.random(),
                                                -125 + 58 * rng.random())))
        if rng.random() < ratios["curloc"]:
            out.append(Change("curloc", "insert", (tid, 24 + 25 * rng.random(),
                                                   -125 + 58 * rng.random())))
        if rng.random() < ratios["urls"]:
            out.append(Change("urls", "insert", (tid, f"http://t.co/{rng.getrandbits(48):x}")))
        if rng.random() < ratios["hashtags"]:
            out.append(Change("hashtags", "insert", (tid, f"#tag{zipf_rank(rng, TAGS)}")))
        if rng.random() < ratios["photos"]:
            out.append(Change("photos", "insert", (tid, f"http://pic.twitter.com/p{tid}")))
        if rng.random() < ratios["foursq"]:
            rid = zipf_rank(rng, VENUES) + 1
            out.append(Change("foursq", "insert", (tid, rid, f"venue {rid}")))
        if tid > 1 and rng.random() < EDIT_TWEET_CHANCE:
            out.append(Change("tweets", "update", (rng.randrange(1, tid), f"edited {tid}")))
        if tid > 1 and rng.random() < DELETE_TWEET_CHANCE:
            out.append(Change("tweets", "delete", (rng.randrange(1, tid),)))
        return out
