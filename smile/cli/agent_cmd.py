"""`smile agent run --machine M`: the agent of one machine (foreground; SIGTERM stops it).

Must not: hold agent logic (`smile.agent.process` does); it keeps no state of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from smile.cli.arg_types import count, positive

if TYPE_CHECKING:
    import argparse

    from smile.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = sub.add_parser("agent", help="the agent of a machine")
    asub = agent.add_subparsers(dest="agent_command", required=True, metavar="ACTION")
    run = asub.add_parser("run", help="run the agent (foreground)")
    run.add_argument("--machine", required=True)
    run.add_argument("--heartbeat", type=positive, default=1.0, help="seconds between heartbeats")
    run.add_argument("--retention", type=positive, default=5.0,
                     help="seconds between prunings of the machine's intermediate deltas")
    run.add_argument("--push-workers", type=count, default=None,
                     help="pushes carried out at once, each on connections of its own "
                          "(default: 3)")
    run.add_argument("--session-uses", type=count, default=None,
                     help="commands a worker's connections serve before they are opened "
                          "again: a PostgreSQL backend keeps something of every temporary "
                          "table a push makes (default: 1000)")
    run.set_defaults(run=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    import logging
    import signal
    import threading

    from smile.agent.process import PUSH_WORKERS, Agent
    from smile.db import SESSION_USES
    from smile.deploy.machines import live_topology
    from smile.deploy.spark_jobs import SparkJoins
    from smile.spark import spark_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    topology = live_topology(settings)
    spark = SparkJoins({m.name: m.dsn for m in topology.machines},
                       lambda: spark_session(settings))  # started by the first Spark join
    agent = Agent(args.machine, topology, args.heartbeat, spark, args.retention,
                  PUSH_WORKERS if args.push_workers is None else args.push_workers,
                  SESSION_USES if args.session_uses is None else args.session_uses,
                  settings.reader_nice)
    log = logging.getLogger("smile.agent")
    while not stop.is_set():  # it keeps nothing in memory: on trouble, start over
        try:
            agent.run(stop)
        except KeyboardInterrupt:
            stop.set()
        except Exception as exc:
            log.warning("agent of %s stopped (%s); starting again in 1 s", args.machine, exc)
            stop.wait(1)
    return 0
