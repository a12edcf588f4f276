"""Benchmark of ``python -m grainlite convert`` on the images workload's source folder.

The folder is the images workload's JPEGs (benchmarks/workloads.py: 128x128, quality 90) laid out
as ImageFolder (``<label>/<index>.jpg``), made once from the workload's cached records. Measured,
each the median of ``--repeats`` interleaved rounds on a warm page cache:

- baseline: one process lists the folder in the converter's order, reads every file and writes its
  bytes unchanged into one ArrayRecord file (group_size:1, uncompressed): disk plus JPEG
  passthrough, the least any converter must do;
- convert: ``grainlite.tools.convert.convert`` with ``--workers`` processes and ``--num-shards``
  shards, end to end (scan, shards, checksums, manifest, rename); target >= 0.8x the baseline;
  and with one worker, to show what the workers add on this machine;
- beam: the same conversion as a Beam pipeline on DirectRunner, run with .venv-beam's Python
  (``bash scripts/beam-venv.sh`` makes it), wall time including that interpreter's start.

Every round runs each of them once, in turn, so load from other processes falls on all alike.
Every run is checked: the record count, and sampled records' image bytes equal the files.

Usage: ``python -m benchmarks.convert_run [--records N] [--workers 2] [--num-shards 8]
[--repeats 3] [--no-beam] [--data-dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data, load_records
from benchmarks.workloads import WORKLOADS, labels_of

ROOT = Path(__file__).resolve().parents[1]
BEAM_PYTHON = ROOT / ".venv-beam" / "bin" / "python"


def source_folder(data_dir: Path, records: int, seed: int) -> Path:
    """The images workload's JPEGs as an ImageFolder tree (made once, then reused)."""
    folder = data_dir / f"images-folder-n{records}-seed{seed}"
    if folder.exists():
        return folder
    partial = Path(f"{folder}.partial-{os.getpid()}")
    path = ensure_data(data_dir, WORKLOADS["images"], records, seed)
    for index, record in enumerate(load_records(path)):
        label = int(labels_of(index, seed))
        (partial / f"{label:04d}").mkdir(parents=True, exist_ok=True)
        (partial / f"{label:04d}" / f"{index:06d}.jpg").write_bytes(record[16:])
    os.replace(partial, folder)
    return folder


def baseline(src: Path, dst: Path) -> int:
    """Reads every image and writes it unchanged to one ArrayRecord file; returns the count."""
    from array_record.python.array_record_module import ArrayRecordWriter

    writer = ArrayRecordWriter(str(dst), "group_size:1,uncompressed")
    count = 0
    try:
        for label in sorted(os.listdir(src)):
            folder = f"{src}/{label}"
            for name in sorted(os.listdir(folder)):
                with open(f"{folder}/{name}", "rb") as file:
                    writer.write(file.read())
                count += 1
    finally:
        writer.close()
    return count


def check(dst: Path, src: Path, records: int) -> None:
    """The converted folder holds ``records`` records whose images are the source files."""
    from grainlite.tools.convert import open_converted

    source, decode = open_converted(dst)
    assert len(source) == records, (len(source), records)
    for key in np.linspace(0, records - 1, 16).astype(int).tolist():
        element = decode.map(source[key])
        assert element["image"] == (src / element["file_name"]).read_bytes(), key
    source.close()


def cpu_seconds() -> float:
    """CPU time used so far by this process and its reaped children (user + system)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def timed_interleaved(
    functions: dict[str, Callable[[], None]], repeats: int
) -> dict[str, tuple[float, float]]:
    """Median (wall seconds, CPU seconds) of each function over ``repeats`` rounds of all of them
    in turn. CPU time counts worker processes too, and moves less with the machine's load."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start, cpu = time.perf_counter(), cpu_seconds()
            function()
            times[name].append((time.perf_counter() - start, cpu_seconds() - cpu))
    return {
        name: (statistics.median(t[0] for t in values), statistics.median(t[1] for t in values))
        for name, values in times.items()
    }


def main(argv: list[str] | None = None) -> None:
    """Measures and prints the table."""
    parser = argparse.ArgumentParser(description="Benchmark of python -m grainlite convert.")
    parser.add_argument("--records", type=int, default=WORKLOADS["images"].records)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num-shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-beam", action="store_true", help="skip the Beam measurement")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    args = parser.parse_args(argv)
    from grainlite.tools.convert import convert

    src = source_folder(args.data_dir, args.records, args.seed)
    work = Path(tempfile.mkdtemp(prefix="convert-bench-"))

    def run_baseline() -> None:
        assert baseline(src, work / "baseline.array_record") == args.records

    def run_convert(workers: int) -> Callable[[], None]:
        def run() -> None:
            shutil.rmtree(work / "out", ignore_errors=True)
            convert(src, work / "out", num_shards=args.num_shards, workers=workers)

        return run

    def run_beam() -> None:
        shutil.rmtree(work / "beam", ignore_errors=True)
        command = [
            str(BEAM_PYTHON),
            "-m",
            "grainlite",
            "convert",
            str(src),
            str(work / "beam"),
            "--quiet",
            "--runner",
            "DirectRunner",
            "--num-shards",
            str(args.num_shards),
        ]
        subprocess.run(command, check=True, cwd=ROOT, capture_output=True)

    functions = {
        "baseline (read + write unchanged, 1 process)": run_baseline,
        f"convert --workers {args.workers}": run_convert(args.workers),
        "convert --workers 1 (for comparison)": run_convert(1),
    }
    if not args.no_beam and BEAM_PYTHON.exists():
        functions["Beam DirectRunner (incl. interpreter start)"] = run_beam
    try:
        load_before = os.getloadavg()[0]
        results = timed_interleaved(functions, args.repeats)
        check(work / "out", src, args.records)
        if run_beam in functions.values():
            check(work / "beam", src, args.records)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = next(iter(results.values()))[0]
    print(
        f"images source folder: {args.records} JPEGs, {args.num_shards} shards, median of "
        f"{args.repeats} interleaved rounds, cpus {os.cpu_count()}, load average "
        f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"
    )
    print(f"{'':46s} {'wall':>8s} {'images/s':>9s} {'vs base':>7s} {'CPU us/image':>12s}")
    for label, (seconds, cpu) in results.items():
        rate = args.records / seconds
        micros = cpu / args.records * 1e6
        print(f"{label:46s} {seconds:6.2f} s {rate:9,.0f} {base / seconds:6.2f}x {micros:12.0f}")


if __name__ == "__main__":
    sys.exit(main())
