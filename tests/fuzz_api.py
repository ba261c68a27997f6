"""Schemathesis against SMILE's own `/openapi.json`: every route, the given token, the
`not_a_server_error` check, every request recorded (HAR) so that what was sent is counted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def fuzz(url: str, token: str, examples: int, report_dir: Path) -> dict[str, Any]:
    """Run Schemathesis; returns the requests sent, their statuses and its exit code."""
    report_dir.mkdir(parents=True, exist_ok=True)
    har = report_dir / "fuzz.har"
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    run = subprocess.run(
        [exe, "run", f"{url}/openapi.json", "--header", f"Authorization: Bearer {token}",
         "--checks", "not_a_server_error", "--max-examples", str(examples),
         "--continue-on-failure", "--request-timeout", "60", "--seed", "1",
         "--report", "har", "--report-har-path", str(har)],
        capture_output=True, text=True, timeout=3600, check=False)
    (report_dir / "fuzz.log").write_text(run.stdout + run.stderr)
    entries = json.loads(har.read_text())["log"]["entries"] if har.exists() else []
    statuses = Counter(int(e["response"]["status"]) for e in entries)
    return {"requests": len(entries), "statuses": dict(sorted(statuses.items())),
            "server_errors": sum(n for s, n in statuses.items() if s >= 500),
            "exit_code": run.returncode, "log": str(report_dir / "fuzz.log")}
