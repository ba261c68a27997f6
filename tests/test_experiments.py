"""The experiments (`smile experiment NAME`): pure parts here; every experiment run at a tiny
scale on a cloud of its own under `-m slow`, its outputs checked to exist and be sane."""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from smile.errors import ConfigError
from smile.experiments.box_speed import BoxSpeed, at_speed, probe
from smile.experiments.capacity import capacity
from smile.experiments.context import Context
from smile.experiments.dollars import Dollars
from smile.experiments.fig05 import r_squared
from smile.experiments.live import Audited, Snapshot, moved_per_snapshot
from smile.experiments.registry import EXPERIMENTS, experiment
from smile.harness.output import Outputs
from smile.settings import Settings


def _read(out: Path, name: str) -> tuple[list[dict[str, str]], dict[str, Any]]:
    for suffix in ("csv", "png", "json"):
        path = out / f"{name}.{suffix}"
        assert path.exists() and path.stat().st_size > 0, path
    with (out / f"{name}.csv").open() as f:
        rows = list(csv.DictReader(f))
    text = (out / f"{name}.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    return rows, json.loads(text)


def test_r_squared_of_exact_and_noisy_lines() -> None:
    line = [(x, 2.0 + 0.5 * x) for x in (1.0, 10.0, 100.0)]
    assert r_squared(line, 2.0, 0.5) == pytest.approx(1.0)
    assert r_squared(line, 2.0, 0.0) < 0.0  # a flat line through a slope explains nothing
    assert r_squared([(1.0, 3.0), (2.0, 3.0)], 3.0, 0.0) == 1.0


def test_outputs_write_json_without_nan_and_csv_with_a_header(tmp_path: Path) -> None:
    out = Outputs("x", tmp_path / "r")
    out.json({"a": math.nan, "b": [math.inf, 1.0], "c": {"d": 2}})
    assert json.loads((tmp_path / "r" / "x.json").read_text()) == {
        "a": None, "b": [None, 1.0], "c": {"d": 2}}
    out.csv([{"k": 1, "v": "one"}, {"k": 2, "v": "two"}])
    assert (tmp_path / "r" / "x.csv").read_text().splitlines() == ["k,v", "1,one", "2,two"]


def test_dollars_add_up_and_are_priced_per_sharing_hour() -> None:
    d = Dollars(cpu=0.3, network=0.1, storage=0.05, penalty=0.05, model=0.25, seconds=1800.0,
                sharings=4, model_cpu=0.6)
    doc = d.to_json()
    assert doc["measured"] == pytest.approx(0.5)
    assert doc["measured_per_sharing_hour"] == pytest.approx(0.5 / 2.0)  # 4 × ½ h
    assert doc["model_over_measured"] == pytest.approx(0.5)
    assert doc["model_cpu_over_cpu"] == pytest.approx(2.0)
    assert Dollars(0, 0, 0, 0, 0, 0.0, 0).to_json()["model_over_measured"] is None
    # CPU seconds in place of wall seconds: the rest of the bill unchanged
    assert d.busy_measured is None and doc["cpu_busy"] is None
    busy = Dollars(cpu=0.3, network=0.1, storage=0.05, penalty=0.05, model=0.25,
                   seconds=1800.0, sharings=4, cpu_busy=0.1)
    assert busy.busy_measured == pytest.approx(0.3) and busy.to_json()["cpu_busy"] == 0.1


def test_tuples_moved_per_snapshot_sum_the_sharings_by_snapshot() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def snap(s: float, moved: int) -> Snapshot:
        return Snapshot(t0 + timedelta(seconds=s), 1.0, True, 0, 0, moved, 0.0, None)

    a = Audited("A", 10.0, (snap(0, 100), snap(5, 150), snap(10, 150)))
    b = Audited("B", 10.0, (snap(1, 0), snap(6, 30)))
    assert moved_per_snapshot([a, b]) == {1: 50 + 30, 2: 0}
    assert moved_per_snapshot([]) == {}
    assert a.violations == 0 and a.hours == pytest.approx(15 / 3600)


def test_the_box_speed_probe_counts_cpu_and_is_sampled_through_a_block() -> None:
    # ten times the work: far more CPU (not a timed test: the bound is an order of magnitude)
    assert 0 < probe(work=2_000) < probe(work=200_000)
    speed = BoxSpeed(period_s=0.05, work=2_000)
    assert speed.over(0.0, 1.0) is None  # nothing probed yet
    with speed:
        first = speed.samples[0][0]  # one on entering, at once
        while len(speed.samples) < 4:
            time.sleep(0.02)
    last = speed.samples[-1][0]  # and one on leaving
    times = [at for at, _ in speed.samples]
    assert times == sorted(times) and all(ms > 0 for _, ms in speed.samples)
    mss = [ms for _, ms in speed.samples]
    assert speed.over(first, last) == pytest.approx(sum(mss) / len(mss))
    assert speed.over(first, first) == mss[0]
    # a window between two probes takes the one nearest its middle
    assert speed.over(last + 10.0, last + 20.0) == mss[-1]
    assert speed.over(first - 20.0, first - 10.0) == mss[0]
    assert at_speed(3.0, 20.0, 10.0) == 1.5 and at_speed(None, 20.0, 10.0) is None
    assert at_speed(3.0, 20.0, None) is None


def test_unknown_and_missing_experiments_say_so() -> None:
    with pytest.raises(ConfigError, match="no experiment 'fig99'"):
        experiment("fig99")
    # every figure and table of §9 has a run (and the long run)
    assert {f"fig{i:02d}" for i in range(5, 15)} | {"table2", "throughput", "longrun",
                                                    "fig12live", "fig12pairs"} == set(EXPERIMENTS)
    assert all(e.name in e.writes for e in EXPERIMENTS.values())
    with pytest.raises(ConfigError, match="scale"):
        Context(Settings(), "huge", Path("."))


def test_the_cli_names_the_experiments_on_a_wrong_one() -> None:
    done = subprocess.run([sys.executable, "-m", "smile.cli.main", "experiment", "fig99"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "fig05" in done.stderr and "Traceback" not in done.stderr


def test_an_out_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """`--out` naming a file (or anything not writable) is refused at once, exit 2 with the
    path and no traceback, the file untouched: found after the run, its results were lost
    (a fig12live of twenty minutes said "the cloud stopped answering")."""
    taken = tmp_path / "results"
    taken.write_text("kept")
    done = subprocess.run([sys.executable, "-m", "smile.cli.main", "experiment", "fig12",
                           "--out", str(taken)], env={**os.environ, "COLUMNS": "500"},
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())  # the console wraps at its width
    assert f"--out {taken}" in said and "not a directory" in said
    assert "Traceback" not in said and "cloud" not in said
    assert taken.read_text() == "kept"


def test_the_hour_runs_at_80_percent_of_the_measured_capacity_or_says_why_not(
        tmp_path: Path) -> None:
    """`smile experiment longrun --hour` reads the capacity throughput.json holds, and so
    does the default run when there is one; without one (for the hour), with none held, or
    for another experiment it says so (exit 2, no traceback) and runs nothing."""
    from smile.experiments.long_run import GIVEN, plan

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "smile.cli.main", "experiment", *args],
                              check=False, capture_output=True, text=True, timeout=60)

    for args, says in ((("fig06", "--hour"), "scale of longrun only"),
                       (("longrun", "--hour", "--full"), "give one"),
                       (("fig06", "--minutes", "60"), "length of longrun only"),
                       (("longrun", "--minutes", "60", "--hour"), "not with --hour"),
                       (("longrun", "--minutes", "0", "--out", str(tmp_path)), "above 0"),
                       (("longrun", "--hour", "--out", str(tmp_path)), "run it first"),
                       (("fig06", "--rate", "320"), "rate of longrun only"),
                       (("longrun", "--rate", "0", "--hour"), "above 0"),
                       (("longrun", "--rate", "320", "--full"), "not with --full")):
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        assert says in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    # a rate given: no capacity needed, a name of its own, and the JSON says where it came from
    lr = plan(Context(Settings(), "hour", tmp_path, rate=320.0))
    sc = lr.scale
    assert (sc.rate, sc.window_s, sc.sla, lr.name, len(sc.sharings), lr.rate_from) == (
        320.0, 3600.0, "45", "longrun_hour_320tps", 25, GIVEN)
    (tmp_path / "throughput.json").write_text(json.dumps({"capacity": 0.0, "sla_s": 45.0}))
    done = cli("longrun", "--hour", "--out", str(tmp_path))
    assert done.returncode == 2 and "no capacity above 0" in done.stderr
    (tmp_path / "throughput.json").write_text(json.dumps({"capacity": 150.0, "sla_s": 45.0}))
    lr = plan(Context(Settings(), "hour", tmp_path))
    sc = lr.scale
    assert (sc.rate, sc.window_s, sc.sla, lr.name, len(sc.sharings)) == (
        120.0, 3600.0, "45", "longrun_hour", 25)
    # the default run: at 80% of it too, at SLA 10 s; without a capacity, at its fixed rate
    lr = plan(Context(Settings(), "small", tmp_path))
    sc = lr.scale
    assert (sc.rate, sc.sla, lr.name, len(sc.sharings)) == (120.0, "10", "longrun", 10)
    assert lr.rate_from.startswith("0.8 x")
    # and as long as asked (`--minutes`), under a name of its own, sampled 60 times
    lr = plan(Context(Settings(), "small", tmp_path, 60.0))
    sc = lr.scale
    assert (sc.rate, sc.sla, lr.name, len(sc.sharings), sc.window_s, lr.every_s) == (
        120.0, "10", "longrun_60min", 10, 3600.0, 60.0)
    (tmp_path / "throughput.json").unlink()
    lr = plan(Context(Settings(), "small", tmp_path))
    assert (lr.scale.rate, lr.rate_from) == (200.0, "fixed")
    lr = plan(Context(Settings(), "small", tmp_path, 20.0, 500.0))
    assert (lr.scale.rate, lr.name, lr.scale.window_s, lr.rate_from) == (
        500.0, "longrun_20min_500tps", 1200.0, GIVEN)


def test_fig12_and_fig13_from_the_optimizer(tmp_path: Path) -> None:
    """Pure (Table 1's catalog model): hill-climbing saves, and plumbing removes vertices."""
    doc = experiment("fig12").run(Context(Settings(), "tiny", tmp_path))
    rows12, f12 = _read(tmp_path, "fig12")
    rows13, f13 = _read(tmp_path, "fig13")
    assert [r["plan"] for r in rows12] == ["DPT", "DPD", "DPT+HC", "DPD+HC"]
    assert f12["costs"]["DPD+HC"] <= f12["costs"]["DPD"] and not f12["measured"]
    assert 0.0 <= f12["saving"] < 1.0 and doc["fig12"] == pytest.approx(f12["saving"], abs=1e-4)
    steps = [r for r in rows13 if r["plan"] == "DPD"]
    vertices = [int(r["vertices"]) for r in steps]
    assert len(steps) == f13["plumbings_applied"] + 2  # separate, merged, one per plumbing
    assert vertices[1] == f13["vertices"][1] and vertices[-1] == f13["vertices"][2]
    assert f13["removed"] == doc["fig13"] == f13["removed_by_merging"] + f13[
        "removed_by_plumbing"]
    assert all(b <= a for a, b in itertools.pairwise(vertices[1:]))


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.spark
def test_every_live_experiment_at_a_tiny_scale(tmp_path: Path) -> None:
    """Every live experiment (fig05, fig06/fig07, fig09, fig11, fig12live, fig14,
    table2/fig10, throughput/fig08 and the long run) on a cloud of their own: the files
    exist, the numbers are sane, and the violations are the auditor's."""
    from urllib.parse import urlparse

    from tests.fix_api import live_smile

    with live_smile("experiments", 800, 3, 5000) as live:
        port = urlparse(live.url).port
        assert port is not None
        settings = live.settings.model_copy(update={"api_port": port})
        ctx = Context(settings, "tiny", tmp_path)
        done = {name: experiment(name).run(ctx)
                for name in ("fig05", "fig06", "fig09", "fig11", "fig12live", "fig14",
                             "table2", "throughput", "longrun")}
        assert live.call("GET", "/plan/options")[1] == {  # put back as they were
            "plumbing": True, "merge": True, "algorithm": "cheapest", "share_pushes": True}
    _check_fig05(tmp_path, done)
    _check_fig06(tmp_path, done)
    _check_table2(tmp_path, done)
    _check_fig09(tmp_path, done)
    _check_throughput(tmp_path, done)
    _check_fig12live(tmp_path, done)
    _check_fig14(tmp_path, done)
    _check_longrun(tmp_path, done)
    _check_fig11(tmp_path, done)


def _check_fig05(tmp_path: Path, done: dict[str, Any]) -> None:
    """Fig. 5: a line per PostgreSQL operator and Spark's; the view-Union flat."""
    rows, f05 = _read(tmp_path, "fig05")
    pg = {k: v for k, v in f05["lines"].items() if v["path"] == "postgresql"}
    assert set(pg) == {"delta_to_rel", "copy_delta", "union", "union_copy", "join_pg"}
    assert "join_spark" in f05["lines"]
    for kind, line in pg.items():  # more tuples take longer, and a line says most of it
        if kind in f05["flat"]:
            continue
        assert line["b_us_per_tuple"] > 0 and line["r2"] > 0.5, (kind, line)
        mine = [r for r in rows if r["operator"] == kind]
        assert float(mine[-1]["seconds"]) > float(mine[0]["seconds"])
    assert set(f05["flat"]) == {"union"}  # the view moves no tuples: less than copying them
    last = {r["operator"]: float(r["seconds"]) for r in rows}  # the largest size of each
    assert last["union"] < last["union_copy"], last


def _check_fig06(tmp_path: Path, done: dict[str, Any]) -> None:
    """Figs. 6 and 7: every snapshot a row; S1 pushed; the measured dollars."""
    rows, f06 = _read(tmp_path, "fig06")
    assert f06["sharings"] >= 2 and f06["snapshots"] == len(rows) > 0
    assert all(float(r["staleness_s"]) >= 0 for r in rows)
    assert f06["violations"] == sum(r["sla_ok"] == "False" for r in rows)
    assert done["fig06"]["fig06"] == f06
    pushes, f07 = _read(tmp_path, "fig07")
    assert f07["pushes"] == len(pushes) >= 1  # S1 (SLA 10 s at this scale) was pushed
    assert all(float(p["advance_s"]) > 0 for p in pushes)
    assert f06["dollars"]["measured"] > 0 and f06["dollars"]["model_cpu"] > 0


def _check_table2(tmp_path: Path, done: dict[str, Any]) -> None:
    """Table 2 and Fig. 10: the mix before and after the others; each cost at its moment."""
    t2_rows, t2 = _read(tmp_path, "table2")
    assert set(t2["settings"]) == {"10", "60", "mix"} and done["table2"]["table2"] == t2
    assert t2["order"] == ["mix", "10", "60", "mix"]  # the mix before and after the others
    for sla, s in t2["settings"].items():
        mine = [r for r in t2_rows if r["sla"] == sla]
        runs = sorted({int(r["run"]) for r in mine})
        assert s["runs"] == len(runs) == (2 if sla == "mix" else 1)
        assert s["admitted"] == sum(int(r["run"]) == runs[0] for r in mine) > 0
        assert s["sharing_hours"] > 0
        assert s["violations"] == sum(int(r["violations"]) for r in mine)
    first_ms = float(next(r["box_ms"] for r in t2_rows if r["run"] == "1"))
    for r in t2_rows:  # CPU dollars at the first run's speed of the box (None CSVs as "")
        ms, cpu, steady = (r["box_ms"], r["dollars_per_data_hour_cpu"],
                           r["dollars_per_data_hour_steady"])
        assert float(ms) > 0 and (cpu == "") == (steady == ""), r
        if steady and r["run"] == "1":  # the reference: as measured
            assert float(steady) == pytest.approx(float(cpu))
        elif steady:  # more CPU $ than measured where the box was faster, fewer where slower
            assert (float(steady) - float(cpu)) * (first_ms - float(ms)) >= -1e-12, r
    rows, f10 = _read(tmp_path, "fig10")
    mixed = {r["sharing"] for r in t2_rows if r["sla"] == "mix"}
    assert {r["sharing"] for r in f10["sharings"]} == mixed and done["table2"]["fig10"] == f10
    assert [r["sharing"] for r in rows] == [r["sharing"] for r in f10["sharings"]]
    for r in f10["sharings"]:  # the uniform run at its mix SLA is the one compared with
        for tail in ("", "_cpu", "_steady"):  # by wall, CPU and CPU at the first run's speed
            col = f"dollars_per_data_hour{tail}"
            uniform = next((float(x[col]) for x in t2_rows if x["sharing"] == r["sharing"]
                            and x["sla"] == f"{r['sla_s']:g}" and x[col]), None)
            assert r[f"uniform{tail}"] == uniform
            assert (r[f"change_pct{tail}"] is None) == (not uniform or r[f"mix{tail}"] is None)
            before, after = r[f"mix_runs{tail}"]  # the mix at the uniform run's moment
            if before is not None and after is not None and uniform:  # lies between
                assert min(before, after) <= r[f"mix{tail}"] <= max(before, after), r


def _check_fig09(tmp_path: Path, done: dict[str, Any]) -> None:
    """Fig. 9: each sharing's pushes moved tuples, together and alone."""
    rows, f09 = _read(tmp_path, "fig09")
    assert [r["sharing"] for r in f09["sharings"]] == [r["sharing"] for r in rows]
    assert rows and done["fig09"] == f09
    for r in f09["sharings"]:  # each one's pushes moved tuples, together and alone
        assert r["together_per_s"] is not None and r["together_per_s"] > 0, r
        assert r["alone_per_s"] is not None and r["alone_per_s"] > 0, r
        assert r["reduction_pct"] is not None and r["reduction_pct"] < 100.0


def _check_throughput(tmp_path: Path, done: dict[str, Any]) -> None:
    """The throughput and Fig. 8: one round, held as the auditor says."""
    rows, tp = _read(tmp_path, "throughput")
    assert len(rows) == len(tp["rounds"]) == 1 and done["throughput"] == tp
    only = tp["rounds"][0]
    assert only["held"] == (only["admitted"] == 3 and only["violations"] == 0)
    assert only["dollars"]["cpu"] > 0 and only["dollars"]["model_cpu"] > 0
    assert only["achieved_rate"] > 0.5 * only["rate"]
    assert only["box_ms"] > 0 and float(rows[0]["box_ms"]) == only["box_ms"]
    rows, f08 = _read(tmp_path, "fig08")
    assert [float(r["rate"]) for r in rows] == [only["rate"]] == [p["rate"] for p in f08["points"]]


def _check_fig12live(tmp_path: Path, done: dict[str, Any]) -> None:
    """Fig. 12 live: each plan ran the sharings; ratios to DPD at its moment."""
    rows, f12 = _read(tmp_path, "fig12live")
    assert done["fig12live"] == f12 and [r["plan"] for r in rows] == [
        "DPT", "DPD", "DPD merged", "DPT+HC", "DPD+HC", "DPD+HC shared", "DPD again"]
    by = {p["plan"]: p for p in f12["plans"]}
    for p in f12["plans"]:  # each plan ran the sharings and cost what the machines did
        assert p["admitted"] == 3 and p["data_s"] > 0 and p["per_data_hour"] > 0, p
        assert p["dollars"]["cpu"] > 0 and p["vertices"] > 0 and p["edges"] > 0
        # CPU seconds: at most the box's two cores through each push's wall time
        assert 0 < p["dollars"]["cpu_busy"] <= 2 * p["dollars"]["cpu"], p["dollars"]
        assert 0 < p["busy_per_data_hour"] <= 2 * p["per_data_hour"]
        # the operators' CPU seconds at the speed of the box in the first run, the rest as is
        ref, ops = f12["plans"][0]["box_ms"], p["operators_busy_per_data_hour"]
        assert p["box_ms"] > 0 and 0 < ops <= p["busy_per_data_hour"]
        assert p["steady_per_data_hour"] == pytest.approx(
            ops * ref / p["box_ms"] + p["busy_per_data_hour"] - ops)
    # separate plans hold at least the vertices of the merged one (whether DPD's plans of S2,
    # S4 and S5 share a join depends on the rates measured at their admissions)
    assert by["DPD"]["vertices"] >= by["DPD merged"]["vertices"]
    assert by["DPT"]["algorithms"] == {"DPT": 3} and by["DPD merged"]["plumbings"] == 0
    first, again = by["DPD"], by["DPD again"]  # DPD ran second and last: taken in between
    assert first["middle_s"] < by["DPD+HC"]["middle_s"] < again["middle_s"]
    for key, got in (("per_data_hour", f12["dpd_hc_over_dpd"]),
                     ("busy_per_data_hour", f12["busy"]["dpd_hc_over_dpd"]),
                     ("steady_per_data_hour", f12["steady"]["dpd_hc_over_dpd"])):
        share = ((by["DPD+HC"]["middle_s"] - first["middle_s"])
                 / (again["middle_s"] - first["middle_s"]))
        dpd = first[key] + share * (again[key] - first[key])
        assert got == pytest.approx(by["DPD+HC"][key] / dpd, abs=1e-3)
    assert [p["share_pushes"] for p in f12["plans"]] == [False] * 5 + [True, False]
    assert f12["dpd_again_over_dpd"]["steady"] == pytest.approx(
        again["steady_per_data_hour"] / first["steady_per_data_hour"], abs=1e-3)
    assert f12["dpd_hc_shared_over_dpd_hc"] == pytest.approx(
        by["DPD+HC shared"]["per_data_hour"] / by["DPD+HC"]["per_data_hour"], abs=1e-3)


def _check_fig14(tmp_path: Path, done: dict[str, Any]) -> None:
    """Fig. 14: the phases grow, SMILE's daemons ran, the whole run in the CSV."""
    rows, f14 = _read(tmp_path, "fig14")
    phases = f14["phases"]
    assert done["fig14"] == f14 and len(phases) == 2
    assert phases[1]["users_per_mv"] > phases[0]["users_per_mv"]
    assert all(p["snapshots"] > 0 and p["reads_per_s"] > 0 for p in phases), phases
    assert f14["violations"] == sum(p["violations"] for p in phases)
    assert f14["read_errors"] == 0, f14["read_error_sample"]  # within the consumer's limit
    for p in phases:  # SMILE's daemons, read from /proc: the agents and capturers ran
        daemons = p["smile_daemons"]
        assert set(daemons) == {"agent", "capture", "serve"}, daemons
        assert all(v >= 0 for fig in daemons.values() for v in fig.values()), daemons
        assert daemons["agent"]["cores"] > 0 and daemons["capture"]["cores"] > 0, daemons
    watched = [r for r in rows if r["sharing"] == "S4"]
    assert watched and all(float(r["staleness_s"]) >= 0 for r in watched)
    whole = f14["whole_run"]  # the phases and what came after them: the CSV's S4 rows
    assert whole["snapshots"] == len(watched) >= sum(p["snapshots"] for p in phases)
    assert whole["violations"] == sum(r["sla_ok"] == "False" for r in watched)
    assert whole["violations"] >= f14["violations"]
    assert whole["max_staleness_s"] == pytest.approx(
        max(float(r["staleness_s"]) for r in watched))


def _check_longrun(tmp_path: Path, done: dict[str, Any]) -> None:
    """The long run: a sample of every series each time, and the box's probes."""
    rows, lr = _read(tmp_path, "longrun")
    assert done["longrun"] == lr and lr["admitted"] >= 1
    samples = {r["t_s"] for r in rows if r["kind"] != "box_ms"}
    assert len(samples) >= 5
    probes = [float(r["value"]) for r in rows if r["kind"] == "box_ms"]  # the cores' speed
    assert probes and all(ms > 0 for ms in probes) and "box_ms:probe" not in lr["series"]
    assert lr["box_ms"] == {"first": round(probes[0], 3), "last": round(probes[-1], 3),
                            "min": round(min(probes), 3), "max": round(max(probes), 3)}
    for kind in ("memory_mb", "shared_mb", "delta_rows", "slot_wal_bytes"):  # one per sample
        for what in {r["what"] for r in rows if r["kind"] == kind}:
            assert len([r for r in rows if r["kind"] == kind and r["what"] == what]) == len(
                samples), (kind, what)
    own = lr["series"]["memory_mb:postgres m1"]
    assert own["max"] > 0 and own["temp_buffers_mb"] == 8.0
    # by connection: the agent's own, and what a connection grew by is its rows' last - first
    agent = [(float(r["t_s"]), float(r["value"])) for r in rows
             if r["kind"] == "connection_mb" and r["what"] == "m1 smile-agent-m1"]
    assert agent and all(v > 0 for _, v in agent)
    assert all(v > 0 for v in own["grew_in"].values())
    if "smile-agent-m1" in own["grew_in"]:
        assert own["grew_in"]["smile-agent-m1"] == pytest.approx(agent[-1][1] - agent[0][1],
                                                                 abs=0.11)
    cache = lr["series"]["shared_mb:postgres m1"]  # the buffer cache, within what it has
    assert cache["max"] > 0 and cache["within_cap"] == (cache["max"] <= cache["cap"])
    assert {"delta_rows:m1", "slot_wal_bytes:m1"} <= set(lr["series"])
    assert lr["violations_per_sharing_hour"] is not None
    assert lr["all_flat"] == (not lr["not_flat"])
    assert set(lr["reasons"]) == set(lr["rejected"]) and all(lr["reasons"].values())


def _check_fig11(tmp_path: Path, done: dict[str, Any]) -> None:
    """Fig. 11: capacity the last rate held, on 1 and 2 machines and with copies."""
    rows, f11 = _read(tmp_path, "fig11")
    assert done["fig11"] == f11 and [p["machines"] for p in f11["points"]] == [1, 2]
    by_n = f11["by_sharings"]  # Fig. 11c on 2 machines: S1 and S5, then with two copies
    assert [(p["sharings"], p["machines"]) for p in by_n] == [(2, 2), (4, 2)]
    assert by_n[0]["rounds"] == f11["points"][-1]["rounds"]  # 11a's point, not run twice
    assert len(rows) == sum(len(p["rounds"]) for p in f11["points"]) + len(by_n[1]["rounds"])
    assert {r["figure"] for r in rows} == {"11a", "11c"}
    for p in f11["points"] + by_n:  # capacity is the last rate held before the first not held
        n = p.get("sharings", 2)
        assert p["capacity"] == capacity(p["rounds"]) and p["rounds"]
        assert all(r["held"] == (r["admitted"] == n and r["violations"] == 0)
                   for r in p["rounds"])
        held = [r for r in p["rounds"] if r["held"]]  # Fig. 11b: tuples moved at capacity
        assert p["tuples_per_s"] == (held[-1]["tuples_per_s"] if held else 0.0)
        assert all(r["tuples_per_s"] > 0 for r in held), p


@pytest.mark.slow
@pytest.mark.services
@pytest.mark.spark
def test_fig12pairs_at_a_tiny_scale(tmp_path: Path) -> None:
    """DPD, DPD+HC shared, DPD on a cloud of its own: the shared run's ratio is its dollars
    over DPD's interpolated at its moment, in every figure, and the planner is put back."""
    from urllib.parse import urlparse

    from tests.fix_api import live_smile

    with live_smile("pairs", 820, 3, 5000) as live:
        port = urlparse(live.url).port
        assert port is not None
        settings = live.settings.model_copy(update={"api_port": port})
        done = experiment("fig12pairs").run(Context(settings, "tiny", tmp_path))
        assert live.call("GET", "/plan/options")[1] == {
            "plumbing": True, "merge": True, "algorithm": "cheapest", "share_pushes": True}
    rows, doc = _read(tmp_path, "fig12pairs")
    assert done == doc and doc["pairs"] == 1 and doc["violations"] == 0
    assert [r["plan"] for r in rows] == ["DPD", "DPD+HC shared", "DPD"]
    assert [int(r["run"]) for r in rows] == [1, 2, 3] and doc["same_sharings_admitted"]
    before, shared, after = doc["runs"]
    assert before["middle_s"] < shared["middle_s"] < after["middle_s"]
    for figure, key in (("wall", "per_data_hour"), ("cpu", "busy_per_data_hour"),
                        ("steady", "steady_per_data_hour"), ("work", "work_per_data_hour")):
        assert all(r[key] > 0 and r["admitted"] == 3 for r in doc["runs"]), figure
        share = (shared["middle_s"] - before["middle_s"]) / (
            after["middle_s"] - before["middle_s"])
        base = before[key] + (after[key] - before[key]) * share
        assert doc[figure]["ratios"] == [pytest.approx(shared[key] / base, abs=1e-3)]
        assert doc[figure]["median"] == doc[figure]["min"] == doc[figure]["max"]
        assert doc["dpd_next_over_previous"][figure] == [
            pytest.approx(after[key] / before[key], abs=1e-3)]
    assert len(doc["box_ms"]) == 3 and all(ms > 0 for ms in doc["box_ms"])
