"""Where results go, in one place: an experiment's `NAME.{csv,png,json}` in one directory
(`Outputs`), a figure saved as a PNG (`save_png`), a benchmark's or an experiment's JSON on
stdout (`print_json`), the plots they draw alike (`one_plot`, `bar_chart`), and a progress
bar on stderr for long steps (`progress`).

Must not: run anything; it only writes files and draws bars.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from matplotlib.figure import Figure

DPI = 110


@dataclass(frozen=True)
class Outputs:
    """The three files of experiment `name` under `out_dir`."""

    name: str
    out_dir: Path

    def path(self, suffix: str, name: str | None = None) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.out_dir / f"{name or self.name}.{suffix}"

    def csv(self, rows: list[dict[str, Any]], name: str | None = None,
            fields: list[str] | None = None) -> Path:
        """The raw points, one row each, under a header (`fields`, else the first row's keys;
        no rows and no fields: an empty file)."""
        path = self.path("csv", name)
        header = fields or (list(rows[0]) if rows else [])
        with path.open("w", newline="", encoding="utf-8") as f:
            if header:
                w = csv.DictWriter(f, fieldnames=header)
                w.writeheader()
                w.writerows(rows)
        return path

    def json(self, doc: dict[str, Any], name: str | None = None) -> Path:
        path = self.path("json", name)
        path.write_text(json.dumps(finite(doc), indent=2, ensure_ascii=False) + "\n",
                        encoding="utf-8")
        return path

    def png(self, fig: Figure, name: str | None = None) -> Path:
        return save_png(fig, self.path("png", name))


def save_png(fig: Figure, path: Path, dpi: int = DPI) -> Path:
    fig.savefig(path, dpi=dpi)
    return path


def print_json(doc: Any, ascii_only: bool = True) -> None:
    """`doc` on stdout as indented JSON: a benchmark's as it is, an experiment's headline
    (`ascii_only` False) with its text as written and anything else as its str."""
    print(json.dumps(doc, indent=2, ensure_ascii=ascii_only, default=str))


def one_plot(width: float = 7.0, height: float = 4.0) -> tuple[Figure, Any]:
    """A figure with one set of axes, laid out to fit its labels."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def bar_chart(labels: list[str], values: list[float | None], xlabel: str, ylabel: str,
              title: str) -> Figure:
    """Bars around a zero line (a missing value drawn as none)."""
    fig, ax = one_plot()
    ax.bar(labels, [v or 0.0 for v in values])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return fig


def finite(doc: Any) -> Any:
    """`doc` with NaN and infinities as null (JSON has neither)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [finite(v) for v in doc]
    return doc


@contextmanager
def progress(what: str, total: float) -> Iterator[Callable[[float], None]]:
    """A bar on stderr for a long step: yields `advance(amount)`."""
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn(
        "{task.completed:.0f}/{task.total:.0f}"), TimeElapsedColumn(),
        console=Console(file=sys.stderr), transient=False)
    with bar:
        task = bar.add_task(what, total=total)

        def advance(amount: float = 1.0) -> None:
            bar.advance(task, amount)

        yield advance
