"""Settings and topology resolution: env vars, config file, and the errors users see."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from smile.errors import ConfigError
from smile.settings import Settings
from smile.topology import resolve_topology

if TYPE_CHECKING:
    from pathlib import Path


def test_env_names_external_machines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    machines = [{"name": "m1", "dsn": "postgresql://a@h1/db"}, {"name": "m2", "dsn": "host=h2"}]
    monkeypatch.setenv("SMILE_MACHINES", json.dumps(machines))
    monkeypatch.setenv("SMILE_CATALOG_DSN", "postgresql://c@h3/cat")
    monkeypatch.setenv("SMILE_BROKER_URL", "stomp://h4:61613")
    monkeypatch.setenv("SMILE_SPARK_MASTER", "spark://h5:7077")
    monkeypatch.setenv("SMILE_STATE_DIR", str(tmp_path))
    settings = Settings()
    topo = resolve_topology(settings)
    assert topo.source == "external"
    assert [m.name for m in topo.machines] == ["m1", "m2"]
    assert topo.machine("m2").dsn == "host=h2"
    assert topo.catalog_dsn == "postgresql://c@h3/cat"
    assert topo.broker_url == "stomp://h4:61613"
    assert settings.spark_master == "spark://h5:7077"
    with pytest.raises(ConfigError, match=r"unknown machine 'm9'.*m1, m2"):
        topo.machine("m9")


def test_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conf = tmp_path / "smile.toml"
    conf.write_text(
        'broker_url = "stomp://b:1234"\ncatalog_dsn = "host=c"\n'
        '[[machines]]\nname = "m1"\ndsn = "host=a"\n'
    )
    monkeypatch.setenv("SMILE_CONFIG", str(conf))
    monkeypatch.setenv("SMILE_STATE_DIR", str(tmp_path))
    topo = resolve_topology(Settings())
    assert topo.machines[0].dsn == "host=a" and topo.broker_url == "stomp://b:1234"
    # environment beats the file
    monkeypatch.setenv("SMILE_BROKER_URL", "stomp://env:1")
    assert resolve_topology(Settings()).broker_url == "stomp://env:1"


def test_bad_values_are_refused() -> None:
    with pytest.raises(ValidationError, match="stomp://"):
        Settings(broker_url="tcp://x:1")
    with pytest.raises(ValidationError):
        Settings(machines=[{"name": "Bad Name", "dsn": "x"}])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="auto"):
        Settings(maintenance="sometimes")  # type: ignore[arg-type]


def test_the_maintenance_path_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """`smile serve` without `--maintenance` takes the `maintenance` setting, so that
    SMILE_MAINTENANCE chooses it for the API `smile up` starts."""
    assert Settings().maintenance == "auto"
    monkeypatch.setenv("SMILE_MAINTENANCE", "incremental")
    assert Settings().maintenance == "incremental"


def test_no_cloud_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="smile cloud up"):
        resolve_topology(Settings(state_dir=tmp_path, machines=[]))


def test_external_machines_need_catalog_and_broker(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, machines=[{"name": "m1", "dsn": "host=a"}])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="SMILE_CATALOG_DSN"):
        resolve_topology(settings)


def test_duplicate_machine_names(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=tmp_path, catalog_dsn="host=c", broker_url="stomp://b:1",
        machines=[{"name": "m1", "dsn": "host=a"}, {"name": "m1", "dsn": "host=b"}],  # type: ignore[list-item]
    )
    with pytest.raises(ConfigError, match="unique"):
        resolve_topology(settings)
