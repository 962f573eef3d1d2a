"""The commit a figure was measured at, printed with it (docs/performance.md's figures carry
their command, machine and commit)."""

from __future__ import annotations

import subprocess


def head() -> str:
    """The checkout's short commit; "" outside a git checkout."""
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
