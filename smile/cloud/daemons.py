"""SMILE's own long-running processes in the local cloud: one capturer and one agent per
machine, started detached with `smile capture run` / `smile agent run`, and the executor with
the API (`smile serve`, no machine), their pids in
`STATE_DIR/procs/`, their logs in `STATE_DIR/logs/`.

Must not: know what the processes do.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smile.cloud.procs import read_pidfile, stop_pid

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
    def pidfile(self) -> Path:
        return self.state_dir / "procs" / f"{self.name}.pid"

    def pid(self) -> int | None:
        return read_pidfile(self.pidfile)

    def start(self) -> None:
        if self.pid() is not None:
            return
        for d in ("procs", "logs"):
            (self.state_dir / d).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "smile.cli.main", "--state-dir", str(self.state_dir),
                self.kind, *(["run", "--machine", self.machine] if self.machine else [])]
        with (self.state_dir / "logs" / f"{self.name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.pidfile.write_text(f"{proc.pid}\n")

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            stop_pid(pid, timeout=10)
        self.pidfile.unlink(missing_ok=True)
