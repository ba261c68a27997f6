"""A live SMILE for REST tests: a throw-away local cloud with its capturers and agents, a small
dataset, and `smile serve` (executor, auditor, API) as its own process, with the admin's token
that `smile serve` wrote."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from smile.api import client
from smile.cloud.local import LocalCloud
from smile.cloud.procs import free_port
from smile.dataset.load import load_dataset
from smile.dataset.placement import default_placement
from smile.topology import Topology, resolve_topology
from tests.fix_cloud import ARTIFACTS, fresh_state_dir, keep_logs, throwaway_settings

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from smile.settings import Settings


@dataclass
class Live:
    settings: Settings
    topology: Topology
    url: str
    env: dict[str, str]
    serve: subprocess.Popen[bytes]
    token: str = ""
    """The admin's."""
    serve_args: tuple[str, ...] = ()
    """Options of `smile serve` (e.g. `--audit-every`), at every start."""

    def start_serve(self) -> None:
        log = (self.settings.state_dir / "serve-test.log").open("ab")
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "smile.cli.main", "serve", *self.serve_args], env=self.env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.call(self.url, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert self.serve.poll() is None, "smile serve exited"
            assert time.monotonic() < deadline, "the API did not come up"
            time.sleep(0.2)
        self.token = (self.settings.state_dir / "admin.token").read_text().strip()

    def call(self, method: str, path: str, body: Any = None,
             token: str | None = None) -> tuple[int, Any]:
        """As the admin unless another `token` is given ("" for none)."""
        return client.call(self.url, method, path, body,
                           token=self.token if token is None else token)


@contextmanager
def serve_app(app: Any, port: int) -> Iterator[str]:
    """`app` served by uvicorn in a thread, on `port` or the next free one; its base URL."""
    import threading

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(port),
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def live_smile(label: str, port_offset: int, machines: int, tweets: int,
               prepare: Callable[[Topology], None] | None = None,
               serve_args: tuple[str, ...] = ()) -> Iterator[Live]:
    """`tweets` of the dataset loaded (0: none, and no Spark), then `prepare` run on the
    machines, then `smile serve` with `serve_args`."""
    settings = throwaway_settings(fresh_state_dir(f"smile-{label}-"), port_offset=port_offset)
    local = LocalCloud(settings)
    handle: Live | None = None
    try:
        assert local.up(machines, daemons=True).healthy
        topology = resolve_topology(settings)
        if tweets:
            load_dataset(settings, topology,
                         default_placement([m.name for m in topology.machines]),
                         tweets=tweets, replace=True)
        if prepare is not None:
            prepare(topology)
        port = free_port(18000 + port_offset)
        env = os.environ | {"SMILE_STATE_DIR": str(settings.state_dir),
                            "SMILE_API_PORT": str(port), "SPARK_LOCAL_IP": "127.0.0.1"}
        handle = Live(settings, topology, f"http://127.0.0.1:{port}", env,
                      subprocess.Popen(["true"]), serve_args=serve_args)
        handle.start_serve()
        yield handle
    finally:
        if handle is not None and handle.serve.poll() is None:
            handle.serve.terminate()
            handle.serve.wait(20)
        dest = ARTIFACTS / label
        dest.mkdir(parents=True, exist_ok=True)
        for log in [*settings.state_dir.glob("logs/*.log"), *settings.state_dir.glob("*.log")]:
            shutil.copy(log, dest / log.name)
        keep_logs(settings.state_dir, label)
        local.down(purge=True)
