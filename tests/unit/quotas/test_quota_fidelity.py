"""Every quota holds a greedy client, whatever it does with throttle_time_ms and however deep
it pipelines, through the proxy's real connection and enforcement on a virtual clock.

Two properties, for each quota type, client behaviour and window setting
(tests/support/fidelity.py):
- the long run: over LONG_RUN_S simulated seconds the client gets the quota, within
  LONG_RUN_TOLERANCE;
- no span of SPAN_S seconds carries more than the quota plus the burst Kafka's windows allow.

No shorter span is asserted to within 1 %: Kafka's own arithmetic does not hold a greedy
client that tightly. With its default 11 x 1 s windows the first burst echoes for minutes, and
30-second averages of a broker's own quota swing between 0.81 and 1.08 x quota
(docs/enforcement.md, "Quota windows"); `python -m tests.support.fidelity` prints those spans
beside the long run.
"""

from __future__ import annotations

import pytest

from tests.support.fidelity import BEHAVIOURS, WINDOWS, WORKLOADS, Behaviour, Workload, simulate

#: the long-run rate is within this of the quota; the most any row misses by is 1.4 %
#: (consumer_byte_rate at 5 x 2 s: the fetch that crosses the quota is delivered)
LONG_RUN_TOLERANCE = 0.015


@pytest.mark.parametrize("windows", WINDOWS, ids=lambda w: f"{w[0]}x{w[1]}s")
@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=lambda b: b.name)
@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: w.quota_type.key)
def test_a_greedy_client_gets_its_quota(
    workload: Workload, behaviour: Behaviour, windows: tuple[int, int]
) -> None:
    result = simulate(workload, behaviour, windows)
    assert abs(result.long_run - 1) <= LONG_RUN_TOLERANCE, result
    assert result.highest_span <= result.burst_bound, result


@pytest.mark.parametrize("windows", [(11, 1), (2, 1)], ids=lambda w: f"{w[0]}x{w[1]}s")
@pytest.mark.parametrize("connections", [1, 3, 10])
@pytest.mark.parametrize(
    "behaviour", [BEHAVIOURS[0], BEHAVIOURS[2], BEHAVIOURS[3]], ids=lambda b: b.name
)
def test_several_connections_of_one_principal_are_held_as_one(
    connections: int, behaviour: Behaviour, windows: tuple[int, int]
) -> None:
    """Issue 13: a throttle stops every connection charging the sensors. 1, 3 or 10 greedy
    connections, each to a broker of its own, get within 2 % of producer_byte_rate over the
    first 30 s (33 s with Kafka's windows: whole echo periods) and 1.5 % over 300 s; they got
    1.0019 x and 1.0101 x over the first span. Held per connection, as a broker holds them,
    10 got 1.046 to 1.066 x over 300 s with 2 x 1 s windows."""
    produce = WORKLOADS[0]
    held = simulate(produce, behaviour, windows, connections)
    assert held.first_span <= 1.02 and abs(held.long_run - 1) <= LONG_RUN_TOLERANCE, held
    if connections == 10 and windows == (2, 1):
        apart = simulate(produce, behaviour, windows, connections, hold_principal=False)
        assert apart.long_run > 1.04
