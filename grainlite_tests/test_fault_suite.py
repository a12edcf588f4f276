"""Runs every scenario of the fault suite (fault_suite.py): a real fault and its promise each."""

from __future__ import annotations

import pytest

from grainlite_tests.support.fault_suite import SCENARIOS, Scenario, Unavailable, run_scenario

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_loader_keeps_its_promise_under_the_fault(scenario: Scenario, tmp_path):
    try:
        result = run_scenario(scenario, tmp_path)
    except Unavailable as reason:
        pytest.skip(str(reason))
    assert result
