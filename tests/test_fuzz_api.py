"""Schemathesis fuzzes every route of a live SMILE (2 machines, relations published, one
sharing admitted so that routes with ids have something to find) with an admin's token: at
least 1000 requests, none answered with a 5xx, and the server alive at the end. Slow: run it
with `bash scripts/test.sh -m slow tests/test_fuzz_api.py` or `bash scripts/fuzz.sh`."""

from __future__ import annotations

import json
import os

import pytest

from tests.fix_api import live_smile
from tests.fix_cloud import ARTIFACTS
from tests.fuzz_api import fuzz

pytestmark = [pytest.mark.services, pytest.mark.spark, pytest.mark.slow]


def test_no_route_answers_5xx() -> None:
    examples = int(os.environ.get("FUZZ_EXAMPLES", "100"))
    with live_smile("fuzz", 700, 2, 2000) as live:
        for rel, machine in (("users", "m1"), ("tweets", "m2"), ("socnet", "m1")):
            assert live.call("POST", "/relations", {"machine": machine,
                                                    "table": f"public.{rel}"})[0] == 201
        status, body = live.call("POST", "/sharings", {
            "name": "F1", "sql": "SELECT u.uid, s.uid2 FROM users u, socnet s "
                                 "WHERE s.uid = u.uid", "staleness_s": 60})
        assert status == 201, body
        report = fuzz(live.url, live.token, examples, ARTIFACTS / "fuzz")
        print(json.dumps(report))
        assert live.serve.poll() is None, "smile serve died"
        assert live.call("GET", "/healthz", token="")[0] == 200
        assert report["requests"] >= 1000, report
        assert report["server_errors"] == 0, report
