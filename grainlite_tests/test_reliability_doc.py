"""docs/reliability.md's table comes from the fault suite: every scenario has its row."""

from __future__ import annotations

from benchmarks import faults
from grainlite_tests.support.fault_suite import SCENARIOS


def test_every_scenario_of_the_suite_has_a_row_in_the_published_table():
    page = faults.DOC.read_text()
    generated = page[page.index(faults.BEGIN) : page.index(faults.END)]
    missing = [s.name for s in SCENARIOS if f"| {s.name} |" not in generated]
    assert not missing, f"rerun `python -m benchmarks.faults --write-docs`; missing: {missing}"


def test_the_table_escapes_pipes_and_has_one_row_per_scenario():
    text = faults.table([["g", "a | b", "p", "r", "1.00 s"]])
    assert text.splitlines()[2] == "| g | a \\| b | p | r | 1.00 s |"
