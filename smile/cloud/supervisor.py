"""The local cloud's daemons under supervisord (the `supervisor` package): one supervisord per
state directory, started by the first daemon that needs it, stopped by `down`. Each daemon is
a program of its own (`STATE_DIR/supervisor/programs/NAME.conf`), restarted when it exits: at
once if it had run for `START_S`, else after a pause that grows by a second at each attempt
(supervisord's backoff), up to `RETRIES` attempts. How often each one was restarted and how it
last ended are read from supervisord's log.

supervisord and the daemons it starts run at `DAEMONS_NICE`, and so does its session's
scheduling group where the kernel groups by session: the daemons (agents, capturers, the
executor) need little CPU but need it at once, and on one box they share the cores with the
clusters and with whatever consumers run there.

Must not: know what the daemons do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import subprocess
import sys
import time
import xmlrpc.client
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervisor.xmlrpc import SupervisorTransport

from smile.cloud.procs import pid_alive, prioritize_session, read_pidfile
from smile.errors import CloudError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

log = logging.getLogger("smile.cloud")

DAEMONS_NICE = -10
"""The nice value of supervisord, of every daemon it starts (inherited) and of its session's
scheduling group (`procs.prioritize_session`). At 0 the session of all SMILE's daemons had one
share of the box like each busy cluster: under Fig. 14's closed-loop readers the agents'
threads waited 2–10 s for a core in every second they ran 0.03 s, and S4's pushes (0.175 s
as planned) took 7–36 s; at -10 they took 0.7–5.1 s (experiments/README.md, Fig. 14). A
negative value needs root (CAP_SYS_NICE); without it the daemons run at the default priority,
and starting them logs why."""
START_S = 2
"""A daemon that exits sooner than this after its start counts as failing to start."""
RETRIES = 100
_EXITED = re.compile(r"exited: (\S+) \((.*)\)\s*$")


@dataclass(frozen=True)
class ProgramState:
    pid: int | None
    """None unless running (or starting)."""
    state: str
    """supervisord's name for it: RUNNING, STARTING, BACKOFF, EXITED, FATAL, STOPPED …"""
    restarts: int
    """Times it exited without being asked to (and was started again)."""
    last_exit: str
    """How it last ended, e.g. 'terminated by SIGKILL; not expected', or ''."""


class Supervisor:
    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / "supervisor"
        self.conf = self.dir / "supervisord.conf"
        self.sock = self.dir / "supervisor.sock"
        self.log = self.dir / "supervisord.log"
        self.pidfile = self.dir / "supervisord.pid"
        self.programs = self.dir / "programs"

    def _proxy(self) -> Any:
        transport = SupervisorTransport(None, None, f"unix://{self.sock}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def running(self) -> bool:
        if not self.sock.exists():
            return False
        try:
            return bool(self._proxy().getState()["statename"] == "RUNNING")
        except (OSError, xmlrpc.client.Error):
            return False

    def _ensure(self) -> None:
        if self.running():
            return
        self.programs.mkdir(parents=True, exist_ok=True)
        self.log.unlink(missing_ok=True)  # restarts are counted from this supervisord's start
        self.conf.write_text(
            f"[unix_http_server]\nfile={_quote(self.sock)}\nchmod=0700\n\n"
            f"[supervisord]\nlogfile={_quote(self.log)}\npidfile={_quote(self.pidfile)}\n"
            f"childlogdir={_quote(self.dir)}\nloglevel=info\n\n"
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
            f"[supervisorctl]\nserverurl=unix://{_quote(self.sock)}\n\n"
            "[include]\nfiles = programs/*.conf\n")
        try:  # supervisord daemonizes: this returns once it has forked
            # `nice -n` adds to this process's own nice value: DAEMONS_NICE whoever runs `up`
            step = DAEMONS_NICE - os.getpriority(os.PRIO_PROCESS, 0)
            subprocess.run(["nice", "-n", str(step), sys.executable, "-m",
                            "supervisor.supervisord", "-c", str(self.conf)],
                           check=True, capture_output=True, timeout=30)
        except (subprocess.SubprocessError, OSError) as exc:
            raise CloudError(f"cannot start supervisord: {exc}; see {self.log}") from exc
        deadline = time.monotonic() + 15
        while not self.running():
            if time.monotonic() > deadline:
                raise CloudError(f"supervisord did not come up; see {self.log}")
            time.sleep(0.1)
        pid = read_pidfile(self.pidfile)
        why_not = prioritize_session(pid, DAEMONS_NICE) if pid else "no pid file"
        if why_not:
            log.info("SMILE's daemons keep the default CPU priority: %s", why_not)

    def add(self, name: str, argv: Sequence[str], logfile: Path) -> None:
        """Run `argv` as program `name` (logging to `logfile`) and keep it running."""
        self._ensure()
        (self.programs / f"{name}.conf").write_text(
            f"[program:{name}]\ncommand={_quote(shlex.join(argv))}\nautostart=true\n"
            f"autorestart=true\nstartsecs={START_S}\nstartretries={RETRIES}\n"
            "stopsignal=TERM\nstopwaitsecs=10\nstopasgroup=true\nkillasgroup=true\n"
            f"redirect_stderr=true\nstdout_logfile={_quote(logfile)}\n"
            "stdout_logfile_maxbytes=50MB\nstdout_logfile_backups=2\n")
        proxy = self._proxy()
        added, changed, _ = proxy.reloadConfig()[0]
        if name in changed:  # e.g. another interpreter: the new command from now on
            with contextlib.suppress(xmlrpc.client.Fault):
                proxy.stopProcess(name, True)
            proxy.removeProcessGroup(name)
            added = [name]
        if name in added:
            proxy.addProcessGroup(name)  # autostart: started now
        elif self.state(name).pid is None:
            with contextlib.suppress(xmlrpc.client.Fault):  # starting already
                proxy.startProcess(name, True)

    def remove(self, name: str) -> None:
        """Stop program `name` and forget it."""
        (self.programs / f"{name}.conf").unlink(missing_ok=True)
        if not self.running():
            return
        proxy = self._proxy()
        with contextlib.suppress(xmlrpc.client.Fault):  # not running, or unknown
            proxy.stopProcess(name, True)
        with contextlib.suppress(xmlrpc.client.Fault):
            proxy.removeProcessGroup(name)

    def state(self, name: str) -> ProgramState:
        restarts, last = self._exits(name)
        if not self.running():
            return ProgramState(None, "STOPPED", restarts, last)
        try:
            info = self._proxy().getProcessInfo(name)
        except xmlrpc.client.Fault:
            return ProgramState(None, "UNKNOWN", restarts, last)
        live = info["statename"] in ("RUNNING", "STARTING") and info["pid"]
        pid = int(info["pid"]) if live else None
        return ProgramState(pid, str(info["statename"]), restarts, last)

    def _exits(self, name: str) -> tuple[int, str]:
        """(unexpected exits, how it last ended) from supervisord's log."""
        count, last = 0, ""
        if not self.log.exists():
            return count, last
        for line in self.log.read_text(errors="replace").splitlines():
            m = _EXITED.search(line)
            if m and m.group(1) == name:
                last = m.group(2)
                count += "not expected" in last
        return count, last

    def shutdown(self) -> None:
        """Stop every program and supervisord itself."""
        pid = read_pidfile(self.pidfile)
        if self.running():
            with contextlib.suppress(OSError, xmlrpc.client.Error):
                self._proxy().shutdown()
        deadline = time.monotonic() + 30
        while pid is not None and pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def _quote(value: object) -> str:
    """A value for supervisord's configuration, where `%` starts an expansion."""
    return str(value).replace("%", "%%")
