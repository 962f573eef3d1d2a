"""A fleet of librdkafka producer processes sharing one client-id, as a scaled-out service runs.

Each process is its own client with its own connections, which is what lets a principal get past
a broker's per-connection quota (issue 13); threads in one process would share librdkafka's
connections and show nothing. Each process floods the topic until its deadline and prints, as
one JSON line, when each record it produced was acknowledged (CLOCK_MONOTONIC, which every
process on the machine shares) and the records' sequence numbers, so the parent can compute the
fleet's rate over any span and compare what was acknowledged with what Kafka stored.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from localkafka.load import RECORD_BYTES, Timeline, confluent_flood

#: sequence numbers of process i start at i * SEQ_STRIDE, so a fleet's records never collide
SEQ_STRIDE = 10**9


@contextmanager
def confluent_fleet(
    bootstrap: str | Sequence[str],
    client_id: str,
    topic: str,
    seconds: float,
    processes: int,
    options: Mapping[str, str] | None = None,
    in_flight: int = 1000,
    first_process: int = 0,
    offered_rate: float | None = None,
) -> Iterator[list[subprocess.Popen[str]]]:
    """The fleet's processes, started at once; killed if the block is left while they run.
    Several bootstrap lists are dealt out: process i gets the (i mod their count)-th;
    `options` are librdkafka settings of every process, `in_flight` the records each keeps
    unacknowledged. Two fleets writing one topic number their processes apart
    (`first_process`), so that their records' sequence numbers differ. `offered_rate`: each
    process's bytes per second, at most (None: as fast as it goes)."""
    lists = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    fleet = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localkafka.fleet",
                lists[i % len(lists)],
                client_id,
                topic,
                str(seconds),
                str((first_process + i) * SEQ_STRIDE),
                f"--in-flight={in_flight}",
                *([f"--rate={offered_rate}"] if offered_rate is not None else []),
                *(f"--option={key}={value}" for key, value in (options or {}).items()),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        yield fleet
    finally:
        for process in fleet:
            if process.poll() is None:
                process.kill()
                process.wait()


def fleet_timelines(fleet: Sequence[subprocess.Popen[str]], timeout_s: float) -> list[Timeline]:
    """What each process acknowledged, once all have finished (raises if one failed)."""
    timelines = []
    for process in fleet:
        out, err = process.communicate(timeout=timeout_s)
        assert process.returncode == 0, err[-3000:]
        report = json.loads(out.splitlines()[-1])
        timeline = Timeline(started=report["started"])
        for at, seq in report["acked"]:
            timeline.events.append((at, RECORD_BYTES))
            timeline.seqs.append(seq)
        timelines.append(timeline)
    return timelines


def fleet_rate(timelines: Sequence[Timeline], start: float, end: float) -> float:
    """The fleet's acknowledged bytes per second between `start` and `end` seconds after the
    first process started."""
    first = min(t.started for t in timelines)
    return sum(t.rate(first - t.started + start, first - t.started + end) for t in timelines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkafka.fleet", description=__doc__)
    parser.add_argument("bootstrap")
    parser.add_argument("client_id")
    parser.add_argument("topic")
    parser.add_argument("seconds", type=float)
    parser.add_argument("first_seq", type=int)
    parser.add_argument("--in-flight", type=int, default=1000, help="records unacknowledged")
    parser.add_argument("--option", action="append", default=[], help="librdkafka key=value")
    parser.add_argument("--rate", type=float, default=None, help="bytes per second, at most")
    args = parser.parse_args(argv)
    timeline = Timeline()
    config = {"bootstrap.servers": args.bootstrap, "client.id": args.client_id}
    config.update(option.split("=", 1) for option in args.option)
    confluent_flood(
        config, args.topic, args.seconds, timeline, args.first_seq, args.in_flight, args.rate
    )
    acked = [[at, seq] for (at, _), seq in zip(timeline.events, timeline.seqs, strict=True)]
    print(json.dumps({"started": timeline.started, "acked": acked}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
