"""The dataset pipeline on Spark and real machines: shape, ratios, placement, refusal to mix."""

from __future__ import annotations

import psycopg
import pytest

from smile.dataset.load import create_relations
from smile.dataset.placement import default_placement
from smile.dataset.relations import RELATIONS, UPDATE_RATIOS
from smile.errors import DatasetError
from tests.fix_cloud import LOADED_TWEETS, CloudHandle

pytestmark = [pytest.mark.services, pytest.mark.spark]


def _rows(handle: CloudHandle, rel: str, query: str) -> list[tuple[object, ...]]:
    placement = default_placement([m.name for m in handle.topology.machines])
    with psycopg.connect(handle.topology.machine(placement[rel]).dsn) as conn:
        return conn.execute(query).fetchall()


def test_every_tweet_author_is_a_user(loaded: CloudHandle) -> None:
    users = {r[0] for r in _rows(loaded, "users", "SELECT uid FROM users")}
    authors = {r[0] for r in _rows(loaded, "tweets", "SELECT DISTINCT uid FROM tweets")}
    assert authors and authors <= users
    # authors are Zipf-skewed: a few users write much of the traffic
    top = _rows(loaded, "tweets",
                "SELECT count(*) FROM tweets GROUP BY uid ORDER BY count(*) DESC LIMIT 100")
    assert sum(int(r[0]) for r in top) > 0.2 * LOADED_TWEETS  # type: ignore[call-overload]


def test_row_counts_follow_the_update_ratios(loaded: CloudHandle) -> None:
    for rel in RELATIONS:
        (count,) = _rows(loaded, rel, f"SELECT count(*) FROM {rel}")[0]
        observed = int(count) / LOADED_TWEETS  # type: ignore[call-overload]
        assert abs(observed - UPDATE_RATIOS[rel]) <= 0.05 * UPDATE_RATIOS[rel] + 0.002, rel


def test_entity_rows_point_at_tweets(loaded: CloudHandle) -> None:
    for rel in ("curloc", "urls", "hashtags", "photos", "foursq"):
        (lo, hi, nulls) = _rows(
            loaded,
            rel,
            f"SELECT min(tid), max(tid), count(*) FILTER (WHERE tid IS NULL) FROM {rel}",
        )[0]
        assert nulls == 0 and 1 <= lo <= hi <= LOADED_TWEETS, rel  # type: ignore[operator]


def test_relations_are_only_on_their_machine(loaded: CloudHandle) -> None:
    placement = default_placement([m.name for m in loaded.topology.machines])
    for machine in loaded.topology.machines:
        with psycopg.connect(machine.dsn) as conn:
            present = {
                r[0] for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
            }
        assert present & set(RELATIONS) == {r for r in RELATIONS if placement[r] == machine.name}


def test_loading_over_rows_is_refused(loaded: CloudHandle) -> None:
    placement = default_placement([m.name for m in loaded.topology.machines])
    with pytest.raises(DatasetError, match=r"already hold rows.*--replace"):
        create_relations(loaded.topology, placement, replace=False)
    (count,) = _rows(loaded, "tweets", "SELECT count(*) FROM tweets")[0]
    assert count == LOADED_TWEETS  # nothing was lost by the refusal


def test_generation_is_reproducible(spark: object) -> None:
    from smile.dataset.generate import raw_events
    from smile.dataset.unpack import unpack

    def counts(seed: int) -> dict[str, int]:
        frames = unpack(raw_events(spark, 2000, seed))
        return {rel: frames[rel].count() for rel in ("urls", "socnet", "hashtags")}

    assert counts(1) == counts(1)
    assert counts(1) != counts(2)
