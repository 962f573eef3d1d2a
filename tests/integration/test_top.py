"""`kafka-quota-proxy top` driven as a person would, in tmux (issue 40).

Two proxies of one fleet in front of the broker write usage samples to a topic every second.
A flooder produces through one over its producer_byte_rate; a quiet principal produces a
little through the other and reads the flooder's topic. While they run, `top` runs in a tmux
pane: the flooder is on the first row
with its share of quota above 1 and its throttle time, the quiet one below it, both members
listed, and the flooded topic (under a topic quota) below them; `s` sorts by fetch bytes
and puts the quiet one first; `/` filters by name; `--once --json`, run beside it, ranks
them alike with the same quota.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, aiokafka_drain, aiokafka_flood
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy

USAGE_TOPIC = "top-usage"
FLEET = "top"
FLOODER, QUIET = "flooder", "quiet"
TOPIC = "top-flooded"
QUOTA = 200_000
SESSION = "kqp-top-test"
CONFIG = (
    SHORT_QUOTA_WINDOWS
    + f'[usage]\nkafka_topic = "{USAGE_TOPIC}"\ninterval_s = 1.0\n'
    + f'[fleet]\nname = "{FLEET}"\n[quota_store]\ntopic = "top-quotas"\n'
    + f'[clients."{FLOODER}"]\nproducer_byte_rate = {QUOTA}\n'
    # a topic quota that never throttles: the topic is on the bus, so top lists it
    + f'[topics."{TOPIC}"]\nproducer_byte_rate = 1000000000\n'
)


@pytest.fixture(scope="module")
def fleet(
    kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RunningProxy]]:
    kafka1.create_topic(USAGE_TOPIC, partitions=1)
    tmp = tmp_path_factory.mktemp("top")
    proxies = [
        start_proxy(tmp, kafka1.bootstrap_servers, 1, CONFIG, name=name) for name in ("a", "b")
    ]
    yield proxies
    for proxy in proxies:
        proxy.stop()


def top_command(kafka: KafkaCluster, proxy: RunningProxy, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "proxy", "top", "--bootstrap-server", kafka.bootstrap_servers,
        "--usage-topic", USAGE_TOPIC, "--fleet", FLEET, "--quota-topic", "top-quotas",
        "--config", str(proxy.config_path), "--window-s", "20", *extra,
    ]  # fmt: skip


def tmux(*args: str) -> str:
    tool = shutil.which("tmux")
    assert tool is not None, "tmux is missing: `make test` installs it (make tmux)"
    return subprocess.run([tool, *args], capture_output=True, text=True, check=True).stdout


def screen_rows(screen: str) -> list[list[str]]:
    """The table's rows as the pane shows them: lines that start with a principal's user."""
    return [line.replace("│", " ").split() for line in screen.splitlines() if "ANONYMOUS" in line]


def wait_for(*conditions: str, timeout_s: float = 20.0) -> str:
    """The pane once it shows every one of `conditions` (or as it is after the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        screen = tmux("capture-pane", "-p", "-t", SESSION)
        if all(c in screen for c in conditions) or time.monotonic() > deadline:
            return screen
        time.sleep(0.5)


async def test_top_shows_the_flooder_first_and_the_quiet_principal_below(
    kafka1: KafkaCluster, fleet: list[RunningProxy]
) -> None:
    topic = TOPIC
    kafka1.create_topic(topic, partitions=1)
    first, second = fleet
    seconds = 16.0
    load = asyncio.gather(
        aiokafka_flood(first.bootstrap, FLOODER, topic, seconds, Timeline()),
        aiokafka_flood(second.bootstrap, QUIET, topic, seconds, Timeline(), 5_000),
        aiokafka_drain(second.bootstrap, QUIET, topic, seconds, Timeline()),
    )
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    try:
        await asyncio.sleep(4)  # the flooder is held by now
        tmux("new-session", "-d", "-s", SESSION, "-x", "200", "-y", "40",
             *top_command(kafka1, first))  # fmt: skip
        # each member is named by its host, bootstrap port, worker and pid
        ports = [f":{proxy.bootstrap.rpartition(':')[2]}/" for proxy in fleet]
        screen = await asyncio.to_thread(wait_for, QUIET, TOPIC, *ports)
        print(screen)
        rows = screen_rows(screen)
        assert [row[1] for row in rows[:2]] == [FLOODER, QUIET], screen
        share, throttle = float(rows[0][4]), float(rows[0][5])
        # held at its quota: a share about 1 (the proxy holds it there), throttled
        assert share > 0.8 and throttle > 0, rows[0]
        members = next(line for line in screen.splitlines() if "members:" in line)
        assert all(port in members for port in ports), members
        once = await asyncio.to_thread(
            subprocess.run,
            top_command(kafka1, first, "--once", "--json"),
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        tmux("send-keys", "-t", SESSION, "s")
        sorted_by_fetch = await asyncio.to_thread(wait_for, "sort: fetch B/s")
        rows = screen_rows(sorted_by_fetch)
        assert rows and rows[0][1] == QUIET, sorted_by_fetch
        tmux("send-keys", "-t", SESSION, "/")
        await asyncio.to_thread(wait_for, "filter on user or client_id")
        tmux("send-keys", "-t", SESSION, "flood", "Enter")
        filtered = await asyncio.to_thread(wait_for, "filter: flood")
        assert [row[1] for row in screen_rows(filtered)] == [FLOODER], filtered
    finally:
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        await load
    shown = json.loads(once.stdout)
    ranked = [p["client_id"] for p in shown["principals"]]
    assert ranked[:2] == [FLOODER, QUIET], shown
    flooder = shown["principals"][0]
    assert flooder["share"] > 0.8 and flooder["throttle_time_ms"] > 0, flooder
    assert flooder["quota"] == QUOTA and len(shown["members"]) == 2, shown
    assert [t["topic"] for t in shown["topics"]] == [TOPIC], shown
