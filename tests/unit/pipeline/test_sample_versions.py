"""The report reads the samples' versions it knows, old ones included, and names others."""

from __future__ import annotations

import pytest

from pipeline.samples import SampleError, check_versions


def test_versions_1_and_2_are_read_together() -> None:
    check_versions([1, 2])  # a fleet upgraded mid-week: files of both versions


def test_an_unknown_version_is_named() -> None:
    with pytest.raises(SampleError, match="version 3: this report reads versions 1, 2"):
        check_versions([2, 3])
