"""The report reads the samples' versions it knows, old ones included, and names others."""

from __future__ import annotations

import pytest

from pipeline.samples import SampleError, check_versions


def test_versions_1_to_3_are_read_together() -> None:
    check_versions([1, 2, 3])  # a fleet upgraded mid-week: files of each version


def test_an_unknown_version_is_named() -> None:
    with pytest.raises(SampleError, match="version 5: this report reads versions 1, 2, 3, 4"):
        check_versions([4, 5])
