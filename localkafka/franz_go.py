"""franz-go's own integration tests as a real client's workloads (issue 48).

franz-go's kgo package tests itself against whatever broker KGO_SEEDS names. Its chains are
the densest workloads a Kafka client's own authors wrote: TestGroupETL produces records and
passes them through six consumer groups in turn (classic range and cooperative-sticky, KIP-848
range and sticky, static members of both), each consuming, producing to the next topic and
committing, with members joining and leaving; TestTxnEtl does the same in transactions. `make
franz-go` builds the test binary from the Go module proxy into .cache/franz-go.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

#: the Makefile's FRANZ_GO_VERSION, which `make franz-go` builds
VERSION: Final = "v1.22.3"
KGO_TEST: Final = Path(__file__).resolve().parents[1] / ".cache" / "franz-go" / VERSION / "kgo.test"
#: the consumer-group chains (classic and KIP-848) and the transactional ones
CHAINS: Final = ("TestGroupETL", "TestTxnEtl")


@dataclass
class ChainRun:
    chain: str
    seconds: float
    passed: bool
    #: the test's report, kept when it failed
    output: str


class Chain:
    """One of CHAINS running against `seeds` ("host:port,..."), with `records` through each
    chain and topics of one replica; bounded by `timeout_s` (the test fails, then the process
    is killed). A differential may stop one leg once the other has decided the comparison."""

    def __init__(self, chain: str, seeds: str, records: int, timeout_s: float, log: Path) -> None:
        if not KGO_TEST.exists():
            raise FileNotFoundError(f"{KGO_TEST} is missing: `make franz-go` builds it")
        env = {
            **os.environ,
            "KGO_SEEDS": seeds,
            "KGO_TEST_RF": "1",
            "KGO_TEST_RECORDS": str(records),
            "KGO_LOG_LEVEL": "none",
        }
        command = [str(KGO_TEST), "-test.run", f"^{chain}$", "-test.timeout", f"{timeout_s:.0f}s"]
        self.chain, self._timeout_s, self._log = chain, timeout_s, log
        self._started = time.monotonic()
        # a file, not a pipe: a failing test's report can outgrow a pipe nobody reads yet
        with log.open("wb") as output:
            self._process = subprocess.Popen(
                command, env=env, stdout=output, stderr=subprocess.STDOUT
            )

    def wait(self) -> ChainRun:
        """The run, once it ends or is killed at its bound."""
        try:
            self._process.wait(timeout=self._timeout_s + 30)
        except subprocess.TimeoutExpired as exc:
            self._process.kill()
            self._process.wait()
            return ChainRun(self.chain, time.monotonic() - self._started, False, f"killed: {exc}")
        seconds = time.monotonic() - self._started
        passed = self._process.returncode == 0
        output = "" if passed else self._log.read_text(errors="replace")[-4000:]
        return ChainRun(self.chain, seconds, passed, output)

    def stop(self) -> float | None:
        """How long it had run when stopped now; None when it had already ended."""
        if self._process.poll() is not None:
            return None
        seconds = time.monotonic() - self._started
        self._process.kill()
        self._process.wait()
        return seconds


def run_chain(chain: str, seeds: str, records: int, timeout_s: float) -> ChainRun:
    """One chain to its end: see Chain."""
    with tempfile.TemporaryDirectory(prefix="kgo-") as logs:
        return Chain(chain, seeds, records, timeout_s, Path(logs) / f"{chain}.log").wait()
