"""Runs the whole suite: every configuration of every workload, repeats interleaved.

``python -m benchmarks.run [--workloads images,small,small-mem] [--repeats 3] [--quick]
[--libraries bare,grainlite,grain] [--time-limit 10] [--write-docs]``, or
``python -m benchmarks.run --render benchmarks/results/results-....json [--write-docs]`` to show
(and write) the tables of a saved run again without measuring.

Round 1 runs every configuration once, then round 2 ..., so slow drift of a shared machine
spreads over all configurations instead of favouring one. Each run is a fresh subprocess
(:mod:`benchmarks.measure`), with grainlite byte-compiled first (:mod:`benchmarks.bytecode`). The
medians are printed as Markdown and the raw runs saved as JSON
under ``benchmarks/results/``; ``--write-docs`` also puts the tables in ``docs/performance.md``.
A failed run (verification included) is reported, and makes the command exit with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.bytecode import compile_tree
from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.workloads import WORKLOADS, configs_for

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
DOCS_PAGE = ROOT / "docs" / "performance.md"
_SLACK_S = 180  # Per-run allowance beyond the time limit: start-up, joining, verification.


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line)
    except (OSError, StopIteration):
        pass
    versions = {}
    for name in ("grain", "numpy", "cv2", "array_record"):
        try:
            from importlib.metadata import version

            dist = {"cv2": "opencv-python-headless", "array_record": "array-record"}.get(name, name)
            versions[name] = version(dist)
        except Exception:
            versions[name] = "?"
    return {
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
    }


def run_one(
    workload: str, config: str, data: Path, records: int, seed: int, time_limit: float
) -> dict[str, Any]:
    """One run in a fresh subprocess; its metrics, or an ``error`` entry if it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            sys.executable, "-m", "benchmarks.measure", "--workload", workload, "--config",
            config, "--data", str(data), "--records", str(records), "--seed", str(seed),
            "--time-limit", str(time_limit), "--out", str(out),
        ]  # fmt: skip
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        try:
            done = _run_as_group(command, env, time_limit + _SLACK_S)
        except subprocess.TimeoutExpired:
            return {"workload": workload, "config": config, "error": "timed out"}
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"workload": workload, "config": config, "error": tail[0], "stderr": done.stderr}
        return json.loads(out.read_text())


def _run_as_group(command: list[str], env: dict[str, str], timeout: float) -> Any:
    """Runs ``command`` in its own process group and, if it times out or this process is
    interrupted, kills the whole group: a library's workers (Grain's outlive their parent) go
    with the run instead of taking the CPUs of the runs after it."""
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--libraries", default="bare,grainlite,grain")
    parser.add_argument("--repeats", type=int, default=None, help="default 3, or 1 with --quick")
    parser.add_argument("--quick", action="store_true", help="tiny datasets, for tests")
    parser.add_argument(
        "--time-limit", type=float, default=10.0, help="seconds per run of time-limited workloads"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--render", type=Path, help="tables of a saved results JSON, no runs")
    parser.add_argument("--write-docs", action="store_true",
                        help=f"put the tables between the markers of {DOCS_PAGE.name}")  # fmt: skip
    args = parser.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.libraries = args.libraries.split(",")
    for name in args.workloads:
        if name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {args.repeats})")
    return args


def header(command: str, date: datetime.datetime, info: dict[str, Any], repeats: int) -> str:
    """The line above the tables: how, when and on what they were measured."""
    return (
        f"Measured with `{command.strip()}` on {date:%Y-%m-%d}: {info['cpu_model']}, "
        f"{info['affinity']} cores, Python {info['python']}, grain {info['versions']['grain']}. "
        f"Medians of {repeats} interleaved repeat(s)."
    )


def render(args: argparse.Namespace) -> int:
    """Prints (and with --write-docs, writes) the tables of a saved results file."""
    saved = json.loads(args.render.read_text())
    repeats = max(run["round"] for run in saved["runs"])
    date = datetime.datetime.fromisoformat(saved["date"])
    section = report.markdown(
        report.medians(saved["runs"]), header(saved["command"], date, saved["machine"], repeats)
    )
    print(section)
    if args.write_docs:
        report.write_into_page(DOCS_PAGE, section)
        print(f"wrote the tables into {DOCS_PAGE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the suite; returns 0 if every run succeeded and verified."""
    args = parse_args(argv)
    if args.render is not None:
        return render(args)
    plan = []
    for name in args.workloads:
        workload = WORKLOADS[name]
        records = workload.quick_records if args.quick else workload.records
        data = ensure_data(args.data_dir, workload, records, args.seed)
        for config in configs_for(workload):
            if config.library in args.libraries:
                plan.append((name, config.name, data, records))
    compile_tree(ROOT)
    runs = []
    for round_ in range(1, args.repeats + 1):
        for name, config, data, records in plan:
            result = run_one(name, config, data, records, args.seed, args.time_limit)
            result["round"] = round_
            runs.append(result)
            status = result.get("error") or f"{result['records_per_s']:,.0f} records/s"
            print(f"[round {round_}/{args.repeats}] {name} {config}: {status}", flush=True)
    table = report.medians(runs)
    info = machine()
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    today = datetime.datetime.now(datetime.UTC)
    section = report.markdown(table, header(command, today, info, args.repeats))
    print(section)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    raw = args.results_dir / f"results-{today:%Y%m%dT%H%M%SZ}.json"
    medians = [{"workload": w, "config": c, **row} for (w, c), row in table.items()]
    raw.write_text(json.dumps(
        {"command": command, "date": today.isoformat(), "machine": info, "runs": runs,
         "medians": medians}, indent=1,
    ))  # fmt: skip
    print(f"raw results: {raw}")
    if args.write_docs:
        report.write_into_page(DOCS_PAGE, section)
        print(f"wrote the tables into {DOCS_PAGE}")
    return 1 if any("error" in run for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
