"""The lazy push rule (paper §8.2) on its own: pure, no services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from smile.executor.lazy import push_target

if TYPE_CHECKING:
    from collections.abc import Callable


def linear(a: float, b: float) -> Callable[[float], float]:
    return lambda x: a + b * x


def test_waits_while_early_and_pushes_everything_once_due() -> None:
    cp = linear(0.2, 0.05)
    # staleness 1 s + 0.25 s push: far below 0.8 · 5 s
    assert push_target(mv=0.0, min_src=1.0, max_src=1.0, sla_s=5.0, cp=cp) is None
    # staleness 3.8 s + 0.39 s push ≥ 4 s: push now, to the newest complete timestamp
    assert push_target(mv=0.0, min_src=3.8, max_src=3.8, sla_s=5.0, cp=cp) == 3.8


def test_a_long_backlog_is_cut_to_what_fits_in_the_sla() -> None:
    cp = linear(0.1, 0.5)  # half a second of work per second of updates
    t = push_target(mv=0.0, min_src=4.0, max_src=4.0, sla_s=5.0, cp=cp)
    assert t is not None and 0 < t < 4.0
    assert 4.0 + cp(t) - 0.0 <= 5.0 + 1e-9  # the push completes within the SLA
    assert 4.0 + cp(t + 0.01) > 5.0  # and takes as much as fits


def test_nothing_to_push_when_sources_are_not_ahead() -> None:
    assert push_target(mv=5.0, min_src=5.0, max_src=9.0, sla_s=1.0, cp=linear(0, 0)) is None


def test_already_late_catches_up_as_far_as_possible() -> None:
    assert push_target(mv=0.0, min_src=20.0, max_src=20.0, sla_s=5.0,
                       cp=linear(0.1, 0.01)) == 20.0


@given(mv=st.floats(0, 100), ahead=st.floats(0.001, 50), spread=st.floats(0, 2),
       sla=st.floats(0.5, 30), a=st.floats(0, 0.4), b=st.floats(0, 0.9))
def test_a_chosen_target_is_fresh_enough_and_in_range(mv: float, ahead: float, spread: float,
                                                      sla: float, a: float, b: float) -> None:
    cp = linear(a, b)
    min_src = mv + ahead
    max_src = min_src + spread
    t = push_target(mv=mv, min_src=min_src, max_src=max_src, sla_s=sla, cp=cp)
    if t is None:  # waiting is only allowed while a full push would end well within the SLA
        assert max_src + cp(min_src - mv) - mv < 0.8 * sla
        return
    assert mv < t <= min_src
    fits = max_src + cp(t - mv) - mv <= sla + 1e-6
    late_anyway = max_src + cp(0.001) - mv > sla
    assert fits or (late_anyway and t == min_src)
