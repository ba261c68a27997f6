"""Unpack raw tweet events into the nine base relations (paper §9.1), on Spark.

Reads the JSON lines written by `generate.py` with an explicit schema and returns one DataFrame per
relation, with the columns of `smile/sql/base_relations.sql` in order.

Must not: generate events or write to a database.
"""

from __future__ import annotations

from typing import Any

RAW_SCHEMA = """
kind string,
user struct<uid: bigint, screen_name: string, lang: string, followers: int,
            created_at: timestamp>,
tweet struct<tid: bigint, uid: bigint, text: string, lang: string, created_at: timestamp,
             geo: struct<lat: double, lng: double>,
             urls: array<string>, hashtags: array<string>, media: array<string>,
             checkin: struct<rid: bigint, venue: string>,
             follows: array<bigint>,
             home: struct<place: string, lat: double, lng: double>>
"""


def read_raw_events(spark: Any, path: str) -> Any:
    return spark.read.schema(" ".join(RAW_SCHEMA.split())).json(path)


def unpack(raw: Any) -> dict[str, Any]:
    """relation name -> DataFrame of its rows."""
    from pyspark.sql import functions as F

    users = raw.where(F.col("kind") == "user").select("user.*")
    tw = raw.where(F.col("kind") == "tweet").select("tweet.*")
    return {
        "users": users.select("uid", "screen_name", "lang", "followers", "created_at"),
        "tweets": tw.select("tid", "uid", "text", "lang", "created_at"),
        "socnet": tw.select("uid", F.explode("follows").alias("uid2"),
                            F.col("created_at").alias("since")),
        "loc": tw.where(F.col("home").isNotNull()).select(
            "uid", F.col("home.place").alias("place"), F.col("home.lat").alias("lat"),
            F.col("home.lng").alias("lng")),
        "curloc": tw.where(F.col("geo").isNotNull()).select(
            "tid", F.col("geo.lat").alias("lat"), F.col("geo.lng").alias("lng")),
        "urls": tw.select("tid", F.explode("urls").alias("url")),
        "hashtags": tw.select("tid", F.explode("hashtags").alias("tags")),
        "photos": tw.select("tid", F.explode("media").alias("urls")),
        "foursq": tw.where(F.col("checkin").isNotNull()).select(
            "tid", F.col("checkin.rid").alias("rid"), F.col("checkin.venue").alias("venue")),
    }
