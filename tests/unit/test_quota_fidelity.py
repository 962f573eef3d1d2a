"""Every quota holds a greedy client, whatever it does with throttle_time_ms and however deep
it pipelines, through the proxy's real connection and enforcer on a virtual clock.

Two properties, for each quota type, client behaviour and window setting (tests/fidelity.py):
- the long run: over LONG_RUN_S simulated seconds the client gets the quota, within
  LONG_RUN_TOLERANCE;
- no span of SPAN_S seconds carries more than the quota plus the burst Kafka's windows allow.

No shorter span is asserted to within 1 %: Kafka's own arithmetic does not hold a greedy
client that tightly. With its default 11 x 1 s windows the first burst echoes for minutes, and
30-second averages of a broker's own quota swing between 0.81 and 1.08 x quota (README, "Quota
windows"); `python -m tests.fidelity` prints those spans beside the long run.
"""

from __future__ import annotations

import pytest

from tests.fidelity import BEHAVIOURS, WINDOWS, WORKLOADS, Behaviour, Workload, simulate

#: the long-run rate is within this of the quota (issue 13's target); the most any row misses
#: by is 1.52 %: producer_byte_rate with Kafka's 11 x 1 s windows and requests pipelined,
#: where the first burst's echo decides (each Produce is throttled as Kafka throttles it when
#: it answers; throttling from the read, as before, held these rows to 1.3 % by serving the
#: broker's round trip on top of every throttle)
LONG_RUN_TOLERANCE = 0.02


@pytest.mark.parametrize("windows", WINDOWS, ids=lambda w: f"{w[0]}x{w[1]}s")
@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=lambda b: b.name)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_a_greedy_client_gets_its_quota(
    workload: Workload, behaviour: Behaviour, windows: tuple[int, int]
) -> None:
    result = simulate(workload, behaviour, windows)
    assert abs(result.long_run - 1) <= LONG_RUN_TOLERANCE, result
    assert result.highest_span <= result.burst_bound, result


@pytest.mark.parametrize("connections", [3, 10])
@pytest.mark.parametrize(
    "behaviour", [BEHAVIOURS[0], BEHAVIOURS[2], BEHAVIOURS[3]], ids=lambda b: b.name
)
def test_several_connections_of_one_principal_are_held_as_one(
    connections: int, behaviour: Behaviour
) -> None:
    """Issue 13: a throttle stops every connection charging the sensors. With 2 x 1 s
    windows, 3 or 10 greedy connections get what one does, within 1.5 % over 300 s and
    1.02 x over the first 30 s; held per connection, as a broker holds them, 10 got 1.046 to
    1.066 x.
    With Kafka's 11 x 1 s windows the principal stays under 1.03 x over 300 s."""
    produce = WORKLOADS[0]
    held = simulate(produce, behaviour, (2, 1), connections)
    assert held.long_run <= 1.015 and held.first_span <= 1.02
    assert simulate(produce, behaviour, (11, 1), connections).long_run <= 1.03
    if connections == 10:
        apart = simulate(produce, behaviour, (2, 1), connections, hold_principal=False)
        assert apart.long_run > 1.04
