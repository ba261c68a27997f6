"""Calibration on the real machines: every PostgreSQL operator gets a fitted line, the picture
is drawn, and nothing is left behind."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from smile.bench.calibrate import (
    RECOMPUTE_SIZES,
    SIZES,
    SPARK_SIZES,
    calibrate,
    draw_png,
    fitted,
)
from smile.cli.main import main
from smile.optimizer.plan import join_tuples

if TYPE_CHECKING:
    from pathlib import Path

    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services


def test_calibrate_fits_lines_and_draws(cloud: CloudHandle, tmp_path: Path) -> None:
    report = calibrate(cloud.topology, repeat=1)
    for kind in ("delta_to_rel", "copy_delta", "union_copy", "join_pg", "aggregate", "pad"):
        line = fitted(report, kind)
        assert line["a"] >= 0 and line["b"] > 0, kind
        pts = report["measured"][kind]  # a join's tuples: the rows it writes and reads
        assert [p[0] for p in pts] == [join_tuples(n, n) if kind == "join_pg" else n
                                       for n in SIZES]
        assert pts[-1][1] > pts[0][1]  # 10 000 tuples take longer than one
    # the plans' Union only moves the TS of the view over its inputs; copying into a table is
    # measured beside it as a baseline and is not a kind of edge of the time model (how the two
    # compare is a timing, in the report's `baselines` and the picture, not asserted here)
    view = report["measured"]["union"]
    assert [p[0] for p in view] == list(SIZES)
    assert "union_copy" not in report["time_model"] and report["calibrated"] == [
        "aggregate", "copy_delta", "delta_to_rel", "join_pg", "pad", "recompute", "skip",
        "union"]
    # a recomputation: a copy moved between machines and a join, each at 3n tuples
    rec = report["measured"]["recompute"]
    assert [p[0] for p in rec] == [3.0 * n for n in RECOMPUTE_SIZES for _ in range(2)]
    assert fitted(report, "recompute")["b"] > 0 and rec[-1][1] > rec[0][1]
    # a skip is measured past as many rows as DeltaToRel applies
    assert [p[0] for p in report["measured"]["skip"]] == list(SIZES)
    assert report["defaults_kept"] == ["join_spark"]
    png = tmp_path / "fig5.png"
    draw_png(report, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with psycopg.connect(cloud.topology.machines[0].dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_class WHERE relnamespace = "
                            "'_smile'::regnamespace AND relname LIKE 'cal_%%'").fetchone()
    assert left == (0,)


@pytest.mark.spark
def test_smile_calibrate_measures_spark_too(cloud: CloudHandle, spark: Any, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "model.json"
    code = main(["--state-dir", str(cloud.settings.state_dir), "calibrate", "--repeat", "1",
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "join_spark" in printed and "dispatch overhead" in printed
    report = json.loads(out.read_text())
    assert [p[0] for p in report["measured"]["join_spark"]] == [join_tuples(n, n)
                                                                for n in SPARK_SIZES]
    assert report["defaults_kept"] == []
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
