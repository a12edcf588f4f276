"""Reading from object storage, side by side: grainlite from local disk and from a bucket, LitData,
MosaicML Streaming and Grain through fsspec, on the same data behind the same slow network.

``python -m benchmarks.remote_run [--workloads images,small] [--repeats 3] [--quick]
[--libraries grainlite-local,grainlite-remote,litdata,mosaic,grain-fsspec] [--records N]
[--shards 8] [--latency 0.02] [--jitter 0.005] [--bandwidth 1e9] [--time-limit 15]
[--epoch-limit 150]
[--write-docs]``, or ``python -m benchmarks.remote_run --render FILE [--write-docs]``

- Data: each workload's records (:mod:`benchmarks.datagen`) split into ``--shards`` contiguous
  ArrayRecord shards, and the same records as LitData chunks and MDS shards (written in the
  peers' environments) and as flat files (:mod:`benchmarks.remote_data`).
- Server: SeaweedFS on 127.0.0.1 (``weed mini``, grainlite_tests/support/seaweed.py), everything
  uploaded under ``arrayrecord/``, ``litdata/``, ``mds/`` and ``flat/``.
- Network: every remote reader goes through one fault proxy process
  (grainlite_tests/support/fault_proxy.py) adding ``--latency`` +- ``--jitter`` seconds to each
  request and capping bandwidth at ``--bandwidth`` bits/s each way; no faults.
- Runs: each (workload, library) is a fresh process of the library's environment
  (:mod:`benchmarks.remote_measure`): shuffled, 2 workers, the workload's batch size, two epochs
  (cold, then warm with the same cache), each verified; round 1 runs every configuration once,
  then round 2 ... (interleaved); medians are printed with the ratios and the targets.

Peers: LitData runs in .venv-litdata (``scripts/litdata-venv.sh``: LitData refuses an http://
endpoint while obstore is installed), MosaicML Streaming in .venv-mosaic
(``scripts/mosaic-venv.sh``: it pins numpy < 2.2), Grain and grainlite in this interpreter. A
library whose environment is missing is reported as not run (the others still run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.datagen import DEFAULT_DATA_DIR, ensure_data
from benchmarks.remote_data import RemoteData, ensure_remote_data
from benchmarks.run import _run_as_group, machine
from benchmarks.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
DOCS_PAGE = ROOT / "docs" / "performance.md"
START, END = "<!-- remote-results:start -->", "<!-- remote-results:end -->"
LIBRARIES = ("grainlite-local", "grainlite-remote", "litdata", "mosaic", "grain-fsspec")
LABELS = {
    "grainlite-local": "grainlite, local disk",
    "grainlite-remote": "grainlite, bucket",
    "litdata": "LitData 0.2.76",
    "mosaic": "MosaicML Streaming 0.13.0",
    "grain-fsspec": "Grain 0.2.18 + s3fs (a GET per record)",
}
# Where each library's data lives in the bucket.
PREFIX = {
    "grainlite-local": "",
    "grainlite-remote": "arrayrecord",
    "litdata": "litdata",
    "mosaic": "mds",
    "grain-fsspec": "flat",
}
METRICS = (
    "cold_records_per_s",
    "warm_records_per_s",
    "first_batch_s",
    "peak_cache_mb",
    "cpu_us_per_record",
    "tree_cpu_us_per_record",
    "peak_pss_mb",
)
_SLACK_S = 300  # Per-run allowance: start-up, two epochs of the slowest peer, verification.


def python_of(library: str) -> Path:
    """The interpreter of ``library``'s environment."""
    if library == "litdata":
        return ROOT / ".venv-litdata" / "bin" / "python"
    if library == "mosaic":
        return ROOT / ".venv-mosaic" / "bin" / "python"
    return Path(sys.executable)


def unavailable(library: str) -> str | None:
    """Why ``library`` cannot run here, or None."""
    import importlib.util

    if library in ("litdata", "mosaic"):
        script = "scripts/litdata-venv.sh" if library == "litdata" else "scripts/mosaic-venv.sh"
        if not python_of(library).exists():
            return f"no {python_of(library).parent.parent.name} (run {script})"
        return None
    if library == "grain-fsspec":
        for module in ("grain", "s3fs"):
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        return None
    if library == "grainlite-remote":
        if importlib.util.find_spec("grainlite.sources.remote") is None:
            return "this grainlite reads no s3:// paths yet"
        if importlib.util.find_spec("obstore") is None:
            return "the remote extra (obstore) is not installed"
    return None


