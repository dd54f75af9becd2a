"""Helpers for tests that build real cgroup trees on this machine."""

from __future__ import annotations

import time
from pathlib import Path


def rmdir_cgroup(path: Path, attempts: int = 100) -> None:
    """Remove an (empty) cgroup directory; a task killed a moment ago can keep it busy briefly."""
    for _ in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)
    path.rmdir()
