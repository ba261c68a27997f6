"""`smile serve` (executor, auditor and REST API in one process, foreground), and `smile up` /
`smile down` (the local cloud with its capturers and agents, plus `smile serve` detached).

Must not: hold executor or API logic.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from smile.cli.arg_types import positive

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="executor, snapshot auditor and REST API (foreground)")
    serve.add_argument("--mode", choices=("lazy", "eager"), default="lazy",
                       help="lazy pushes (paper §8.2) or a push every second")
    serve.add_argument("--audit-every", type=positive, default=5.0, help="auditor period (s)")
    serve.add_argument("--maintenance", choices=("auto", "incremental", "recompute"),
                       help="how pushes keep relation vertices: the path the time model "
                       "prices cheaper per push (auto, docs/design/recompute.md), always by "
                       "their deltas, or always recomputed (default: the `maintenance` "
                       "setting, SMILE_MAINTENANCE, itself auto)")
    serve.set_defaults(run=_serve)
    up = sub.add_parser("up", help="start everything: cloud, capturers, agents, executor, API")
    up.add_argument("--machines", type=int, default=3,
                    help="local machines (0: catalog, broker and API only; attach databases "
                         "with `smile machine add`)")
    up.set_defaults(run=_up)
    down = sub.add_parser("down", help="stop everything `smile up` started")
    down.add_argument("--purge", action="store_true", help="also delete all data and logs")
    down.set_defaults(run=_down)


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import logging
    import signal

    import uvicorn

    from smile.api.app import create_app
    from smile.api.services import Services, sharing_service
    from smile.costmodel.time_model import TimeModel
    from smile.deploy.machines import live_topology
    from smile.executor.alerts import Alerter
    from smile.executor.auditor import Auditor
    from smile.executor.capture_watch import CaptureWatch
    from smile.executor.consumers import ensure_admin
    from smile.executor.rates import RateMonitor
    from smile.executor.runtime import Executor
    from smile.executor.store import CatalogStore

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    topology = live_topology(settings)  # with the machines attached so far
    # an admin exists and its token is in <state_dir>/admin.token before the API answers
    ensure_admin(topology.catalog_dsn, settings.state_dir)
    model = TimeModel()
    calibrated = settings.state_dir / "time_model.json"
    if calibrated.exists():  # `smile calibrate` wrote one: start from it
        import json

        model = TimeModel.from_json(json.loads(calibrated.read_text())["time_model"])
    maintenance = args.maintenance or settings.maintenance
    executor = Executor(topology, model, mode=args.mode,
                        maintenance=None if maintenance == "auto" else maintenance)
    executor.start()
    auditor = Auditor(topology, args.audit_every)
    auditor.start()
    rates = RateMonitor(topology)
    rates.start()
    services = Services(topology, executor, rates, max_load=settings.max_load,
                        growth_horizon_s=settings.growth_horizon_s,
                        state_dir=settings.state_dir)

    def replan(machine: str, qualified: str, why: str) -> object:
        store = CatalogStore(topology.catalog_dsn)
        try:
            return sharing_service(services, store).replan(machine, qualified, why)
        finally:
            store.close()

    # a table's capture stopped or a column read was lost: its readers fail or are re-planned
    watch = CaptureWatch(topology, executor, replan=replan)
    watch.start()
    services.alerter = Alerter(topology, executor, over_bound=services.over_bound)
    services.alerter.start()
    store = CatalogStore(topology.catalog_dsn)
    try:  # sharings a stopped API left half-installed: admitted or rejected, not stuck
        for row in sharing_service(services, store).settle_interrupted():
            logging.getLogger("smile.serve").warning(
                "sharing %s (%d) was left installing: now %s", row.name, row.id, row.status)
    finally:
        store.close()
    app = create_app(services)
    server = uvicorn.Server(uvicorn.Config(app, host=settings.api_host, port=settings.api_port,
                                           log_level="warning"))
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    try:
        server.run()
    finally:
        services.alerter.close()
        watch.close()
        rates.close()
        auditor.close()
        executor.close()
    return 0


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from smile.cli.cloud_cmd import print_status
    from smile.cloud.daemons import Daemon
    from smile.cloud.local import LocalCloud
    from smile.cloud.procs import port_open
    from smile.errors import CloudError

    status = LocalCloud(settings).up(args.machines, daemons=True)
    if settings.machines:  # SMILE_MACHINES: checked and supervised as attached ones are
        from smile.executor.machines import supervise_static
        from smile.topology import resolve_topology

        supervise_static(resolve_topology(settings).machines, settings.state_dir)
    serve = Daemon("serve", "", settings.state_dir)
    serve.start()
    deadline = time.monotonic() + 60
    while not port_open(settings.api_host, settings.api_port):
        if time.monotonic() > deadline or serve.pid() is None:
            raise CloudError(f"the API did not come up; see {settings.state_dir}/logs/serve.log")
        time.sleep(0.2)
    print_status(status, False)
    url = f"http://{settings.api_host}:{settings.api_port}"
    print(f"API {url} (OpenAPI at {url}/docs) · dashboard {url}/dashboard · the admin's "
          f"token is in {settings.state_dir / 'admin.token'}")
    return 0


def _down(args: argparse.Namespace, settings: Settings) -> int:
    from smile.cloud.daemons import Daemon
    from smile.cloud.local import LocalCloud

    Daemon("serve", "", settings.state_dir).stop()
    LocalCloud(settings).down(purge=args.purge)
    print("stopped")
    return 0
