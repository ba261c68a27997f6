"""Calibration on the real machines: every PostgreSQL operator gets a fitted line, the picture
is drawn, and nothing is left behind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import pytest

from smile.calibrate import calibrate, draw_png

if TYPE_CHECKING:
    from pathlib import Path

    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services


def test_calibrate_fits_lines_and_draws(cloud: CloudHandle, tmp_path: Path) -> None:
    report = calibrate(cloud.topology, repeat=1)
    for kind in ("delta_to_rel", "copy_delta", "union", "join_pg"):
        line = report["time_model"][kind]
        assert line["a"] >= 0 and line["b"] > 0, kind
        pts = report["measured"][kind]
        assert [p[0] for p in pts] == [1, 10, 100, 1000, 3000, 10000]
        assert pts[-1][1] > pts[0][1]  # 10 000 tuples take longer than one
    assert report["defaults_kept"] == ["join_spark"]
    png = tmp_path / "fig5.png"
    draw_png(report, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with psycopg.connect(cloud.topology.machines[0].dsn) as conn:
        left = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = '_smile' "
                            "AND tablename LIKE 'cal_%%'").fetchone()
    assert left == (0,)
