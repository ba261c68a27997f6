"""SMILE's own long-running processes in the local cloud: one capturer and one agent per
machine (`smile capture run` / `smile agent run`), and the executor with the API (`smile
serve`, no machine), each a program of the cloud's supervisord (`supervisor.py`), which
restarts it when it dies; their logs in `STATE_DIR/logs/`.

Must not: know what the processes do.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.cloud.supervisor import ProgramState, Supervisor

if TYPE_CHECKING:
    from pathlib import Path

KINDS = ("capture", "agent")


@dataclass(frozen=True)
class Daemon:
    kind: str
    machine: str
    state_dir: Path

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.machine}" if self.machine else self.kind

    @property
    def supervisor(self) -> Supervisor:
        return Supervisor(self.state_dir)

    def pid(self) -> int | None:
        return self.state().pid

    def state(self) -> ProgramState:
        """Its pid when running, supervisord's state for it, restarts and last exit."""
        return self.supervisor.state(self.name)

    def start(self) -> None:
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "smile.cli.main", "--state-dir", str(self.state_dir),
                self.kind, *(["run", "--machine", self.machine] if self.machine else [])]
        self.supervisor.add(self.name, argv, self.state_dir / "logs" / f"{self.name}.log")

    def stop(self) -> None:
        self.supervisor.remove(self.name)
