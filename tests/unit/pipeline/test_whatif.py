"""The what-if replay and the recommended quota file, without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from config.loader import load_config
from config.quota_file import HEADER_MARK, quota_file
from pipeline.whatif import REPLAYED, PrincipalWindow, replay, replay_columns
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

T0 = 1_763_424_000_000


def produced(client_id: str, windows: int, bytes_per_window: float) -> list[PrincipalWindow]:
    return [
        PrincipalWindow(client_id, T0 + i * 10_000, 10_000, bytes_per_window, 0.0, 0.0, 0.0, 0.0)
        for i in range(windows)
    ]


def quota(user: str, client_id: str, quota_type: QuotaType, value: float) -> QuotaConfig:
    return QuotaConfig(limits={quota_type: {QuotaEntity(user, client_id): value}})


def test_a_steady_8000_bytes_per_second_under_a_5000_quota_is_throttled_from_its_7th_second() -> (
    None
):
    """Kafka's rate over 11 one-second samples counts at least 10 s of elapsed time: in the
    first window the k-th second measures 800 (k + 1) B/s, over 5000 from k = 6; after it,
    every second is over. 30 windows: all throttled, and 4 + 29 x 10 of 300 seconds."""
    [result] = replay(
        "alice", produced("app", 30, 80_000), quota("alice", "app", QuotaType.PRODUCE, 5000)
    )
    assert (result.quota, result.windows, result.throttled_windows) == (
        "producer_byte_rate",
        30,
        30,
    )
    assert result.used == 30 * 80_000
    assert result.throttled / result.used == 294 / 300


def test_use_under_the_quota_is_never_throttled_and_unlimited_principals_are_not_replayed() -> None:
    config = quota("alice", "app", QuotaType.PRODUCE, 9000)
    windows = produced("app", 30, 80_000) + produced("other", 30, 10**9)
    [result] = replay("alice", windows, config)
    assert (result.client_id, result.throttled_windows, result.throttled) == ("app", 0, 0)


def test_a_users_quota_is_one_bucket_for_all_of_its_client_ids() -> None:
    """users/alice: 5000 B/s shared; two client-ids at 3000 B/s each are 6000 together."""
    config = QuotaConfig(limits={QuotaType.PRODUCE: {QuotaEntity("alice"): 5000.0}})
    windows = produced("a", 30, 30_000) + produced("b", 30, 30_000)
    results = {r.client_id: r for r in replay("alice", windows, config)}
    assert results["a"].throttled_windows > 0 and results["b"].throttled_windows > 0
    alone = replay("alice", produced("a", 30, 30_000), config)
    assert alone[0].throttled_windows == 0


def test_request_time_is_charged_as_percent_of_a_thread() -> None:
    """500 ms of request time per 10 s is 5 %: throttled under 4 %, not under 6 %."""
    windows = [
        PrincipalWindow("app", T0 + i * 10_000, 10_000, 0.0, 0.0, 500.0, 0.0, 0.0)
        for i in range(30)
    ]
    over = replay("bob", windows, quota("bob", "app", QuotaType.REQUEST, 4))
    under = replay("bob", windows, quota("bob", "app", QuotaType.REQUEST, 6))
    assert over[0].throttled_windows > 0 and under[0].throttled_windows == 0


def test_the_quota_file_keeps_the_current_config_and_loads(tmp_path: Path) -> None:
    current = tmp_path / "proxy.toml"
    current.write_text(
        "[proxy]\nbootstrap_port = 19192\n[broker]\nquota.window.num = 5\n"
        '[clients."<default>"]\nrequest_percentage = 50\n'
        "[users.alice.clients.app]\nproducer_byte_rate = 100\nconsumer_byte_rate = 200\n"
    )
    recommended = {
        ("alice", "app"): {"producer_byte_rate": 12000.2},
        ('CN=x,O="y"', "a.b c"): {"request_percentage": 7.5},
        ("carol", None): {"producer_ids_rate": 9.0},
        ("dave", "rocket-\U0001f680-\x7f"): {"controller_mutation_rate": 2.5},
    }
    path = tmp_path / "quotas.toml"
    path.write_text(quota_file(recommended, current, "made by a test\nline two"))
    config = load_config(path)
    assert config.proxy.bootstrap_port == 19192
    assert config.quotas.settings.client.samples == 5
    limits = config.quotas.limits
    assert limits[QuotaType.PRODUCE][QuotaEntity("alice", "app")] == 12001  # whole bytes, up
    assert limits[QuotaType.FETCH][QuotaEntity("alice", "app")] == 200  # kept
    assert limits[QuotaType.REQUEST][QuotaEntity('CN=x,O="y"', "a.b c")] == 7.5
    assert limits[QuotaType.REQUEST][QuotaEntity(client_id="<default>")] == 50
    assert limits[QuotaType.PRODUCER_IDS][QuotaEntity("carol")] == 9.0
    rocket = QuotaEntity("dave", "rocket-\U0001f680-\x7f")  # TOML has no surrogate pairs
    assert limits[QuotaType.CONTROLLER_MUTATION][rocket] == 2.5
    assert path.read_text().startswith("# made by a test\n# line two\n")


def test_the_quota_file_keeps_the_operators_comments_and_replaces_its_own_header(
    tmp_path: Path,
) -> None:
    current = tmp_path / "proxy.toml"
    operator = (
        "[proxy]\nbootstrap_port = 19192  # the port the load balancer checks\n\n"
        "# the batch team's quota, agreed in ticket 42\n"
        "[users.alice.clients.app]\nproducer_byte_rate = 100\n"
    )
    current.write_text(operator)
    first = quota_file({("bob", None): {"request_percentage": 5.0}}, current, HEADER_MARK + ": 1")
    assert first.startswith(f"# {HEADER_MARK}: 1\n" + operator)  # every line of it, untouched
    current.write_text(first)
    second = quota_file({("bob", None): {"request_percentage": 6.0}}, current, HEADER_MARK + ": 2")
    assert second.startswith(f"# {HEADER_MARK}: 2\n" + operator)  # the old header replaced
    assert "request_percentage = 6.0" in second and "5.0" not in second


USERS, CLIENTS = ("alice", "bob", "carol"), ("app", "batch", "cli")
ENTITIES = (
    QuotaEntity(user=DEFAULT),
    QuotaEntity(client_id=DEFAULT),
    *(QuotaEntity(user) for user in USERS),
    *(QuotaEntity(client_id=client) for client in CLIENTS),
    *(QuotaEntity(user, client) for user in USERS for client in CLIENTS),
)
#: per quota type, a use per 10 s window near a limit of one unit per second
SCALE = {
    QuotaType.PRODUCE: 10_000.0,
    QuotaType.FETCH: 10_000.0,
    QuotaType.REQUEST: 1_000.0,
    QuotaType.CONTROLLER_MUTATION: 10.0,
    QuotaType.PRODUCER_IDS: 10.0,
}


@st.composite
def days(draw: st.DrawFn) -> tuple[list[tuple[str, PrincipalWindow]], QuotaConfig]:
    """A few principals' windows (gaps, idle windows, short windows, fractions, spikes) and
    limits at every entity level, under random quota windows."""
    windows: list[tuple[str, PrincipalWindow]] = []
    for user in draw(st.lists(st.sampled_from(USERS), min_size=1, max_size=3, unique=True)):
        for client in draw(st.lists(st.sampled_from(CLIENTS), min_size=1, max_size=2, unique=True)):
            start = T0 + draw(st.integers(0, 5)) * 10_000
            for _ in range(draw(st.integers(1, 40))):
                start += draw(st.sampled_from((10_000, 10_000, 10_000, 20_000, 150_000)))
                length = draw(st.sampled_from((10_000, 10_000, 10_000, 3_700, 999)))
                uses = [
                    draw(st.sampled_from((0.0, 0.5, 1.0, 3.0, 30.0))) * SCALE[quota_type]
                    + draw(st.sampled_from((0.0, 0.0, 0.25, 1 / 3)))
                    for quota_type in REPLAYED
                ]
                windows.append((user, PrincipalWindow(client, start, length, *uses)))
    limits = {
        quota_type: {
            entity: draw(st.sampled_from((0.5, 1.0, 2.0, 7.0))) * SCALE[quota_type] / 10
            for entity in draw(st.lists(st.sampled_from(ENTITIES), max_size=4, unique=True))
        }
        for quota_type in REPLAYED
    }
    client_windows = MetricConfig(
        draw(st.sampled_from((2, 5, 11))), draw(st.sampled_from((500, 1000, 3000)))
    )
    settings = QuotaSettings(
        client=client_windows,
        controller=client_windows,
        producer_ids=MetricConfig(
            draw(st.sampled_from((2, 11))), draw(st.sampled_from((1000, 60_000)))
        ),
    )
    return windows, QuotaConfig(settings, limits)


@settings(max_examples=40, deadline=None)
@given(days())
def test_the_lockstep_what_if_gives_the_per_record_replays_results(
    day: tuple[list[tuple[str, PrincipalWindow]], QuotaConfig],
) -> None:
    """Every quota type and window setting: the same windows, throttled windows, use and
    throttled use, to the bit."""
    windows, config = day
    expected = sorted(
        (
            result
            for user in {user for user, _ in windows}
            for result in replay(user, [w for u, w in windows if u == user], config)
        ),
        key=lambda r: (r.user, r.client_id, [t.key for t in REPLAYED].index(r.quota)),
    )
    columns: dict[str, list[Any]] = {
        "user": [user for user, _ in windows],
        **{field: [w[i] for _, w in windows] for i, field in enumerate(PrincipalWindow._fields)},
    }
    assert replay_columns(columns, config) == expected
