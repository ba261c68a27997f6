"""Which daemon of a cloud took the cores (`footprint.cpu_by_daemon`, `cpu_between`) and what the
whole box did (`box_ticks`), read from this machine's /proc around a real process that burns
CPU. No services."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smile.harness.footprint import box_ticks, cpu_between, cpu_by_daemon

BURN = ("import time\nend = time.process_time() + 0.6\n"
        "while time.process_time() < end: pass\ntime.sleep(30)\n")


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs /proc")
def test_the_daemon_that_burnt_cpu_is_named_and_the_box_counts_it(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    # named like a cloud's agent: its command line carries the state dir and the machine
    child = subprocess.Popen([sys.executable, "-c", BURN, "smile.cli.main", "--state-dir",
                              state, "agent", "run", "--machine", "m9"])
    try:
        before, box_before, started = cpu_by_daemon(state), box_ticks(), time.monotonic()
        assert {name for name, _ in before.values()} == {"agent m9"}
        time.sleep(1.5)
        after, box_after = cpu_by_daemon(state), box_ticks()
        seconds = time.monotonic() - started
    finally:
        child.kill()
        child.wait()
    tick = float(os.sysconf("SC_CLK_TCK"))
    cores = cpu_between(before, after, seconds, tick)
    assert set(cores) == {"agent m9"}
    # it burnt 0.6 s of CPU, some of it before `before` was read: well above idle, at most all
    assert 0.05 <= cores["agent m9"] <= 0.6 / seconds + 0.05
    busy = (box_after["busy"] - box_before["busy"]) / tick / seconds
    assert busy >= cores["agent m9"] - 0.05  # the box saw at least what the daemon took
    assert box_after["steal"] >= box_before["steal"] >= 0
    assert cpu_by_daemon(str(tmp_path / "elsewhere")) == {}  # another cloud's: none of it
