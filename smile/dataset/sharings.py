"""The paper's 25 sharings (Table 1) as SQL over the nine relations, with the app of each.

Joins are on `uid` (users, tweets, socnet, loc) and `tid` (tweets and the five entity
relations); each sharing projects a few columns of every relation it reads. `mv_machine`
spreads the MVs over the machines ("arbitrarily assigned", paper §9.1): S_i on machine
((i − 1) mod N) + 1.

Must not: plan or submit anything.
"""

from __future__ import annotations

from dataclasses import dataclass

# alias, relation, join column to tweets (None for tweets itself), projected columns
_REL = {
    "users": ("u", "uid", ("uid", "screen_name")),
    "tweets": ("t", None, ("tid", "text")),
    "socnet": ("s", "uid", ("uid2",)),
    "loc": ("l", "uid", ("place",)),
    "curloc": ("c", "tid", ("lat", "lng")),
    "urls": ("r", "tid", ("url",)),
    "hashtags": ("h", "tid", ("tags",)),
    "photos": ("p", "tid", ("urls",)),
    "foursq": ("f", "tid", ("rid", "venue")),
}

TABLE1: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("S1", ("users", "socnet"), "twitaholic"),
    ("S2", ("users", "tweets", "curloc"), "twellow"),
    ("S3", ("users", "tweets", "urls"), "tweetmeme"),
    ("S4", ("users", "tweets", "urls", "curloc"), "twitdom"),
    ("S5", ("users", "tweets"), "tweetstats"),
    ("S6", ("tweets", "curloc"), "nearbytweets"),
    ("S7", ("urls", "curloc"), "nearbyurls"),
    ("S8", ("tweets", "photos"), "twitpic"),
    ("S9", ("foursq", "tweets"), "checkoutcheckins"),
    ("S10", ("hashtags", "tweets"), "monitter"),
    ("S11", ("foursq", "users", "tweets", "curloc"), "arrivaltracker"),
    ("S12", ("foursq", "users", "tweets"), "route"),
    ("S13", ("foursq", "users", "tweets", "loc"), "locc.us"),
    ("S14", ("tweets", "loc"), "locafollow"),
    ("S15", ("users", "loc", "tweets", "curloc"), "twittervision"),
    ("S16", ("foursq", "users", "tweets", "socnet"), "yelp"),
    ("S17", ("users", "loc"), "twittermap"),
    ("S18", ("users", "tweets", "photos", "curloc"), "twitter-360"),
    ("S19", ("users", "tweets", "hashtags", "curloc"), "hashtags.org"),
    ("S20", ("users", "tweets", "hashtags", "photos", "curloc"), "nearbytweets"),
    ("S21", ("users", "tweets", "foursq", "photos", "curloc"), "nearbytweets"),
    ("S22", ("foursq", "curloc"), "nearbytweets"),
    ("S23", ("photos", "curloc"), "twitxr"),
    ("S24", ("hashtags", "curloc"), "nearbytweets"),
    ("S25", ("hashtags", "users", "tweets"), "twistroi"),
)


@dataclass(frozen=True)
class SharingSpec:
    name: str
    app: str
    relations: tuple[str, ...]
    sql: str


def _sql(relations: tuple[str, ...]) -> str:
    rels = set(relations)
    cols = []
    for r in relations:
        alias, _, proj = _REL[r]
        cols += [f"{alias}.{c} AS {alias}_{c}" for c in proj]
    preds = []
    uid_side = [r for r in ("users", "socnet", "loc") if r in rels]
    tid_side = [r for r in ("curloc", "urls", "hashtags", "photos", "foursq") if r in rels]
    if "tweets" in rels:
        preds += [f"{_REL[r][0]}.uid = t.uid" for r in uid_side]
        preds += [f"{_REL[r][0]}.tid = t.tid" for r in tid_side]
    else:  # no tweets: relations of one family join on their common key
        for side, key in ((uid_side, "uid"), (tid_side, "tid")):
            preds += [f"{_REL[r][0]}.{key} = {_REL[side[0]][0]}.{key}" for r in side[1:]]
    froms = ", ".join(f"{r} {_REL[r][0]}" for r in relations)
    return f"SELECT {', '.join(cols)} FROM {froms} WHERE {' AND '.join(preds)}"


def table1() -> tuple[SharingSpec, ...]:
    """The 25 sharings of Table 1."""
    return tuple(SharingSpec(name, app, rels, _sql(rels)) for name, rels, app in TABLE1)


BEYOND: tuple[tuple[str, str, str], ...] = (
    ("A1", "tweets per user", "SELECT t.uid, count(*) AS tweets FROM tweets t GROUP BY t.uid"),
    ("A2", "followers per user",
     "SELECT s.uid2 AS uid, count(*) AS followers FROM socnet s GROUP BY s.uid2"),
    ("A3", "when each user was last seen at a place",
     "SELECT t.uid, max(t.created_at) AS last_seen FROM tweets t JOIN curloc c "
     "ON c.tid = t.tid GROUP BY t.uid"),
    ("A4", "users with their place, if they have one",
     "SELECT u.uid, u.screen_name, l.place FROM users u LEFT JOIN loc l ON l.uid = u.uid"),
    ("A5", "distinct hashtags per user",
     "SELECT t.uid, count(DISTINCT h.tags) AS hashtags FROM tweets t JOIN hashtags h "
     "ON h.tid = t.tid GROUP BY t.uid"),
    ("A6", "users who tweeted five times or more",
     "SELECT t.uid, count(*) AS tweets FROM tweets t GROUP BY t.uid HAVING count(*) >= 5"),
    ("A7", "the languages tweeted in", "SELECT DISTINCT t.lang FROM tweets t"),
    ("A8", "tweets and their authors, in all",
     "SELECT count(*) AS tweets, count(DISTINCT t.uid) AS authors FROM tweets t"),
)
"""Sharings beyond SPJ over the same relations (docs/design/beyond_spj.md): what the apps of
Table 1 would ask next — counts, last activity, an outer join, DISTINCT, HAVING."""


def beyond_spj() -> tuple[SharingSpec, ...]:
    """The sharings of `BEYOND`, with the relations each reads."""
    return tuple(SharingSpec(name, app, tuple(r for r in _REL if f" {r} " in f"{sql} "), sql)
                 for name, app, sql in BEYOND)


def paper_sla(name: str) -> float:
    """§9.3's mix: S1–S7 10 s, S8–S15 40 s, S16–S25 60 s; the sharings beyond SPJ the same
    three SLAs, A1–A2 10 s, A3–A5 40 s, A6–A8 60 s.

    >>> paper_sla("S7"), paper_sla("S8"), paper_sla("S25"), paper_sla("A2"), paper_sla("A6")
    (10.0, 40.0, 60.0, 10.0, 60.0)
    """
    n = int(name[1:])
    if name.startswith("A"):
        return 10.0 if n <= 2 else 40.0 if n <= 5 else 60.0
    return 10.0 if n <= 7 else 40.0 if n <= 15 else 60.0
