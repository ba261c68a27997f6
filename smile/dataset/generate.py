"""Generate raw tweet-like events on Spark (paper §9.1's gardenhose, synthesised).

Two kinds of JSON events in one stream, as a Twitter-like firehose would carry them:
- `user`: an account is created (uid, screen name, language, follower count, creation time);
- `tweet`: a tweet with its author's uid, text, language, time, and optional entities: a current
  location (geo), URLs, hashtags, photos (media), a restaurant check-in, a follow of another user,
  and an update of the author's home address.

There are `round(0.3·N)` users for `N` tweets (users' update ratio). Authors are Zipf-skewed
(Zipf with s≈1) over the users, scrambled by a bijection so that popular users are spread over
the uid space; entity probabilities are `UPDATE_RATIOS`. Randomness is a hash of (seed, row id,
field), so a run is reproducible whatever Spark's partitioning.

Must not: write to a database (that is `load.py`) or know the relational schema (`unpack.py`).
"""

from __future__ import annotations

import math
from typing import Any

from smile.dataset.relations import UPDATE_RATIOS

EPOCH = "2010-09-01 00:00:00"  # the paper's gardenhose collection started in September 2010
TWEETS_PER_SECOND = 100  # the gardenhose's average rate
CITIES = ("new york", "los angeles", "chicago", "houston", "phoenix", "philadelphia",
          "san antonio", "san diego", "dallas", "san jose", "austin", "seattle")
LANGS = ("en", "en", "en", "es", "ja", "pt", "fr")
VENUES = 5000
TAGS = 2000
_SCALE = float(1 << 40)
_MULTIPLIER = 1_000_003  # a prime: rank -> uid is a bijection unless it divides the user count


def user_count(tweets: int) -> int:
    """Users for `tweets` tweets at the paper's users update ratio (at least one).

    >>> user_count(100_000)
    30000
    """
    return max(1, round(UPDATE_RATIOS["users"] * tweets))


def _u(F: Any, seed: int, field: int) -> Any:
    """Uniform [0, 1) from a hash of (seed, id, field)."""
    h = F.xxhash64(F.lit(seed), F.col("id"), F.lit(field))
    return F.pmod(h, F.lit(1 << 40)).cast("double") / _SCALE


def _zipf(F: Any, u: Any, n: int) -> Any:
    """A rank in [0, n) with P(k) = ln((k+2)/(k+1)) / ln(n+1), i.e. Zipf with s≈1:
    the floor of a log-uniform draw on [1, n+1)."""
    rank = F.floor(F.exp(u * math.log(n + 1))).cast("long") - 1
    return F.least(F.greatest(rank, F.lit(0)), F.lit(n - 1))


def _scramble(F: Any, rank: Any, n: int) -> Any:
    mult = _MULTIPLIER if n % _MULTIPLIER else _MULTIPLIER + 2
    return F.pmod(rank * F.lit(mult) + F.lit(12345), F.lit(n)) + 1


def raw_events(spark: Any, tweets: int, seed: int) -> Any:
    """The raw event stream as a DataFrame with columns kind, user (struct), tweet (struct)."""
    from pyspark.sql import functions as F

    users = user_count(tweets)
    r = UPDATE_RATIOS
    epoch = F.to_timestamp(F.lit(EPOCH))
    cities = F.array(*[F.lit(c) for c in CITIES])
    langs = F.array(*[F.lit(x) for x in LANGS])

    def pick(arr: Any, n: int, field: int) -> Any:
        return F.element_at(arr, (F.floor(_u(F, seed, field) * n) + 1).cast("int"))

    def chance(field: int, p: float, value: Any, empty: Any = None) -> Any:
        return F.when(_u(F, seed, field) < p, value).otherwise(empty)

    user_df = spark.range(1, users + 1).select(
        F.lit("user").alias("kind"),
        F.struct(
            F.col("id").alias("uid"),
            F.concat(F.lit("user"), F.col("id").cast("string")).alias("screen_name"),
            pick(langs, len(LANGS), 1).alias("lang"),
            F.floor(F.exp(_u(F, seed, 2) * math.log(100_000))).cast("int").alias("followers"),
            (epoch - F.make_interval(days=F.floor(_u(F, seed, 3) * 1500).cast("int"))).alias(
                "created_at"
            ),
        ).alias("user"),
        F.lit(None).alias("tweet"),
    )

    author = _scramble(F, _zipf(F, _u(F, seed, 10), users), users)
    other = _scramble(F, _zipf(F, _u(F, seed, 11), users), users)
    no_strings = F.array().cast("array<string>")
    tweet_df = spark.range(1, tweets + 1).select(
        F.lit("tweet").alias("kind"),
        F.lit(None).alias("user"),
        F.struct(
            F.col("id").alias("tid"),
            author.alias("uid"),
            F.concat(F.lit("tweet "), F.col("id").cast("string"), F.lit(" about "),
                     pick(cities, len(CITIES), 12)).alias("text"),
            pick(langs, len(LANGS), 13).alias("lang"),
            (epoch + F.make_interval(
                secs=(F.col("id") / F.lit(TWEETS_PER_SECOND)).cast("decimal(18,6)"))
             ).alias("created_at"),
            chance(20, r["curloc"], F.struct(
                (24 + 25 * _u(F, seed, 21)).alias("lat"),
                (-125 + 58 * _u(F, seed, 22)).alias("lng"))).alias("geo"),
            chance(30, r["urls"], F.array(F.concat(
                F.lit("http://t.co/"), F.hex(F.xxhash64(F.lit(seed), F.col("id"), F.lit(31))))),
                no_strings).alias("urls"),
            chance(40, r["hashtags"], F.array(F.concat(
                F.lit("#tag"), _zipf(F, _u(F, seed, 41), TAGS).cast("string"))),
                no_strings).alias("hashtags"),
            chance(50, r["photos"], F.array(F.concat(
                F.lit("http://pic.twitter.com/p"), F.col("id").cast("string"))),
                no_strings).alias("media"),
            chance(60, r["foursq"], F.struct(
                (_zipf(F, _u(F, seed, 61), VENUES) + 1).alias("rid"),
                F.concat(F.lit("venue "), (_zipf(F, _u(F, seed, 61), VENUES) + 1).cast("string"))
                .alias("venue"))).alias("checkin"),
            chance(70, r["socnet"], F.array(other), F.array().cast("array<long>")).alias("follows"),
            chance(80, r["loc"], F.struct(
                pick(cities, len(CITIES), 81).alias("place"),
                (24 + 25 * _u(F, seed, 82)).alias("lat"),
                (-125 + 58 * _u(F, seed, 83)).alias("lng"))).alias("home"),
        ).alias("tweet"),
    )
    return user_df.unionByName(tweet_df, allowMissingColumns=True)


def write_raw_events(spark: Any, tweets: int, seed: int, path: str) -> None:
    """Write the raw events as JSON lines under `path` (replacing what is there)."""
    raw_events(spark, tweets, seed).write.mode("overwrite").json(path)