def convert(library: str, data: RemoteData) -> Path:
    """The workload's records in ``library``'s format (written once, in its environment)."""
    kind = {"litdata": "litdata", "mosaic": "mds"}[library]
    out = data.root / kind
    done = out / ".complete"
    if done.exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    command = [
        str(python_of(library)), "-m", "benchmarks.remote_convert", "--format", kind,
        "--data", str(data.root), "--records", str(data.records), "--shards", str(data.shards),
        "--out", str(out),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done_run = _run_as_group(command, env, 1800)
    if done_run.returncode != 0:
        raise RuntimeError(f"converting to {kind} failed:\n{done_run.stderr[-3000:]}")
    done.touch()
    return out


def upload(s3: Any, folder: Path, prefix: str) -> int:
    """Every file under ``folder`` to ``prefix/`` (relative paths kept); returns the bytes."""
    total = 0
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            s3.put_file(path, f"{prefix}/{path.relative_to(folder).as_posix()}")
            total += path.stat().st_size
    return total


@contextlib.contextmanager
def serving(
    plans: list[tuple[str, RemoteData, list[str]]], args: argparse.Namespace
) -> Iterator[tuple[str, dict[str, str], dict[str, int]]]:
    """A SeaweedFS server holding every plan's data, behind a fault proxy process; yields the
    bucket URL, the S3 variables pointing at the proxy, and the proxy's counts (filled at the
    end)."""
    from grainlite_tests.support.fault_proxy import Faults, proxy_process
    from grainlite_tests.support.seaweed import running_seaweed

    with running_seaweed(bucket="remote-bench") as s3:
        for name, data, libraries in plans:
            upload(s3, data.root / "arrayrecord", f"arrayrecord/{name}")
            if "grain-fsspec" in libraries:
                upload(s3, data.root / "flat", f"flat/{name}")
            if "litdata" in libraries:
                upload(s3, data.root / "litdata", f"litdata/{name}")
            if "mosaic" in libraries:
                upload(s3, data.root / "mds", f"mds/{name}")
        faults = Faults(latency_s=args.latency, jitter_s=args.jitter, bandwidth_bps=args.bandwidth)
        with proxy_process((s3.host, s3.port), faults, seed=args.seed) as (url, counts):
            yield s3.url(), s3.environ(endpoint_url=url), counts


def run_one(
    library: str,
    name: str,
    data: RemoteData,
    bucket_url: str,
    s3_env: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One measured run in a fresh process of the library's environment."""
    with tempfile.TemporaryDirectory(prefix="remote-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cache = Path(tmp) / "cache"
        cache.mkdir()
        prefix = PREFIX[library]
        command = [
            str(python_of(library)), "-m", "benchmarks.remote_measure", "--library", library,
            "--workload", name, "--data", str(data.root), "--records", str(data.records),
            "--shards", str(data.shards), "--seed", str(args.seed),
            "--url", f"{bucket_url}{prefix}/{name}/" if prefix else "",
            "--cache-dir", str(cache), "--time-limit", str(args.time_limit), "--out", str(out),
            "--epoch-limit", str(args.epoch_limit),
        ]  # fmt: skip
        env = dict(os.environ, **s3_env, PYTHONPATH=str(ROOT))
        try:
            done = _run_as_group(
                command, env, 2 * max(args.time_limit, args.epoch_limit) + _SLACK_S
            )
        except Exception as e:  # TimeoutExpired
            return {"library": library, "workload": name, "error": f"{type(e).__name__}"}
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return {"library": library, "workload": name, "error": tail[0], "stderr": done.stderr}
        return json.loads(out.read_text())


def medians(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(workload, library) -> median of every metric; a failed run makes the row failed."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        grouped.setdefault((run["workload"], run["library"]), []).append(run)
    table: dict[tuple[str, str], dict[str, Any]] = {}
    for key, group in grouped.items():
        failed = [run for run in group if "error" in run]
        if failed:
            table[key] = {"error": failed[0]["error"], "repeats": len(group)}
            continue
        table[key] = {m: statistics.median(run[m] for run in group) for m in METRICS}
        table[key]["partial"] = any(run.get("partial_epochs") for run in group)
        table[key]["repeats"] = len(group)
    return table


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if abs(value) < 100 else f"{value:.0f}"


def targets(table: dict, workload: str) -> list[tuple[str, float | None, float, bool]]:
    """(target, measured, bound, at_most) for ``workload`` (the issue's targets)."""

    def row(library: str) -> dict[str, Any] | None:
        found = table.get((workload, library))
        return None if not found or "error" in found else found

    local, remote = row("grainlite-local"), row("grainlite-remote")
    peers = [r["cold_records_per_s"] for r in (row("litdata"), row("mosaic")) if r]
    fsspec = row("grain-fsspec")

    def ratio(a: dict | None, b: dict | None, metric: str, other: str | None = None) -> Any:
        if a is None or b is None or not b[other or metric]:
            return None
        return a[metric] / b[other or metric]

    first = None if not (local and remote) else remote["first_batch_s"] - local["first_batch_s"]
    return [
        (
            "cold (epoch 1) / grainlite local",
            ratio(remote, local, "cold_records_per_s"),
            0.75,
            False,
        ),
        (
            "warm (epoch 2) / grainlite local",
            ratio(remote, local, "warm_records_per_s"),
            0.95,
            False,
        ),
        ("first batch minus local's (s)", first, 0.5, True),
        (
            "cold / the better of LitData and Mosaic (cold)",
            None if not (remote and peers) else remote["cold_records_per_s"] / max(peers),
            1.5,
            False,
        ),
        ("cold / Grain + s3fs (cold)", ratio(remote, fsspec, "cold_records_per_s"), 5.0, False),
    ]


def markdown(table: dict, header: str, skipped: dict[str, str]) -> str:
    """The results section: a header, one table per workload, the targets on images."""
    blocks = [header]
    for workload in WORKLOADS:
        if not any(key[0] == workload for key in table):
            continue
        blocks.append(f"**{workload}** ({WORKLOADS[workload].description}):")
        lines = [
            "| library | cold records/s | warm records/s | first batch (s) | peak cache (MB) "
            "| CPU µs/record, training process | CPU µs/record, process tree | peak PSS tree (MB) "
            "| cold vs grainlite local | cold vs grainlite bucket |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        local = table.get((workload, "grainlite-local"))
        remote = table.get((workload, "grainlite-remote"))
        for library in LIBRARIES:
            r = table.get((workload, library))
            if r is None:
                if library in skipped:
                    lines.append(f"| {LABELS[library]} | not run: {skipped[library]} |||||||||")
                continue
            if "error" in r:
                lines.append(f"| {LABELS[library]} | FAILED: {r['error'][:100]} |||||||||")
                continue

            def vs(other: dict | None, r: dict = r) -> str:
                if not other or "error" in other:
                    return "n/a"
                return _fmt(r["cold_records_per_s"] / other["cold_records_per_s"])

            partial = " (part of the epoch)" if r.get("partial") else ""
            lines.append(
                f"| {LABELS[library]} | {_fmt(r['cold_records_per_s'])}{partial} "
                f"| {_fmt(r['warm_records_per_s'])} | {_fmt(r['first_batch_s'], 3)} "
                f"| {_fmt(r['peak_cache_mb'], 1)} | {_fmt(r['cpu_us_per_record'])} "
                f"| {_fmt(r['tree_cpu_us_per_record'])} | {_fmt(r['peak_pss_mb'], 0)} "
                f"| {vs(local)} | {vs(remote)} |"
            )
        blocks.append("\n".join(lines))
    if any(key[0] == "images" for key in table):
        lines = [
            "| target (images, medians above) | measured | bound | result |",
            "|---|--:|--:|---|",
        ]
        for text, value, bound, at_most in targets(table, "images"):
            passed = None if value is None else (value <= bound if at_most else value >= bound)
            verdict = "not measured" if passed is None else ("pass" if passed else "**FAIL**")
            sign = "≤" if at_most else "≥"
            lines.append(f"| {text} | {_fmt(value)} | {sign} {bound} | {verdict} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def write_into_page(page: Path, section: str) -> None:
    """Replaces what is between the remote-results markers of ``page`` with ``section``."""
    text = page.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{page} has no {START} ... {END} markers")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    page.write_text(f"{before}{START}\n{section}\n{END}{after}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="images,small")
    parser.add_argument("--libraries", default=",".join(LIBRARIES))
    parser.add_argument("--repeats", type=int, default=None, help="default 3, or 1 with --quick")
    parser.add_argument("--quick", action="store_true", help="tiny datasets, for tests")
    parser.add_argument("--records", type=int, help="records per workload (default: the "
                        "workload's, or its quick size with --quick)")  # fmt: skip
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.020, help="seconds per request")
    parser.add_argument("--jitter", type=float, default=0.005, help="+- seconds, uniform")
    parser.add_argument("--bandwidth", type=float, default=1e9, help="bits/s each way")
    parser.add_argument("--time-limit", type=float, default=15.0,
                        help="seconds per epoch of time-limited workloads (small)")  # fmt: skip
    parser.add_argument("--epoch-limit", type=float, default=150.0,
                        help="seconds at most per epoch of images (a slower library's rate is "
                        "then that of the part it read, marked in the table)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help=f"put the tables between the remote markers of {DOCS_PAGE.name}",
    )
    parser.add_argument("--render", type=Path, help="the tables of a saved results JSON, no runs")
    args = parser.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.libraries = args.libraries.split(",")
    for name in args.workloads:
        if name not in ("images", "small"):
            parser.error(f"unknown workload {name!r}; choose from images, small")
    for library in args.libraries:
        if library not in LIBRARIES:
            parser.error(f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    return args


def header(saved: dict[str, Any]) -> str:
    """The line above the tables: how, when, on what and through what network."""
    a, info, counts = saved["args"], saved["machine"], saved.get("proxy", {})
    date = datetime.datetime.fromisoformat(saved["date"])
    rounds = max((run["round"] for run in saved["runs"]), default=0)
    load = saved.get("load_average", [0.0])[0]
    return (
        f"Measured with `{saved['command'].strip()}` on {date:%Y-%m-%d}: {info['cpu_model']}, "
        f"{info['affinity']} cores, shared with other work (load average {load:.1f} at the "
        f"end), Python {info['python']}. SeaweedFS on 127.0.0.1 behind the fault proxy: "
        f"{a['latency'] * 1000:g} ms ± {a['jitter'] * 1000:g} ms per request, "
        f"{a['bandwidth'] / 1e9:g} Gbit/s each way; {a['shards']} shards; shuffled, 2 workers; "
        f"medians of {rounds} interleaved round(s)."
        + (
            f" Proxy: {counts['requests']:,} requests, {counts['bytes_down'] / 1e6:,.0f} MB down."
            if counts
            else ""
        )
    )


def render(path: Path, write_docs: bool) -> int:
    """Prints (and with --write-docs, writes) the tables of a saved results file, finished or
    not (the runner saves it after every run)."""
    saved = json.loads(path.read_text())
    # Only whole rounds (a run still going when the file was saved has its later rounds cut).
    per_round: dict[int, int] = {}
    for run in saved["runs"]:
        per_round[run["round"]] = per_round.get(run["round"], 0) + 1
    whole = {r for r, n in per_round.items() if n == per_round.get(1)}
    saved = {**saved, "runs": [run for run in saved["runs"] if run["round"] in whole]}
    section = markdown(medians(saved["runs"]), header(saved), saved["skipped"])
    print(section)
    if write_docs:
        write_into_page(DOCS_PAGE, section)
        print(f"wrote the tables into {DOCS_PAGE}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns 0 if every run that could run succeeded and verified."""
    args = parse_args(argv)
    if args.render is not None:
        return render(args.render, args.write_docs)
    skipped = {lib: why for lib in args.libraries if (why := unavailable(lib))}
    libraries = [lib for lib in args.libraries if lib not in skipped]
    for library, why in skipped.items():
        print(f"not run: {library}: {why}", flush=True)
    command = "python -m benchmarks.remote_run " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    today = datetime.datetime.now(datetime.UTC)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    raw = args.results_dir / f"remote-{today:%Y%m%dT%H%M%SZ}.json"
    saved: dict[str, Any] = {
        "command": command,
        "date": today.isoformat(),
        "machine": machine(),
        "args": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list))},
        "skipped": skipped,
        "runs": [],
    }
    plans = []
    for name in args.workloads:
        workload = WORKLOADS[name]
        records = args.records or (workload.quick_records if args.quick else workload.records)
        source = ensure_data(args.data_dir, workload, records, args.seed)
        data = ensure_remote_data(args.data_dir, source, workload, records, args.seed, args.shards)
        for library in ("litdata", "mosaic"):
            if library in libraries:
                convert(library, data)
        plans.append((name, data, libraries))
    with serving(plans, args) as (bucket_url, s3_env, counts):
        for round_ in range(1, args.repeats + 1):
            for name, data, libs in plans:
                for library in libs:
                    result = run_one(library, name, data, bucket_url, s3_env, args)
                    result["round"] = round_
                    saved["runs"].append(result)
                    saved["load_average"] = os.getloadavg()
                    raw.write_text(json.dumps(saved, indent=1))  # after every run
                    status = result.get("error") or (
                        f"cold {result['cold_records_per_s']:,.0f}/s, "
                        f"warm {result['warm_records_per_s']:,.0f}/s, "
                        f"first batch {result['first_batch_s']:.3f} s"
                    )
                    print(f"[round {round_}/{args.repeats}] {name} {library}: {status}", flush=True)
    saved["proxy"] = counts
    table = medians(saved["runs"])
    saved["medians"] = [{"workload": w, "library": lib, **r} for (w, lib), r in table.items()]
    raw.write_text(json.dumps(saved, indent=1))
    render(raw, args.write_docs)
    print(f"raw results: {raw}")
    return 1 if any("error" in run for run in saved["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
