"""The measurement harness `smile bench` and `smile experiment` share (`smile.harness`): its
traffic thread, driven by a stand-in for the workload driver; the scales picked by name; the
JSON it prints; and the direction of the imports between the three packages."""

from __future__ import annotations

import ast
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pytest

from smile.errors import CloudError, ConfigError
from smile.experiments.registry import EXPERIMENTS
from smile.harness import traffic as traffic_module
from smile.harness.output import print_json
from smile.harness.scale import TABLE1, Scale, pick
from smile.harness.traffic import Traffic
from smile.workload.driver import WorkloadReport

if TYPE_CHECKING:
    import threading

    from smile.topology import Topology

SMILE = Path(__file__).resolve().parents[1] / "smile"


class _Driver:
    """Stands in for `WorkloadDriver`: writes nothing, `rate` tweets a second until stopped or
    its seconds are up; fails when told to."""

    seeds: ClassVar[list[int]] = []
    fail: ClassVar[str | None] = None

    def __init__(self, topology: Topology, *, seed: int) -> None:
        _Driver.seeds.append(seed)

    def run(self, rate: float, seconds: float,
            stop: threading.Event | None = None) -> WorkloadReport:
        if _Driver.fail:
            raise RuntimeError(_Driver.fail)
        began = time.monotonic()
        assert stop is not None
        stop.wait(seconds)
        elapsed = time.monotonic() - began
        return WorkloadReport(rate, seconds, round(rate * elapsed), elapsed)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> type[_Driver]:
    monkeypatch.setattr(traffic_module, "WorkloadDriver", _Driver)
    _Driver.seeds, _Driver.fail = [], None
    return _Driver


def test_traffic_runs_until_stopped_and_says_what_it_achieved(driver: type[_Driver]) -> None:
    t = Traffic(None)  # type: ignore[arg-type]  # the stand-in reads no topology
    assert t.achieved_rate is None and t.failure is None
    t.start(200.0)
    assert not t.sleep(0.05) and t.achieved_rate is None  # still running
    t.stop()
    assert t.stopped.is_set() and t.achieved_rate == pytest.approx(200.0, rel=0.2)
    t.check()  # nothing failed
    assert driver.seeds == [200]  # the rate's seed by default
    # a new start stops the traffic before it; a fixed length ends by itself
    t.start(50.0, 0.1, seed=7)
    t.join(5.0)
    assert t.achieved_rate == pytest.approx(50.0, rel=0.2) and driver.seeds == [200, 7]


def test_traffic_that_failed_says_so_in_the_callers_thread(driver: type[_Driver]) -> None:
    driver.fail = "the source went away"
    t = Traffic(None).start(300.0)  # type: ignore[arg-type]
    t.join(5.0)
    assert isinstance(t.failure, RuntimeError) and t.achieved_rate is None
    with pytest.raises(CloudError, match="traffic at 300 tweets/s stopped: the source"):
        t.check()


def test_scales_are_picked_by_name() -> None:
    scales = {"tiny": Scale(5_000, 3, (100.0, 400.0), 30.0, ("S1",), 10.0),
              "full": Scale(7_000_000, 6, (1000.0,), 600.0, TABLE1)}
    tiny = pick(scales, "tiny")
    assert (tiny.rate, tiny.sla, tiny.sla_s) == (100.0, "10", 10.0)
    assert len(pick(scales, "full").sharings) == 25 and pick(scales, "full").sla_s is None
    with pytest.raises(ConfigError, match="no small scale here"):
        pick(scales, "small")


def test_json_is_printed_as_benchmarks_and_experiments_print_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"sla": "S1–S7 10 s", "n": 1})
    assert capsys.readouterr().out == '{\n  "sla": "S1\\u2013S7 10 s",\n  "n": 1\n}\n'
    print_json({"sla": "S1–S7", "at": Path("x"), "nan": math.nan}, ascii_only=False)
    out = capsys.readouterr().out
    assert "S1–S7" in out and json.loads(out.replace("NaN", "null"))["at"] == "x"


def test_every_experiment_names_a_function_that_runs_it() -> None:
    import importlib

    for e in EXPERIMENTS.values():
        module, function = e.runs.split(":")
        assert callable(getattr(importlib.import_module(f"smile.experiments.{module}"),
                                function)), e.name


def _imports(package: str) -> set[str]:
    """The `smile.*` modules the modules of `package` import (typing-only ones included)."""
    found: set[str] = set()
    for path in (SMILE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("smile.")}


def test_measurement_imports_go_one_way() -> None:
    """experiments → bench → harness, never back: the harness imports neither, and the
    benchmarks not the experiments."""
    def into(package: str, target: str) -> list[str]:
        return sorted(m for m in _imports(package)
                      if m == f"smile.{target}" or m.startswith(f"smile.{target}."))

    assert into("harness", "bench") == [] and into("harness", "experiments") == []
    assert into("bench", "experiments") == []


