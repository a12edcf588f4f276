"""Runs Grain 0.2.18's own unit tests from the installed wheel against grainlite.

``python -m grainlite_tests.support.grain_unit_tests [--jobs N] [--suite NAME ...]
[-- PYTEST_ARGS]``

The test files run in place (nothing of Grain is copied) under pytest with the
``grainlite_tests.support.grain_unit_adapter`` plugin, which maps Grain's internal module paths to
grainlite's public names; an abstract test class that the wheel ships without its concrete
subclass (``grain_unit_lists.CONCRETE_CLASSES``) runs through a subclass the adapter makes. The
files are shared out to ``--jobs`` pytest processes. The run
prints the tests it leaves out (each with its reason) and the known failures, then pass/fail
counts per suite, and exits nonzero when any test that is in neither list fails or errors.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from pathlib import Path

from grainlite_tests.support.grain_unit_adapter import grain_wheel_dir, iter_test_files
from grainlite_tests.support.grain_unit_lists import (
    CONCRETE_CLASSES,
    KNOWN_FAILING,
    LEFT_OUT,
    LEFT_OUT_FILES,
    SUITES,
)

ROOT = Path(__file__).resolve().parent.parent


def _suite_of(stem: str) -> str | None:
    for suite, stems in SUITES.items():
        if stem in stems:
            return suite
    return None


def _shares(files: list[Path], jobs: int) -> list[list[Path]]:
    """Files dealt to ``jobs`` groups, biggest first, so the groups take about the same time."""
    sized = sorted(files, key=lambda f: f.stat().st_size, reverse=True)
    groups: list[list[Path]] = [[] for _ in range(jobs)]
    weights = [0] * jobs
    for file in sized:
        smallest = weights.index(min(weights))
        groups[smallest].append(file)
        weights[smallest] += file.stat().st_size
    return [g for g in groups if g]


def _print_lists() -> None:
    print("Abstract test classes the wheel ships alone, run through a subclass made here:")
    for stem, classes in CONCRETE_CLASSES.items():
        for base, (concrete, _) in classes.items():
            print(f"  {stem}::{base} as {stem}::{concrete}")
    print(f"Left out of Grain's unit tests ({len(LEFT_OUT_FILES) + len(LEFT_OUT)}):")
    for key, reason in {**LEFT_OUT_FILES, **LEFT_OUT}.items():
        print(f"  {key}: {reason}")
    if KNOWN_FAILING:
        print(f"Known failing, not yet fixed ({len(KNOWN_FAILING)}; run, not counted):")
        for key, reason in KNOWN_FAILING.items():
            print(f"  {key}: {reason}")


def _results(xml_file: Path) -> list[tuple[str, str, str, str]]:
    """(file stem, test id, outcome, message) for every test case in a JUnit XML report."""
    if not xml_file.exists():
        return []
    rows = []
    for case in ElementTree.parse(xml_file).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = (classname or case.get("name", "")).split(".")
        stem = next((p for p in parts if p.endswith("_test")), classname)
        test_id = f"{classname}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = (
                    "xfailed"
                    if tag == "skipped"
                    and "xfail" in (found.get("type", "") + found.get("message", ""))
                    else tag
                )
                message = (
                    (found.get("message") or "").splitlines()[0][:160] if tag != "skipped" else ""
                )
                break
        rows.append((stem, test_id, outcome, message))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="default: all")
    parser.add_argument("--show-failures", action="store_true", help="print each failure's message")
    parser.add_argument("--reports", help="keep the JUnit XML and logs in this folder")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)

    suites = args.suite or sorted(SUITES)
    files = [
        f for f in iter_test_files() if f.stem not in LEFT_OUT_FILES and _suite_of(f.stem) in suites
    ]
    unlisted = [
        f.stem
        for f in iter_test_files()
        if f.stem not in LEFT_OUT_FILES and _suite_of(f.stem) is None
    ]
    _print_lists()
    if unlisted:
        print(f"Test files in no suite and not left out (add them to a list): {unlisted}")
        return 2

    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grain-unit-") as scratch:
        tmp = args.reports or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        processes = []
        for i, group in enumerate(_shares(files, max(1, args.jobs))):
            report = Path(tmp) / f"group{i}.xml"
            log = open(Path(tmp) / f"group{i}.log", "w")  # noqa: SIM115 (closed below)
            command = [
                sys.executable, "-m", "pytest", "-p", "grainlite_tests.support.grain_unit_adapter",
                "-p", "no:cacheprovider", "-q", "--timeout=60", "--continue-on-collection-errors",
                f"--junitxml={report}",
                f"--rootdir={grain_wheel_dir()}", "-c", os.devnull,
                *args.pytest_args, *map(str, group),
            ]  # fmt: skip
            processes.append(
                (subprocess.Popen(command, stdout=log, stderr=log, env=env), log, report)
            )
        rows = []
        for process, log, report in processes:
            process.wait()
            log.close()
            rows.extend(_results(report))
            if not report.exists():
                print(Path(log.name).read_text()[-4000:])
                return 2

    counts: dict[str, Counter[str]] = defaultdict(Counter)
    failures = []
    for stem, test_id, outcome, message in rows:
        counts[_suite_of(stem) or f"outside the suites ({stem})"][outcome] += 1
        if outcome in ("failure", "error"):
            failures.append((test_id, message))
    print(f"Grain 0.2.18 unit tests on grainlite ({time.monotonic() - started:.0f} s):")
    for suite in [*suites, *(s for s in counts if s not in suites)]:
        c = counts[suite]
        total = sum(c.values())
        print(
            f"  {suite}: {c['passed']} passed of {total}, {c['failure'] + c['error']} failed, "
            f"{c['xfailed']} known failing, {c['skipped']} skipped by Grain's own marks"
        )
    if failures:
        print(f"{len(failures)} tests failed that are in neither list:")
        for test_id, message in failures if args.show_failures else failures[:50]:
            print(f"  {test_id}: {message}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
