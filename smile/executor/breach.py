"""Predicting an SLA breach before it happens (pure): given what the executor knows of a
sharing now, when will its staleness pass its SLA if nothing changes?

Staleness grows one second a second until a push completes, so the breach comes `SLA −
staleness` seconds from now unless a push lands first with the MV back within the SLA. The lazy
rule (`lazy.py`) plans exactly that; a breach is predicted when what it relies on is gone:

- **a machine is silent**: a machine the sharing's plan needs has not sent a heartbeat for
  `SILENT_S` (they come every second), or `SILENT_NEAR_S` once the SLA is closer than that
  wait: no push can reach the MV until it is back;
- **a push is overdue**: the push under way has taken more than `OVERDUE` times what was
  expected of it (its critical path under the current model, plus the delay its pushes have
  shown) and `OVERDUE_MARGIN_S` more;
- **pushes are too slow**: the fastest push possible — now, the whole backlog, its critical
  path plus the delay its pushes have been learnt to take beyond it — would
  land past the SLA by more than `MARGIN` of it (the push under way: what is left of it);
  a critical path that grows a second or more per second of updates never catches up.

A machine over its bound slows the pushes that wait for its cores: that shows in the learnt
delay (it rises at once with a slower push), which is what the prediction charges; the
machine is named in the reason. Its load itself is not charged again: on a machine whose agent
was stopped, the pushes that waited out the stop count as operator seconds and keep it "over
its bound" for minutes after it is back, and a push time scaled by that ratio raised alerts
that no violation followed (4 between the ten SIGSTOPs of `tests/test_alerts_slow.py`, 2 in
its CPU spike).

`predict` says when and why; `Alarm.step` turns predictions into raised and cleared alerts:
raised at the first prediction whose breach is within the SLA from now, cleared once no breach
has been predicted for `CLEAR_S`.

Must not: read clocks, the executor or any database: everything is handed in.
"""

from __future__ import annotations

from dataclasses import dataclass

SILENT_S = 2.5
"""A machine silent this long (heartbeats come every second) cannot be counted on: sooner
than the scheduler's `clock.UNREACHABLE_S` (5 s), which decides not to send pushes."""
SILENT_NEAR_S = 1.5
"""Once less than `SILENT_S` + 1 s is left before the SLA, waiting `SILENT_S` would announce
the breach after it: a machine silent this long (one and a half heartbeats) counts then."""
OVERDUE = 2.0
OVERDUE_MARGIN_S = 1.0
MARGIN = 0.1
"""A push predicted to land past the SLA by less than this share of it is what the lazy rule
and the learnt delay correct on their own: no alert."""
CLEAR_S = 3.0


@dataclass(frozen=True)
class Signals:
    """What the executor knows of one sharing now."""

    sla_s: float
    staleness_s: float
    """The sources' clock (as last heard, aged) against TS(MV)."""
    backlog_s: float
    """MINTS(SRC) − TS(MV): the updates a push now would carry."""
    cp0_s: float
    """CP(0) of the sharing in D under the current model."""
    cp_slope: float
    """Seconds of critical path per second of updates."""
    delay_s: float = 0.0
    """How much longer than CP its pushes have taken (`lazy.learn_delay`)."""
    pushing_s: float | None = None
    """How long the push under way has run; None: none is."""
    silent: tuple[tuple[str, float], ...] = ()
    """(machine, seconds since its last heartbeat) of the machines its plan needs that have
    been silent for at least `SILENT_NEAR_S`."""
    over_bound: tuple[tuple[str, float], ...] = ()
    """(machine, sustained load ÷ bound) of those of them over their bound."""

    def push_s(self, backlog_s: float) -> float:
        """What a push of `backlog_s` seconds of updates is expected to take."""
        return self.cp0_s + self.cp_slope * max(0.0, backlog_s) + self.delay_s


@dataclass(frozen=True)
class Prediction:
    breach_in_s: float | None
    """Seconds from now until the staleness passes the SLA; None: no breach predicted."""
    reason: str = ""

    def alarming(self, sla_s: float) -> bool:
        """The predicted breach falls within the SLA from now."""
        return self.breach_in_s is not None and self.breach_in_s <= sla_s


