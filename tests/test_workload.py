"""The workload driver against the loaded machines: what it reports is what the tables show."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import pytest

from smile.dataset.placement import default_placement
from smile.errors import WorkloadError
from smile.workload.driver import WorkloadDriver, locate_relations

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services


def _scalar(handle: CloudHandle, rel: str, query: str) -> int:
    placement = default_placement([m.name for m in handle.topology.machines])
    with psycopg.connect(handle.topology.machine(placement[rel]).dsn) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def test_driver_writes_what_it_reports(loaded: CloudHandle) -> None:
    assert locate_relations(loaded.topology) == dict(
        default_placement([m.name for m in loaded.topology.machines]))
    users0 = _scalar(loaded, "users", "SELECT count(*) FROM users")
    tweets0 = _scalar(loaded, "tweets", "SELECT count(*) FROM tweets")
    max_tid0 = _scalar(loaded, "tweets", "SELECT max(tid) FROM tweets")
    followers0 = _scalar(loaded, "users", "SELECT sum(followers) FROM users")
    urls0 = _scalar(loaded, "urls", "SELECT count(*) FROM urls")

    report = WorkloadDriver(loaded.topology, seed=5).run(rate=300, duration_s=2)

    assert report.tweets == 600
    assert report.elapsed_s >= 2
    c = report.changes
    assert _scalar(loaded, "users", "SELECT count(*) FROM users") == users0 + c["users.insert"]
    assert _scalar(loaded, "tweets", "SELECT max(tid) FROM tweets") == max_tid0 + 600
    deleted = c.get("tweets.delete", 0)
    after = _scalar(loaded, "tweets", "SELECT count(*) FROM tweets")
    assert tweets0 + 600 - deleted <= after <= tweets0 + 600  # a delete may hit a deleted tweet
    assert _scalar(loaded, "users", "SELECT sum(followers) FROM users") == (
        followers0 + c["users.update"])
    assert _scalar(loaded, "urls", "SELECT count(*) FROM urls") == urls0 + c.get("urls.insert", 0)
    assert c["users.update"] > 0 and c["socnet.insert"] > 0


def test_bad_rate_is_refused(loaded: CloudHandle) -> None:
    with pytest.raises(WorkloadError, match="positive"):
        WorkloadDriver(loaded.topology).run(rate=0, duration_s=1)
