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


def run_chain(chain: str, seeds: str, records: int, timeout_s: float) -> ChainRun:
    """One of CHAINS against `seeds` ("host:port,..."), with `records` through each chain and
    topics of one replica; bounded by `timeout_s` (the test fails, then the process is
    killed)."""
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
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout_s + 30
        )
    except subprocess.TimeoutExpired as exc:
        return ChainRun(chain, time.monotonic() - started, False, f"killed: {exc}")
    seconds = time.monotonic() - started
    passed = result.returncode == 0
    return ChainRun(chain, seconds, passed, "" if passed else result.stdout[-4000:])
