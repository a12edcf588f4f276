"""The fault suite: grainlite tried as a hostile user and as a failing machine would.

Each scenario builds a real fault (a damaged ArrayRecord file, a full or read-only ``/dev/shm``,
SIGTERM to a running job, a forked child that exits...) and asserts the promise it must keep:
a clear error naming the problem, within seconds, nothing delivered wrong, nothing left behind.
``test_fault_suite.py`` runs every scenario as a test; ``python -m benchmarks.faults`` runs them
all and writes the table of ``docs/reliability.md`` (scenario, result, time to error).

A scenario is a function ``run(tmp: Path) -> str`` that raises AssertionError if a promise is
broken, ``Unavailable`` if this machine cannot build the fault, and otherwise returns what
happened in a few words. Its time to error is measured by :func:`timed`.
"""

from __future__ import annotations

from grainlite_tests.support import (
    fault_dataset_scenarios,
    fault_engine_scenarios,
    fault_loader_scenarios,
    fault_more_scenarios,
    fault_registry,
)
from grainlite_tests.support.fault_registry import Scenario, Unavailable, run_scenario

# The scenario modules, in the order of SCENARIOS and of the published table: the DataLoader's,
# more of them, the worker engine's, the Dataset API's. Each registered its scenarios with
# fault_registry.scenario when imported above; none of them imports this module.
MODULES = (
    fault_loader_scenarios,
    fault_more_scenarios,
    fault_engine_scenarios,
    fault_dataset_scenarios,
)
SCENARIOS: list[Scenario] = [
    scenario
    for module in MODULES
    for scenario in fault_registry.SCENARIOS
    if scenario.module == module.__name__
]
assert len(SCENARIOS) == len(fault_registry.SCENARIOS), "a scenario module is missing from MODULES"

__all__ = ["MODULES", "SCENARIOS", "Scenario", "Unavailable", "run_scenario"]
