"""Breach prediction (pure) and the webhook call it leads to: what is predicted and when an
alert is raised and cleared, over the space of signals (Hypothesis); a webhook that fails is
called again with backoff, signed each time, against a real local HTTP server."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import threading
import time
from typing import Any, ClassVar

from hypothesis import given
from hypothesis import strategies as st

from smile.executor.breach import (
    CLEAR_S,
    MARGIN,
    SILENT_NEAR_S,
    SILENT_S,
    Alarm,
    Prediction,
    Signals,
    predict,
)
from smile.executor.webhooks import Hook, call

seconds = st.floats(min_value=0.0, max_value=120.0, allow_nan=False)


@st.composite
def signals(draw: st.DrawFn) -> Signals:
    sla = draw(st.floats(min_value=0.5, max_value=120.0))
    return Signals(
        sla_s=sla, staleness_s=draw(seconds), backlog_s=draw(seconds),
        cp0_s=draw(st.floats(min_value=0.0, max_value=5.0)),
        cp_slope=draw(st.floats(min_value=0.0, max_value=2.0)),
        delay_s=draw(st.floats(min_value=0.0, max_value=sla / 2)),
        pushing_s=draw(st.none() | seconds),
        silent=draw(st.sampled_from([(), (("m2", SILENT_S + 0.5),)])),
        over_bound=draw(st.sampled_from([(), (("m1", 1.5),)])))


@given(signals())
def test_a_predicted_breach_comes_when_the_staleness_reaches_the_sla(s: Signals) -> None:
    p = predict(s)
    if p.breach_in_s is not None:
        assert p.breach_in_s == max(0.0, s.sla_s - s.staleness_s)
        assert p.alarming(s.sla_s) and p.reason


@given(signals())
def test_nothing_is_predicted_while_a_push_now_lands_within_the_sla(s: Signals) -> None:
    quiet = Signals(s.sla_s, s.staleness_s, s.backlog_s, s.cp0_s, min(s.cp_slope, 0.99),
                    s.delay_s)
    lands = quiet.staleness_s + quiet.push_s(quiet.backlog_s)
    assert (predict(quiet).breach_in_s is None) == (lands <= quiet.sla_s * (1 + MARGIN))


@given(signals())
def test_a_silent_machine_always_predicts_a_breach(s: Signals) -> None:
    silent = Signals(s.sla_s, s.staleness_s, s.backlog_s, s.cp0_s, s.cp_slope, s.delay_s,
                     s.pushing_s, (("m3", SILENT_S),))
    assert "m3 silent" in predict(silent).reason


def test_near_the_sla_a_shorter_silence_counts() -> None:
    late = Signals(sla_s=20.0, staleness_s=18.0, backlog_s=17.0, cp0_s=0.2, cp_slope=0.01,
                   pushing_s=0.5, silent=(("m2", SILENT_NEAR_S),))
    assert predict(late).breach_in_s == 2.0
    early = Signals(**{**late.__dict__, "staleness_s": 6.0, "backlog_s": 5.0})
    assert predict(early).breach_in_s is None


def test_an_overdue_push_predicts_a_breach_a_running_one_does_not() -> None:
    base = Signals(sla_s=10.0, staleness_s=3.0, backlog_s=2.0, cp0_s=0.5, cp_slope=0.1)
    assert predict(Signals(**{**base.__dict__, "pushing_s": 0.5})).breach_in_s is None
    overdue = predict(Signals(**{**base.__dict__, "pushing_s": 3.0}))
    assert overdue.breach_in_s == 7.0 and "under way" in overdue.reason


def test_an_alert_is_raised_once_and_cleared_after_a_calm_spell() -> None:
    alarm, risky, calm = Alarm(), Prediction(4.0, "m2 silent"), Prediction(None)
    assert alarm.step(risky, 10.0, 0.0) == "raised"
    assert alarm.step(risky, 10.0, 0.5) is None  # raised once
    assert alarm.step(calm, 10.0, 1.0) is None
    assert alarm.step(risky, 10.0, 2.0) is None  # calm broken: the clock starts again
    assert alarm.step(calm, 10.0, 3.0) is None
    assert alarm.step(calm, 10.0, 3.0 + CLEAR_S - 0.1) is None
    assert alarm.step(calm, 10.0, 3.0 + CLEAR_S) == "cleared"
    far = Prediction(30.0, "slow")  # a breach beyond the SLA from now: no alert yet
    assert Alarm().step(far, 10.0, 0.0) is None


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Fails its first two calls with a 503, then takes them."""

    calls: ClassVar[list[tuple[float, bool]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        stamp = self.headers["X-Smile-Timestamp"]
        want = "sha256=" + hmac.new(b"s" * 16, stamp.encode() + b"." + body,
                                    hashlib.sha256).hexdigest()
        _Flaky.calls.append((time.monotonic(), want == self.headers["X-Smile-Signature"]))
        self.send_response(503 if len(_Flaky.calls) <= 2 else 200)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def test_a_failing_webhook_is_called_again_with_backoff() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = Hook(1, f"http://127.0.0.1:{server.server_address[1]}/", "s" * 16)
        assert call(hook, b'{"state": "raised"}', backoff_s=0.1)
        times = [t for t, _ in _Flaky.calls]
        assert len(times) == 3 and all(ok for _, ok in _Flaky.calls)
        assert times[1] - times[0] >= 0.1 and times[2] - times[1] >= 0.2  # doubling
        gone = Hook(2, "http://127.0.0.1:9/", "s" * 16)  # nobody listens: given up
        assert not call(gone, b"{}", attempts=2, backoff_s=0.01)
    finally:
        server.shutdown()


def test_the_alerting_rules_read_metrics_smile_exports() -> None:
    import re
    from pathlib import Path

    import yaml

    from smile.api.metrics import ExecutorReading, Snapshot, render
    from smile.costmodel.time_model import TimeModel
    from smile.executor.alerts import Alerter, prometheus
    from smile.executor.machine_load import MachineLoad

    audit = dict.fromkeys(("staleness_s", "sla_s", "violations", "tuples_moved",
                           "late_tuples", "work_s", "resource_cost", "penalty_cost"), 1.0)
    snap = Snapshot((), {"s1": audit}, (("m1", MachineLoad("m1", 1, 1, 1, 1, (), ())),),
                    ExecutorReading((), 0, (("current", TimeModel()),)))
    alerter = Alerter.__new__(Alerter)  # its state only: no executor, nothing started
    alerter.lock, alerter.active, alerter.recent, alerter.raised_total = (
        threading.Lock(), {}, [], 0)
    exported = render(snap) + prometheus(alerter, ["s1"])
    root = Path(__file__).resolve().parent.parent
    rules = yaml.safe_load((root / "docs" / "alerts.yml").read_text())
    for expr in (r["expr"] for g in rules["groups"] for r in g["rules"]):
        for metric in re.findall(r"\bsmile_[a-z_]+", expr):
            assert re.search(rf"^{metric}{{", exported, re.M), metric
