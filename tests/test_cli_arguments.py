"""Numeric options that would do nothing, or fail minutes later, are refused by argparse before
a command starts: exit 2, the option named, no traceback, no cloud needed."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from smile.errors import PlanError
from smile.optimizer.sharing import Sharing

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize(("args", "said"), [
    # found: a ZeroDivisionError traceback (machines 0), a StatisticsError (rounds 0)
    (("bench", "plumbing", "--machines", "0"), "argument --machines: 0 is not at least 1"),
    (("bench", "plumbing", "--rate", "-1"), "argument --rate: -1.0 is not above 0"),
    (("bench", "optimizer", "--rounds", "0"), "argument --rounds: 0 is not at least 1"),
    (("bench", "push", "--fraction", "2"), "argument --fraction: 2.0 is not a share"),
    (("bench", "lazy", "--duration", "inf"), "argument --duration: 'inf' is not a finite"),
    (("bench", "admission", "--warmup", "-5"), "argument --warmup: -5.0 is below 0"),
    (("bench", "admission", "--duration", "0"), "argument --duration: 0.0 is not above 0"),
    (("bench", "admission", "--rates", "100,nan"), "--rates must be positive tweets/s"),
    (("bench", "faults", "--rate", "nan"), "argument --rate: 'nan' is not a finite number"),
    (("bench", "faults", "--tweets", "0"), "argument --tweets: 0 is not at least 1"),
    (("bench", "skewed-mv", "--inserts", "0"), "argument --inserts: 0 is not at least 1"),
    (("bench", "join-plan", "--x-rows", "0"), "argument --x-rows: 0 is not at least 1"),
    (("catalog", "snapshot", "--out", "c.json", "--sample-s", "nan"),
     "argument --sample-s: 'nan' is not a finite number"),
    (("calibrate", "--repeat", "0"), "argument --repeat: 0 is not at least 1"),
    (("agent", "run", "--machine", "m1", "--push-workers", "1.5"),
     "argument --push-workers: '1.5' is not a whole number"),
    (("serve", "--audit-every", "0"), "argument --audit-every: 0.0 is not above 0"),
    (("demo", "--penalty", "-1"), "argument --penalty: -1.0 is below 0"),
    (("demo", "--rate", "inf"), "argument --rate: 'inf' is not a finite number"),
    # found: a progress bar of "0/-5" drawn (after looking the cloud up) before the refusal
    (("workload", "run", "--rate", "-5", "--duration", "1"), "argument --rate: -5.0 is not above"),
    (("workload", "run", "--rate", "inf", "--duration", "1"), "'inf' is not a finite number"),
    (("workload", "run", "--rate", "100", "--duration", "0"), "argument --duration: 0.0 is not"),
])
def test_a_number_that_cannot_work_is_refused_by_name(
        tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "smile.cli.main", "--state-dir", str(tmp_path / "state"), *args],
        env={**os.environ, "COLUMNS": "500"}, cwd=tmp_path, check=False, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert said in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "state").exists() and not (tmp_path / "c.json").exists()


@pytest.mark.parametrize(("staleness", "penalty"), [
    (math.inf, 0.0), (math.nan, 0.0), (10.0, math.nan), (10.0, math.inf), (10.0, -1.0)])
def test_a_sharing_needs_a_finite_sla_and_penalty(staleness: float, penalty: float) -> None:
    """Found: a penalty of NaN passed (`nan < 0` is false) into the M/M/1 penalty."""
    with pytest.raises(PlanError, match=r"staleness|penalty"):
        Sharing("s", "SELECT 1", staleness, penalty)


def test_bench_push_offers_every_query_it_has() -> None:
    from smile.bench.push import QUERIES
    from smile.cli.bench_cmd import PUSH_QUERIES

    assert set(PUSH_QUERIES) == set(QUERIES)
