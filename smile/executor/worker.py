"""A background thread that runs until closed: the life of the executor's side workers (the
snapshot auditor, the rate monitor), written once.

Must not: know what the work is; subclasses say it in `run`, checking `self.stop`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class Worker(ABC):
    name = "worker"

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True, name=self.name)
        self.thread.start()

    def close(self, wait_s: float = 10.0) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(wait_s)

    @abstractmethod
    def run(self) -> None:
        """The work, until `self.stop` is set."""
