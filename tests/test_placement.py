"""Placement of the nine relations on machines."""

from __future__ import annotations

import pytest

from smile.dataset.placement import default_placement, parse_placement
from smile.dataset.relations import RELATIONS
from smile.errors import ConfigError


def test_default_is_round_robin_over_all_relations() -> None:
    p = default_placement(["m1", "m2", "m3"])
    assert list(p) == list(RELATIONS)
    assert [p[r] for r in RELATIONS] == ["m1", "m2", "m3"] * 3


def test_parse_accepts_a_full_placement() -> None:
    doc = dict.fromkeys(RELATIONS, "m2") | {"users": "m1"}
    p = parse_placement(doc, ["m1", "m2"])
    assert p["users"] == "m1" and p["foursq"] == "m2"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1, 2], "JSON object"),
        (dict.fromkeys(RELATIONS, "m1") | {"bogus": "m1"}, "unknown relations \\['bogus'\\]"),
        ({"users": "m1"}, "does not place"),
        (dict.fromkeys(RELATIONS, "m7"), "unknown machines \\['m7'\\]"),
    ],
)
def test_parse_refuses_bad_placements(doc: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_placement(doc, ["m1", "m2"])
