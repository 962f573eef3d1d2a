"""Instructions per operation, counted by valgrind's callgrind, here and at another commit.

Wall-clock figures of microsecond operations swing by a quarter on a VM shared with other
work; the instructions a run executes do not change from one run to the next. A bench that
drives the proxy's code in-process (bench.core_cost, bench.quota_decision) runs its function
twice under callgrind, for `small` and `small + step` operations, and the difference over
`step` is the cost of one operation, start-up and set-up excluded. `--against REV` measures
the same function in a temporary git worktree of REV, for a change against its parent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_COLLECTED = re.compile(r"Collected : (\d+)")


def per_operation(tree: Path, call: str, small: int, step: int) -> float:
    """Instructions of one operation: `call` is Python evaluated with the operation count
    bound to `n`, in the checkout `tree`."""
    if shutil.which("valgrind") is None:
        raise SystemExit("instruction counts need valgrind (Debian: apt-get install valgrind)")
    counts = []
    for n in (small, small + step):
        script = f"n = {n}\n{call}\n"
        done = subprocess.run(
            [
                *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
                *(sys.executable, "-c", script),
            ],
            cwd=tree,
            # both runs compile the same modules: none writes bytecode the other would read
            # and one hash seed (PYTHONHASHSEED, else 0): set and dict layouts repeat, so the
            # count of one tree repeats; between trees, layouts that follow from module names
            # and allocation still move it by about 0.2 %
            env={
                "PYTHONPATH": str(tree),
                "PATH": "/usr/bin:/bin",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"),
            },
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"in {tree}:\n{done.stderr[-1500:]}")
        found = _COLLECTED.search(done.stderr)
        assert found is not None, done.stderr[-2000:]
        counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / step


@contextmanager
def checkout(rev: str | None) -> Iterator[Path]:
    """This checkout (None), or REV in a temporary worktree removed afterwards."""
    if rev is None:
        yield REPO
        return
    with tempfile.TemporaryDirectory(prefix="kqp-against-") as temp:
        tree = Path(temp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), rev],
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=True
            )
