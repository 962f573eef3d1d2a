"""The report page's layout, from figures given (no Spark): what leads, what is charted."""

from __future__ import annotations

import re

from pipeline.html import PrincipalChart, QuotaTotal, Throttled, render
from pipeline.whatif import WhatIf

T0 = 1_763_424_000_000


def principal(user: str, share: float) -> PrincipalChart:
    return PrincipalChart(
        user,
        "app",
        series={"producer_byte_rate": [(T0, 1000.0 * share), (T0 + 10_000, 2000.0 * share)]},
        limits={"producer_byte_rate": 1000.0},
        percentiles={"producer_byte_rate": (900.0, 1000.0, 1000.0 * share, 2000.0)},
    )


def page(charts: int) -> str:
    hit = WhatIf("b", "app", "producer_byte_rate", 1000.0, 2, 1, 30_000.0, 10_000.0)
    total = QuotaTotal("producer_byte_rate", 60_000.0, [(T0, 3000.0), (T0 + 10_000, 6000.0)], 3)
    return render(
        [principal("b", 3.0), principal("a", 1.0), principal("c", 0.5)],
        [("samples", "6")],
        {},
        [total],
        [Throttled(hit, 10.0)],
        (T0, T0 + 20_000),
        charts,
    )


def test_only_the_first_principals_are_charted_and_every_one_is_in_the_table() -> None:
    shown = page(charts=1)
    charted = re.findall(r'<section class="principal" data-user="(\w+)"', shown)
    assert charted == ["b"]
    everyone = re.search(r'<table class="everyone">.*?</table>', shown, re.S)
    assert everyone is not None
    assert re.findall(r"<tr><td>(\w+)</td><td>app</td>", everyone.group()) == ["a", "b", "c"]
    assert ">The top 1 of 3 principals<" in shown


def test_the_cluster_and_the_throttled_lead_the_page() -> None:
    shown = page(charts=50)
    assert shown.index('id="cluster"') < shown.index('id="throttled"') < shown.index('id="charts"')
    assert "<td>60.0 k B</td>" in shown  # the cluster's use over the span
    assert "<td>10.0 k B</td><td>10 s</td><td>33.3%</td><td>1 of 2</td>" in shown
    assert len(re.findall(r'<section class="principal"', shown)) == 3
