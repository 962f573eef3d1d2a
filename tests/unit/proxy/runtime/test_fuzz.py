"""The fuzzers' short run, and what their seeds and mutations must be.

The long runs are commands (CONTRIBUTING.md, "Fuzzing"): `python -m tests.fuzz` for one million
inputs, `python -m tests.fuzz.network` for minutes against a real broker.
"""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.headers import parse_request_header
from proxy.handlers.registry import HANDLERS
from tests.fuzz.__main__ import HARNESS_NAMES
from tests.fuzz.harnesses import HARNESSES, drive_connection, handle, run
from tests.fuzz.mutate import mutate, with_size_prefix
from tests.fuzz.seeds import captured, seeds


def test_the_seeds_are_requests_of_every_client_and_every_api_the_proxy_decodes() -> None:
    frames = captured()
    clients = {name.split("-")[0] for name in frames}
    assert clients == {"kafka", "aiokafka", "confluent", "java"}  # kafka-python's "kafka"
    apis = {parse_request_header(frame).api_key for frame in frames.values()}
    assert set(HANDLERS) <= apis
    assert set(HARNESSES) == set(HARNESS_NAMES)
    assert all(seeds(name) for name in HARNESSES)


@pytest.mark.parametrize("name", sorted(HARNESSES))
def test_every_seed_passes_its_harness(name: str) -> None:
    for data in seeds(name).values():
        run(HARNESSES[name], data)


def test_a_real_clients_request_is_handled_without_error() -> None:
    """Not even the documented ProtocolError: these are the bytes real clients send."""
    for name, frame in captured().items():
        if parse_request_header(frame).api_key in HANDLERS:
            try:
                handle(frame)
            except Exception as exc:
                raise AssertionError(f"{name}: {exc!r}") from exc


def test_the_connection_harness_answers_every_request_of_a_real_client() -> None:
    """Each client's captured requests as one stream: all forwarded, all answered (the
    proxy's own Metadata and DescribeConfigs included), none refused."""
    for name, stream in seeds("connection").items():
        if name.endswith("-stream"):
            driven = drive_connection(stream)
            assert not driven.core.closed and not driven.malformed, name
            assert driven.answered == len(driven.upstream.written) > 20, name


def test_mutations_are_reproducible_and_reframed_frames_are_whole() -> None:
    seed = next(iter(captured().values()))
    rng, again = random.Random(7), random.Random(7)
    first = [mutate(rng, seed, seed) for _ in range(50)]
    assert first == [mutate(again, seed, seed) for _ in range(50)]
    assert len(set(first)) > 40 and seed not in first
    for data in first:
        framed = with_size_prefix(data)
        assert struct.unpack_from(">i", framed)[0] == len(framed) - 4
        assert framed[4:] == data[4:]


def test_a_short_coverage_guided_run_finds_nothing(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--inputs", "2700", "--artifacts", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "2,700 inputs over 9 harnesses" in result.stdout
    assert not list(tmp_path.iterdir())
