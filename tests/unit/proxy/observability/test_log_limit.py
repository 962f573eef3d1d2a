"""Repeated log lines are rate-limited per kind, and the count left out is reported."""

from __future__ import annotations

import logging

from proxy.observability.log_limit import RepeatedLineFilter


def record(msg: str, *args: object, lineno: int = 1) -> logging.LogRecord:
    return logging.LogRecord("proxy", logging.WARNING, "core.py", lineno, msg, args, None)


def test_a_burst_per_period_then_a_count_of_the_rest() -> None:
    now = [0.0]
    limit = RepeatedLineFilter(burst=2, period_s=10, clock=lambda: now[0])
    lines = [record("closing client %s: gone", f"127.0.0.1:{port}") for port in range(50)]
    assert [limit.filter(line) for line in lines[:5]] == [True, True, False, False, False]
    assert limit.filter(record("another kind", lineno=2))  # kinds are limited apart
    now[0] = 10.0
    later = record("closing client %s: gone", "127.0.0.1:9")
    assert limit.filter(later)
    assert later.getMessage() == "closing client 127.0.0.1:9: gone (3 more like it were not logged)"
    now[0] = 30.0
    quiet = record("closing client %s: gone", "127.0.0.1:10")
    assert limit.filter(quiet) and quiet.getMessage() == "closing client 127.0.0.1:10: gone"