def predict(s: Signals) -> Prediction:
    """When the sharing will breach its SLA if nothing changes (module docstring).

    >>> base = dict(sla_s=10.0, staleness_s=4.0, backlog_s=4.0, cp0_s=0.2, cp_slope=0.05)
    >>> predict(Signals(**base))
    Prediction(breach_in_s=None, reason='')
    >>> predict(Signals(**base, silent=(("m2", 3.0),)))
    Prediction(breach_in_s=6.0, reason='machine m2 silent for 3.0 s: no push can reach the MV')
    >>> predict(Signals(**base, pushing_s=5.0)).reason
    'the push under way has run 5.0 s, 0.4 s expected'
    >>> predict(Signals(**(base | {"cp_slope": 1.5}))).reason
    'its critical path grows 1.50 s per second of updates: pushes cannot catch up'
    >>> p = predict(Signals(**(base | {"staleness_s": 8.0, "delay_s": 3.0}),
    ...                     over_bound=(("m1", 2.0),)))
    >>> p.breach_in_s, p.reason
    (2.0, 'a push now would land at 11.4 s of staleness (3.4 s: m1 at 2.0x its bound), \
past the SLA of 10 s')
    """
    slack = max(0.0, s.sla_s - s.staleness_s)
    bar = SILENT_S if slack >= SILENT_S + 1.0 else SILENT_NEAR_S
    silent = [(m, q) for m, q in s.silent if q >= bar]
    if silent:
        m, quiet = max(silent, key=lambda x: x[1])
        return Prediction(slack, f"machine {m} silent for {quiet:.1f} s: no push can reach "
                                 "the MV")
    if s.cp_slope >= 1.0:
        return Prediction(slack, f"its critical path grows {s.cp_slope:.2f} s per second of "
                                 "updates: pushes cannot catch up")
    if s.pushing_s is not None:
        # the push under way carries at most the backlog it has now
        expected = s.push_s(s.backlog_s)
        if s.pushing_s > OVERDUE * expected + OVERDUE_MARGIN_S:
            return Prediction(slack, f"the push under way has run {s.pushing_s:.1f} s, "
                                     f"{expected:.1f} s expected")
        lands = s.staleness_s + max(0.0, expected - s.pushing_s)
    else:
        lands = s.staleness_s + s.push_s(s.backlog_s)
    if lands <= s.sla_s * (1 + MARGIN):
        return Prediction(None)
    took = s.push_s(s.backlog_s)
    why = ", ".join(f"{m} at {r:.1f}x its bound" for m, r in s.over_bound)
    return Prediction(slack, f"a push now would land at {lands:.1f} s of staleness "
                             f"({took:.1f} s{': ' + why if why else ''}), past the SLA of "
                             f"{s.sla_s:g} s")


@dataclass
class Alarm:
    """One sharing's alert: raised, and since when no breach has been predicted."""

    raised: Prediction | None = None
    """The prediction that raised it (None: not raised)."""
    raised_at: float = 0.0
    calm_since: float | None = None

    def step(self, p: Prediction, sla_s: float, now: float) -> str | None:
        """Take the prediction made at `now`; 'raised' or 'cleared' when the alert changes.

        >>> a = Alarm()
        >>> a.step(Prediction(3.0, "x"), 10.0, 0.0), a.step(Prediction(None), 10.0, 1.0)
        ('raised', None)
        >>> a.step(Prediction(None), 10.0, 4.5)
        'cleared'
        """
        if p.alarming(sla_s):
            self.calm_since = None
            if self.raised is None:
                self.raised, self.raised_at = p, now
                return "raised"
            self.raised = p  # the latest reason and lead
            return None
        if self.raised is None:
            return None
        if self.calm_since is None:
            self.calm_since = now
        if now - self.calm_since >= CLEAR_S:
            self.raised, self.calm_since = None, None
            return "cleared"
        return None
