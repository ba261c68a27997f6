"""pytest plugin: one real local cloud (PostgreSQL clusters + ActiveMQ) for the whole session.

The cloud lives in a fresh directory under /var/tmp (the postgres user must traverse its
parents), on free ports away from a developer's own cloud, with fsync off; it is stopped and
deleted at the end. Set SMILE_TEST_EXTERNAL=1 to test against the machines, catalog and broker
that SMILE_* variables (or SMILE_CONFIG) name instead of starting a cloud.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from smile.cloud.local import LocalCloud
from smile.settings import Settings
from smile.topology import Topology, resolve_topology

if TYPE_CHECKING:
    from collections.abc import Iterator

MACHINES = 3


@dataclass(frozen=True)
class CloudHandle:
    settings: Settings
    topology: Topology
    local: LocalCloud | None


def fresh_state_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    path.chmod(0o755)
    return path


PORT_SHIFT = int(os.environ.get("SMILE_TEST_PORT_SHIFT", "0"))
"""Moves every test cloud's ports, so that two test runs on one host (two checkouts) do not
meet: with a shift s (a multiple of 1000, up to 6000), PostgreSQL from 20000 + 2s and STOMP
from 21000 + 2s, below the ephemeral ports."""


def _ports(port_offset: int) -> tuple[int, int]:
    if PORT_SHIFT == 0:
        return 56000 + port_offset, 62613 + port_offset
    base = 20000 + 2 * PORT_SHIFT
    return base + port_offset, base + 1000 + port_offset


def throwaway_settings(state_dir: Path, port_offset: int = 0) -> Settings:
    """Settings for a throw-away cloud in `state_dir` on ports away from the defaults."""
    pg, stomp = _ports(port_offset)
    return Settings(
        state_dir=state_dir,
        base_port=pg,
        stomp_port=stomp,
        durable=False,
        machines=[],
        catalog_dsn=None,
        broker_url=None,
    )


@pytest.fixture(scope="session")
def cloud() -> Iterator[CloudHandle]:
    if os.environ.get("SMILE_TEST_EXTERNAL") == "1":
        settings = Settings()
        yield CloudHandle(settings, resolve_topology(settings), None)
        return
    settings = throwaway_settings(fresh_state_dir("smile-test-"))
    local = LocalCloud(settings)
    try:
        status = local.up(MACHINES, daemons=False)  # tests run their own capturers
        assert status.healthy, status.to_json()
        yield CloudHandle(settings, resolve_topology(settings), local)
    finally:
        local.down(purge=True)


NO_JIT = "-c jit=off"
"""Connection options for a test's own sessions that run operators many times on a few rows
(property tests): PostgreSQL's JIT compiles each of their INSERT … SELECTs — whose estimated
cost nested loops turned off inflate past `jit_above_cost` — for about half a second, several
times what the statement then takes. The rows are the same with or without it."""

LOADED_TWEETS = 100_000
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def keep_logs(state_dir: Path, label: str) -> None:
    """Copy a test cloud's logs to artifacts/ before it is purged, for post-mortems."""
    import shutil

    dest = ARTIFACTS / label
    dest.mkdir(parents=True, exist_ok=True)
    for log in [*state_dir.glob("*.log"), *state_dir.glob("pg/*.log")]:
        shutil.copy(log, dest / log.name)


@pytest.fixture(scope="session")
def loaded(cloud: CloudHandle) -> CloudHandle:
    """The session cloud with the dataset loaded (100k tweets, default placement), once."""
    from smile.dataset.load import load_dataset
    from smile.dataset.placement import default_placement

    placement = default_placement([m.name for m in cloud.topology.machines])
    load_dataset(cloud.settings, cloud.topology, placement, tweets=LOADED_TWEETS, replace=True)
    return cloud


@pytest.fixture(scope="session")
def scratch() -> Iterator[CloudHandle]:
    """A one-machine cloud of its own, for tests that restart or crash PostgreSQL."""
    settings = throwaway_settings(fresh_state_dir("smile-scratch-"), port_offset=200)
    local = LocalCloud(settings)
    try:
        assert local.up(1, daemons=False).healthy
        yield CloudHandle(settings, resolve_topology(settings), local)
    finally:
        keep_logs(settings.state_dir, "scratch")
        local.down(purge=True)
