import gc
from collections.abc import Iterator

import pytest

from proxy.network.garbage import YOUNG_AFTER, collect_rarely


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_what_exists_is_frozen_and_the_young_collected_rarely(restored: None) -> None:
    _, middle, old = gc.get_threshold()
    collect_rarely()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_AFTER, middle, old)
