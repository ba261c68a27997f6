"""`smile` entry point: builds the argument parser from the command modules and runs one.

Every SmileError becomes a one-line message on stderr and exit status 2 (never a traceback);
settings that fail validation likewise.

Must not: do work itself; each command module calls into the package.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError
from rich.console import Console

from smile.cli import (
    agent_cmd,
    bench_cmd,
    capture_cmd,
    cloud_cmd,
    consumer_cmd,
    data_cmd,
    demo_cmd,
    experiment_cmd,
    machine_cmd,
    plan_cmd,
    serve_cmd,
    workload_cmd,
)
from smile.errors import SmileError
from smile.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Sequence

COMMANDS = (serve_cmd, demo_cmd, cloud_cmd, consumer_cmd, data_cmd, workload_cmd, capture_cmd,
            plan_cmd, agent_cmd, bench_cmd, experiment_cmd, machine_cmd)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="smile",
        description="SMILE: data sharing with staleness SLAs across PostgreSQL machines",
    )
    parser.add_argument(
        "--state-dir",
        help="local cloud state directory (default: $SMILE_STATE_DIR or /var/tmp/smile)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    overrides = {}
    if getattr(args, "state_dir", None):
        overrides["state_dir"] = args.state_dir
    return Settings(**overrides)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    err = Console(stderr=True)
    try:
        settings = settings_from(args)
        code: int = args.run(args, settings)
        return code
    except SmileError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
        return 2
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        err.print(f"[bold red]error:[/] bad settings: {problems}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
