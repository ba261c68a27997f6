"""The package as a user gets it: a wheel built from the tree, installed in a fresh virtual
environment, runs `smile --help` and sets up capture's schema on a real PostgreSQL from the SQL
it ships (nothing read from the repository)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

if TYPE_CHECKING:
    from tests.fix_cloud import CloudHandle

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[1]

SETUP = """
import sys
import psycopg
import smile
from smile.delta_capture.registry import ensure_capture_schema
assert smile.__file__.startswith(sys.prefix), smile.__file__
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    ensure_capture_schema(conn)
"""


def _run(args: list[str], cwd: Path, timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _fresh_venv(path: Path, wheel: Path, work: Path) -> Path:
    """A virtual environment with the wheel installed and nothing else, that finds the
    dependencies in the running environment's site-packages (a .pth file: no download)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)], work)
    python = path / "bin" / "python"
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                work).strip()
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "smile_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)], work)
    return python


def test_the_wheel_installs_and_sets_up_capture(cloud: CloudHandle, tmp_path: Path) -> None:
    started = time.monotonic()
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "smile", src / "smile",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
          str(tmp_path / "dist"), str(src)], tmp_path, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("smile-*.whl")
    python = _fresh_venv(tmp_path / "venv", wheel, tmp_path)

    assert "usage: smile" in _run([str(tmp_path / "venv" / "bin" / "smile"), "--help"], tmp_path)

    dsn = cloud.topology.machines[0].dsn
    name = f"wheel_{time.monotonic_ns()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        fresh = make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})
        _run([str(python), "-c", SETUP, fresh], tmp_path)
        with psycopg.connect(fresh) as conn:
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = '_smile'").fetchall()}
        assert tables >= {"vertex_ts", "capture_progress", "captured_relations",
                          "capture_state", "delta_readers", "delta_pruned"}, tables
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    assert time.monotonic() - started < 60
