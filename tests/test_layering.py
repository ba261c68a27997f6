"""The package layering the code keeps (docs/design/overview.md): no import cycle between the
packages of `smile/`, the executor and the API never open a database themselves (the catalog
store aside), and only `operators/vertex_ts.py` names the TS table. Reads the source; no
services."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

SMILE = Path(__file__).resolve().parents[1] / "smile"


def _unit(path: Path) -> str:
    """The package a module belongs to: `executor` for smile/executor/x.py, `db` for
    smile/db.py."""
    rel = path.relative_to(SMILE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (typing-only and function-local ones included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def package_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in SMILE.rglob("*.py"):
        src = _unit(path)
        graph.add_node(src)
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "smile" and len(parts) > 1 and parts[1] != src:
                graph.add_edge(src, parts[1])
    return graph


def test_no_import_cycle_between_packages() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(package_graph())
              if len(c) > 1]
    assert cycles == []


def test_low_layers_import_no_higher_one() -> None:
    """Settings, the database helpers, errors and the optimizer's pure core stand below
    everything that runs; the data loader below the executor."""
    graph = package_graph()
    for low, high in (("settings", "optimizer"), ("dataset", "executor"),
                      ("db", "executor"), ("errors", "db"), ("optimizer", "executor"),
                      ("operators", "executor"), ("delta_capture", "executor")):
        assert not nx.has_path(graph, low, high), f"{low} reaches {high}"


def test_executor_and_api_open_no_database_but_the_catalog() -> None:
    allowed = {SMILE / "executor" / "store.py"}
    for package in ("executor", "api"):
        for path in (SMILE / package).rglob("*.py"):
            if path in allowed:
                continue
            bad = sorted(m for m in _imports(path)
                         if m.split(".")[0] in {"psycopg", "psycopg2"})
            assert bad == [], f"{path.relative_to(SMILE)} imports {bad}"


def test_only_vertex_ts_names_the_ts_table() -> None:
    owner = SMILE / "operators" / "vertex_ts.py"
    named = sorted(str(p.relative_to(SMILE)) for p in SMILE.rglob("*")
                   if p.is_file() and p != owner and p.suffix in {".py", ".sql"}
                   and "_smile.vertex_ts" in p.read_text())
    assert named == []
