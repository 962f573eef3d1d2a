"""The network fuzzer's short run: mutated and random frames into the real proxy and broker
while an idempotent producer works beside them (`python -m tests.fuzz.network` runs longer)."""

from __future__ import annotations

from pathlib import Path

from tests.fuzz.network import run_network_fuzz


async def test_fuzzed_connections_neither_stop_the_proxy_nor_lose_a_record(
    tmp_path: Path,
) -> None:
    report = await run_network_fuzz(tmp_path, seconds=12.0, connections=8, seed=2)
    print(report)
    assert report.proxy_exit is None, "the proxy exited"
    assert report.tracebacks == 0, "the proxy logged a traceback"
    assert report.malformed == 0, "a decoder missed a bounds check"
    assert report.counts.connections > 100 and report.counts.refused == 0
    assert report.counts.closed_by_proxy > 0  # bad frames close their connection
    assert report.acked > 0 and report.acked_last_10s > 0  # served throughout
    assert report.missing == 0 and report.duplicates == 0
    assert report.stored == report.acked
