"""Tweet traffic at a steady rate in a thread of this process: started, waited on or stopped,
and the rate it achieved read once it ends (`Traffic`). Every benchmark, experiment and demo
that drives the workload beside what it measures does it through this one class.

Must not: raise in the thread; a failure is kept and raised by `check` in the caller's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.errors import CloudError
from smile.workload.driver import WorkloadDriver

if TYPE_CHECKING:
    from smile.topology import Topology
    from smile.workload.driver import WorkloadReport

LONGEST_S = 6 * 3600.0
"""Traffic started without a length runs this long, unless stopped first."""


@dataclass
class _Outcome:
    """What one start's thread left: the driver's report, or what stopped it."""

    report: WorkloadReport | None = None
    failure: BaseException | None = None


class Traffic:
    """`Traffic(topology).start(rate)`: tweets at `rate` a second in a thread until `stop()`
    (or for `seconds`, then `join()`); `achieved_rate` once it has ended; `check()` raises
    if the traffic failed. A new `start` stops the traffic before it."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.rate = 0.0
        self.stopped = threading.Event()
        """Set by `stop`; a new one for each `start`."""
        self._thread: threading.Thread | None = None
        self._outcome = _Outcome()

    def start(self, rate: float, seconds: float = LONGEST_S, *,
              seed: int | None = None) -> Traffic:
        """Traffic at `rate` from now, for `seconds` at most; `seed` the tweets' (by default
        the rate's: the same rate writes the same tweets run after run)."""
        self.stop()
        self.rate, self.stopped, self._outcome = rate, threading.Event(), _Outcome()
        self._thread = threading.Thread(
            target=self._drive, args=(rate, seconds, int(rate) if seed is None else seed,
                                      self.stopped, self._outcome),
            daemon=True, name="traffic")
        self._thread.start()
        return self

    def _drive(self, rate: float, seconds: float, seed: int, stop: threading.Event,
               outcome: _Outcome) -> None:
        try:
            outcome.report = WorkloadDriver(self.topology, seed=seed).run(rate, seconds,
                                                                          stop=stop)
        except BaseException as exc:  # raised by `check`, in the caller's thread
            outcome.failure = exc

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds`, or less if the traffic is stopped meanwhile (then True)."""
        return self.stopped.wait(seconds)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the traffic to end by itself (`timeout`: at most that long)."""
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def stop(self, timeout: float = 60.0) -> None:
        self.stopped.set()
        self.join(timeout)

    @property
    def failure(self) -> BaseException | None:
        return self._outcome.failure

    @property
    def achieved_rate(self) -> float | None:
        """Tweets/s the traffic wrote, once it has ended (None while it runs)."""
        report = self._outcome.report
        return report.achieved_rate if report is not None else None

    def check(self) -> None:
        if self._outcome.failure is not None:
            raise CloudError(f"the traffic at {self.rate:g} tweets/s stopped: "
                             f"{self._outcome.failure}")
