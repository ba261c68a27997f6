"""Where a command will write, checked before its work starts: a bad `--out` costs a one-line
message at once, not a traceback after minutes of sampling, calibrating or traffic.

Must not: create a file, or truncate or change one that exists (a missing `--out` directory is
made, as the command would make it); open connections.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

from smile.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path


def writable_dir(out: Path, flag: str = "--out") -> None:
    """`out` is a directory this process can write in (made if missing), else ConfigError.

    >>> import pathlib
    >>> writable_dir(pathlib.Path("/proc/smile-nowhere"))
    Traceback (most recent call last):
    ...
    smile.errors.ConfigError: --out /proc/smile-nowhere: not a directory this process can ...
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {out}: not a directory this process can write in "
                          f"({exc.strerror or exc})") from exc


def writable_file(path: Path, flag: str = "--out") -> None:
    """`path` can be written as a file: not a directory, in a directory this process can write
    in, and, if it exists, open for writing (it is left as it is), else ConfigError.

    >>> import pathlib, tempfile
    >>> writable_file(pathlib.Path(tempfile.gettempdir()), "--png")
    Traceback (most recent call last):
    ...
    smile.errors.ConfigError: --png /tmp: a directory, not a file
    >>> writable_file(pathlib.Path("/proc/nope.json"))
    Traceback (most recent call last):
    ...
    smile.errors.ConfigError: --out /proc/nope.json: cannot be written (No such file or directory)
    """
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: a directory, not a file")
    parent = path.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: there is no directory {parent}")
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
        if path.exists():
            with path.open("a"):
                pass
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from exc
