"""Commands that write files refuse a path they cannot write before their work starts: one
line on stderr, exit 2, no traceback, and nothing existing touched (no cloud is needed to see it:
the check comes before the topology is looked up)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from smile.cli.out_paths import writable_dir, writable_file
from smile.dataset.catalog_model import paper_catalog
from smile.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def _smile(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smile.cli.main", "--state-dir", str(tmp_path / "state"), *args],
        env={**os.environ, "COLUMNS": "500"}, cwd=tmp_path, check=False, capture_output=True,
        text=True, timeout=60)


@pytest.mark.parametrize(("args", "said"), [
    (("catalog", "snapshot", "--out", "/proc/smile-nope.json"),
     "--out /proc/smile-nope.json: cannot be written"),
    (("catalog", "snapshot", "--out", "{tmp}"), "a directory, not a file"),
    (("catalog", "snapshot", "--out", "{tmp}/missing/cat.json"), "there is no directory"),
    (("calibrate", "--out", "{tmp}/tm.json", "--png", "{tmp}"), "--png {tmp}: a directory"),
    (("calibrate", "--out", "{tmp}/tm.json", "--catalog", "{tmp}/none.json"),
     "cannot read catalog"),
    (("bench", "plumbing", "--out", "{tmp}/kept"), "--out {tmp}/kept: not a directory"),
])
def test_an_unwritable_out_is_refused_before_the_work(
        tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    """Found: `smile catalog snapshot --out /proc/x` sampled the live cloud, then died with a
    FileNotFoundError traceback; calibrate wrote its JSON, then failed on --png after minutes."""
    kept = tmp_path / "kept"
    kept.write_text("kept")
    done = _smile(tmp_path, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert said.replace("{tmp}", str(tmp_path)) in message
    assert "Traceback" not in message and "cloud" not in message
    assert kept.read_text() == "kept" and not (tmp_path / "tm.json").exists()
    assert not (tmp_path / "state").exists()


def test_plan_refuses_an_unwritable_picture_before_planning(tmp_path: Path) -> None:
    catalog = tmp_path / "cat.json"
    paper_catalog(machines=3).save(catalog)
    done = _smile(tmp_path, "plan", "--catalog", str(catalog), "--sql",
                  "SELECT t.tid, c.lat FROM tweets t JOIN curloc c ON t.tid = c.tid",
                  "--staleness", "45", "--penalty", "0", "--explain", "--picture", "/proc/p.svg")
    assert done.returncode == 2, done.stderr
    assert "--picture /proc/p.svg: cannot be written" in " ".join(done.stderr.split())
    assert done.stdout == ""  # refused before a decision was printed


def test_writable_paths_leave_what_exists_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    target.write_text("old")
    before = target.stat().st_mtime_ns
    writable_file(target)
    assert target.read_text() == "old" and target.stat().st_mtime_ns == before
    writable_file(tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()
    made = tmp_path / "made" / "here"
    writable_dir(made)
    assert made.is_dir() and not list(made.iterdir())
    with pytest.raises(ConfigError, match=r"--png .*: a directory, not a file"):
        writable_file(tmp_path, "--png")
