"""How fast this box's cores are through a run: the CPU seconds a fixed piece of pure-Python
work takes (`probe`, the best of a few tries), taken every `PERIOD_S` by a thread beside the
run (`BoxSpeed`).

A VM's host gives its cores more or less speed from one quarter of an hour to the next: the
same loop, in a process of its own, has taken a sixth longer 20 minutes later, and stayed so
with the cloud down and the box idle, while a Union of 0 rows took a fifth more CPU. A run's
CPU seconds times `ref_ms ÷ ms` (`at_speed`) are those of a box that kept the speed it had
when `ref_ms` was measured.

Must not: measure anything but its own thread's CPU seconds. The probe touches no memory
beyond a few objects and waits for no core, lock or I/O, so those seconds are the core's
speed and not the load beside it.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

PERIOD_S = 15.0
WORK = 200_000
"""Iterations of the probe's loop: about 8 ms of CPU on this box."""
TRIES = 3


def probe(tries: int = TRIES, work: int = WORK) -> float:
    """The CPU milliseconds of `work` iterations of a fixed loop on this thread, the best of
    `tries` (a try that the scheduler or another thread's GIL interrupted costs more)."""
    best = float("inf")
    for _ in range(tries):
        began, total = time.thread_time(), 0
        for i in range(work):
            total += i * i
        best = min(best, time.thread_time() - began)
    return best * 1000.0


class BoxSpeed:
    """`with BoxSpeed() as speed:` probes every `period_s` (and once on entering) until the
    block ends; `speed.over(t0, t1)` is the mean probe between two `time.monotonic()`s."""

    def __init__(self, period_s: float = PERIOD_S, work: int = WORK) -> None:
        self.period_s, self.work = period_s, work
        self.samples: list[tuple[float, float]] = []
        """(time.monotonic(), probe ms), in order."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BoxSpeed:
        self._take()
        self._thread = threading.Thread(target=self._run, daemon=True, name="box-speed")
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.period_s + 5.0)
        self._take()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._take()

    def _take(self) -> None:
        self.samples.append((time.monotonic(), probe(work=self.work)))

    def over(self, t0: float, t1: float) -> float | None:
        """The mean probe (ms) taken between `t0` and `t1`, or the one nearest to that span's
        middle if none was (None before any probe)."""
        inside = [ms for at, ms in self.samples if t0 <= at <= t1]
        if inside:
            return sum(inside) / len(inside)
        if not self.samples:
            return None
        middle = (t0 + t1) / 2.0
        return min(self.samples, key=lambda s: abs(s[0] - middle))[1]


def at_speed(value: float | None, ms: float | None, ref_ms: float | None) -> float | None:
    """`value`, CPU seconds (or their dollars) measured while the probe took `ms`, as they
    would have been at the speed at which it took `ref_ms`; None if one is missing.

    >>> at_speed(12.0, 16.0, 14.0)
    10.5
    >>> at_speed(12.0, None, 14.0) is None
    True
    """
    if value is None or not ms or not ref_ms:
        return None
    return value * ref_ms / ms
