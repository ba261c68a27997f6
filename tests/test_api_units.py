"""The API's parts that need no cloud: `/metrics` formatted from a snapshot, and the executor
read for it under the executor's lock while push threads add and drop the sharings it tracks;
the dashboard's page and files served from the package without a token, and its scripts'
syntax; tokens a command line can take."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from smile.api import metrics
from smile.api.app import create_app
from smile.costmodel.time_model import EDGE_KINDS, Line, TimeModel
from smile.executor.consumers import new_token
from smile.executor.machine_load import MachineLoad
from smile.executor.store import SharingRow
from tests.fix_api import serve_app
from tests.fix_cloud import PORT_SHIFT

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _row(sid: int, name: str, status: str) -> SharingRow:
    return SharingRow(sid, name, "SELECT 1", 5.0, 0.01, status, "", {}, None, None, None, "m1",
                      NOW, None)


@dataclass
class _Tracked:
    name: str
    pushes: int = 0


@dataclass
class _Executor:
    """The executor as `/metrics` reads it: `lock`, `tracked` and the learnt model."""

    tracked: dict[str, _Tracked] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    refits: int = 0
    model: TimeModel = field(default_factory=TimeModel)
    calibrated: TimeModel = field(default_factory=TimeModel)


def test_metrics_render_a_snapshot() -> None:
    audit = {"staleness_s": 1.5, "sla_s": 5.0, "violations": 2, "tuples_moved": 10,
             "late_tuples": 1, "work_s": 0.25, "resource_cost": 0.001, "penalty_cost": 0.5}
    ex = _Executor({"A": _Tracked("A", 4), "C": _Tracked("C")}, refits=7,
                   model=TimeModel().with_line("union", Line(0.1, 0.002)))
    snap = metrics.Snapshot(
        (_row(1, "A", "admitted"), _row(2, "B", "rejected"), _row(3, "C", "admitted"),
         _row(4, "D", "rejected")),
        {"A": audit, "C": None},
        (("m1", MachineLoad("m1", None, 0.1, None, 0.9, (), ())),
         ("m2", MachineLoad("m2", 0.5, 0.6, 0.7, 0.4, (), ("A",)))),
        metrics.read_executor(cast("Any", ex)))
    text = metrics.render(snap)
    lines = text.splitlines()
    assert text.endswith("\n")
    for line in ('smile_sharing_staleness_seconds{sharing="A"} 1.5',
                 'smile_sharing_violations_total{sharing="A"} 2.0',
                 'smile_sharing_work_seconds_total{sharing="A"} 0.25',
                 'smile_sharing_cost_dollars{sharing="A",part="penalty_cost"} 0.5',
                 'smile_executor_pushes_total{sharing="A"} 4',
                 'smile_executor_pushes_total{sharing="C"} 0',
                 'smile_machine_load{machine="m2",kind="sustained"} 0.7',
                 'smile_machine_load{machine="m1",kind="bound"} 0.9',
                 'smile_machine_over_bound{machine="m1"} 0',
                 'smile_machine_over_bound{machine="m2"} 1',
                 "smile_time_model_refits_total 7",
                 'smile_time_model_seconds{model="current",kind="union",coef="b"} 0.002',
                 'smile_sharings{status="admitted"} 2', 'smile_sharings{status="rejected"} 2'):
        assert line in lines, (line, text)
    assert not any('sharing="C"' in x for x in lines if x.startswith("smile_sharing_"))
    assert not any('machine="m1",kind="predicted"' in x for x in lines)  # None: no sample
    model = [x for x in lines if x.startswith("smile_time_model_seconds{")]
    assert len(model) == 2 * (2 * len(EDGE_KINDS) + 1)  # a and b per kind, and the dispatch
    # every sample follows its metric's HELP and TYPE, each metric's once
    declared: list[str] = []
    for x in lines:
        if x.startswith("# TYPE "):
            declared.append(x.split()[2])
        elif not x.startswith("#"):
            assert re.match(r"[a-z_]+", x)[0] == declared[-1], x  # type: ignore[index]
    assert len(declared) == len(set(declared)) == 13


def test_metrics_read_the_executor_under_its_lock() -> None:
    """A push thread holding the lock holds the reading up; push threads dropping and adding
    sharings (under the lock, as the executor's do) never break one."""
    ex = _Executor({f"S{i}": _Tracked(f"S{i}", i) for i in range(50)})
    read: list[metrics.ExecutorReading] = []
    with ex.lock:
        reader = threading.Thread(target=lambda: read.append(metrics.read_executor(
            cast("Any", ex))))
        reader.start()
        time.sleep(0.3)
        assert reader.is_alive() and not read
        ex.tracked.pop("S0")
    reader.join(5)
    assert read and [n for n, _ in read[0].pushes] == [f"S{i}" for i in range(1, 50)]

    stop = threading.Event()

    def churn() -> None:
        i = 50
        while not stop.is_set():
            with ex.lock:
                ex.tracked.pop(next(iter(ex.tracked)))
                ex.tracked[f"S{i}"] = _Tracked(f"S{i}", i)
            i += 1

    pusher = threading.Thread(target=churn)
    pusher.start()
    try:
        for _ in range(2000):
            assert len(metrics.read_executor(cast("Any", ex)).pushes) == 49
    finally:
        stop.set()
        pusher.join(5)


STATIC = files("smile.api") / "static"


def _serve() -> AbstractContextManager[str]:
    """The API's app (no services: the dashboard's files need none) on a free port."""
    return serve_app(create_app(cast("Any", None)), 18950 + PORT_SHIFT)


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()


def test_the_dashboard_is_package_data_served_without_a_token() -> None:
    page = STATIC.joinpath("dashboard.html").read_text(encoding="utf-8")
    linked = re.findall(r'(?:src|href)="static/([^"]+)"', page)
    shipped = sorted(f.name for f in STATIC.iterdir() if f.name != "dashboard.html")
    assert sorted(linked) == shipped and "dashboard.css" in linked, (linked, shipped)
    assert "http" not in page.split("-->", 1)[1]  # nothing from another site
    with _serve() as base:
        status, kind, body = _get(f"{base}/dashboard")
        assert status == 200 and kind.startswith("text/html") and body == page
        for name in linked:
            status, kind, body = _get(f"{base}/static/{name}")
            want = "text/css" if name.endswith(".css") else "javascript"
            assert status == 200 and want in kind, (name, kind)
            assert body == STATIC.joinpath(name).read_text(encoding="utf-8")
            assert "http://" not in body and "https://" not in body, name
            assert name.endswith(".css") or '"use strict";' in body, name


def test_the_dashboards_scripts_parse_together() -> None:
    """Each panel's script parses, and together (they share one global scope, loaded in the
    page's order) no name is declared twice."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the scripts' syntax is not checked")
    page = STATIC.joinpath("dashboard.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script src="static/([^"]+)"', page)
    assert scripts[0] == "common.js" and scripts[-1] == "main.js", scripts
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "dashboard.js"
        whole.write_text("\n".join(STATIC.joinpath(name).read_text(encoding="utf-8")
                                   for name in scripts))
        for path in [*(str(STATIC.joinpath(name)) for name in scripts), str(whole)]:
            run = subprocess.run([node, "--check", path], capture_output=True, text=True,
                                 check=False)
            assert run.returncode == 0, (path, run.stderr)


def test_no_token_begins_with_a_dash() -> None:
    """`smile plan --token T` takes a token beginning with `-` for an option; 2000 tokens
    drawn as `secrets.token_urlsafe` draws them would hold about 31 such."""
    tokens = [new_token() for _ in range(2000)]
    assert not [t for t in tokens if t.startswith("-")]
    assert len(set(tokens)) == len(tokens)
    assert min(len(t) for t in tokens) >= 43  # 32 random bytes
