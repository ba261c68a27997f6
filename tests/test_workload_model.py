"""The tweet model: the changes one tweet makes follow the documented ratios."""

from __future__ import annotations

import random
from collections import Counter

from smile.dataset.relations import (
    DELETE_TWEET_CHANCE,
    EDIT_TWEET_CHANCE,
    UPDATE_RATIOS,
    UPDATE_USER_CHANCE,
)
from smile.workload.model import TweetModel, zipf_rank

N = 40_000


def test_ratios_match_the_paper() -> None:
    model = TweetModel(next_tid=1001, users=300, seed=3)
    counts: Counter[tuple[str, str]] = Counter()
    for _ in range(N):
        counts.update((c.relation, c.op) for c in model.tweet())
    assert counts[("tweets", "insert")] == N
    for rel, ratio in UPDATE_RATIOS.items():
        observed = counts[(rel, "insert")] / N
        assert abs(observed - ratio) <= 0.1 * ratio + 0.003, (rel, observed, ratio)
    existing = N - counts[("users", "insert")]
    assert abs(counts[("users", "update")] / existing - UPDATE_USER_CHANCE) < 0.01
    assert abs(counts[("tweets", "update")] / N - EDIT_TWEET_CHANCE) < 0.003
    assert abs(counts[("tweets", "delete")] / N - DELETE_TWEET_CHANCE) < 0.002
    assert model.next_tid == 1001 + N
    assert model.users == 300 + counts[("users", "insert")]


def test_authors_exist_and_ids_are_fresh() -> None:
    model = TweetModel(next_tid=1, users=0, seed=5)
    seen_tids: set[int] = set()
    for _ in range(5000):
        changes = model.tweet()
        tweet = next(c for c in changes if c.relation == "tweets" and c.op == "insert")
        tid, uid = tweet.values[0], tweet.values[1]
        assert isinstance(tid, int) and isinstance(uid, int)
        assert tid not in seen_tids
        seen_tids.add(tid)
        assert 1 <= uid <= model.users  # the author is an existing or just-inserted user


def test_zipf_is_skewed_towards_low_ranks() -> None:
    rng = random.Random(9)
    ranks = Counter(zipf_rank(rng, 1000) for _ in range(50_000))
    assert all(0 <= r < 1000 for r in ranks)
    # P(k) = ln((k+2)/(k+1)) / ln(1001): P(0) ≈ 0.100, the top 10 ranks ≈ ln(11)/ln(1001) ≈ 0.35
    assert 0.09 < ranks[0] / 50_000 < 0.11
    assert 0.30 < sum(ranks[r] for r in range(10)) / 50_000 < 0.40
