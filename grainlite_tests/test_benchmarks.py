"""The benchmark suite runs end to end in quick mode, and its verifier catches wrong results.

The quick suite runs bare and grainlite (grain is slow to start); one grain Dataset-API run checks
the generator rule the verifier assumes for Grain's ``random_map``. ``python -m benchmarks.run``
measures all three.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.report import grain_peer
from benchmarks.verify import VerificationError, Verifier
from benchmarks.workloads import (
    WORKLOADS,
    augment_image,
    configs_for,
    dataset_rng,
    image_record,
    labels_of,
)
from grainlite.engine.forkserver_client import use_fork_server
from grainlite_tests.support.processes import loader_processes

ROOT = Path(__file__).resolve().parents[1]
SEED = 3


def small_batch(indices: list[int]) -> np.ndarray:
    """A small-workload batch holding ``indices`` with their true labels."""
    keys = np.asarray(indices, dtype=np.int64)
    return np.stack([keys, labels_of(keys, SEED)], axis=1)


def image_batch(keys: list[int]) -> dict[str, np.ndarray]:
    """An images batch of ``keys``, the i-th transformed with Philox(SEED + i) as Grain does."""
    items = [
        augment_image(image_record(key, SEED), np.random.Generator(np.random.Philox(SEED + i)))
        for i, key in enumerate(keys)
    ]
    return {name: np.stack([item[name] for item in items]) for name in items[0]}


def finish_images(verifier: Verifier, keys: list[int]) -> dict:
    position = {key: i for i, key in enumerate(keys)}
    return verifier.finish(
        read_record=lambda key: image_record(key, SEED),
        rng_for_key=lambda key: np.random.Generator(np.random.Philox(SEED + position[key])),
    )


@pytest.mark.timeout(10)
def test_verifier_accepts_a_whole_shuffled_epoch():
    verifier = Verifier(10, 4, SEED, full_epoch=True)
    for batch in ([3, 1, 4, 0], [9, 2, 6, 5], [8, 7]):
        verifier.add(small_batch(batch))
    assert verifier.finish() == {"records": 10, "batches": 3, "images_checked": 0}


@pytest.mark.timeout(10)
def test_verifier_fails_on_a_duplicated_index():
    verifier = Verifier(10, 4, SEED, full_epoch=False)
    verifier.add(small_batch([3, 1, 4, 0]))
    verifier.add(small_batch([9, 2, 3, 5]))
    with pytest.raises(VerificationError, match="index 3 was seen 2 times"):
        verifier.finish()


@pytest.mark.timeout(10)
def test_verifier_fails_when_an_epoch_misses_records():
    verifier = Verifier(10, 4, SEED, full_epoch=True)
    verifier.add(small_batch([3, 1, 4, 0]))
    verifier.add(small_batch([9, 2, 6, 5]))
    with pytest.raises(VerificationError, match="read 8 records, the epoch has 10"):
        verifier.finish()


@pytest.mark.timeout(10)
def test_verifier_fails_on_a_wrong_label():
    verifier = Verifier(10, 4, SEED, full_epoch=False)
    batch = small_batch([3, 1, 4, 0])
    batch[2, 1] += 1
    verifier.add(batch)
    with pytest.raises(VerificationError, match="label checksum"):
        verifier.finish()


@pytest.mark.timeout(10)
def test_verifier_fails_on_a_short_batch_before_the_end():
    verifier = Verifier(10, 4, SEED, full_epoch=False)
    verifier.add(small_batch([3, 1]))
    verifier.add(small_batch([9, 2, 6, 5]))
    with pytest.raises(VerificationError, match="batches of the wrong size"):
        verifier.finish()


@pytest.mark.timeout(10)
def test_verifier_allows_one_short_final_batch_per_worker():
    verifier = Verifier(10, 4, SEED, full_epoch=True, workers=2)
    for batch in ([0, 2, 4, 6], [1, 3, 5, 7], [8], [9]):
        verifier.add(small_batch(batch))
    assert verifier.finish()["records"] == 10


@pytest.mark.timeout(30)
def test_verifier_recomputes_images_and_fails_on_a_changed_pixel():
    keys = [5, 2, 7, 0, 1, 6, 3, 4]
    verifier = Verifier(8, 8, SEED, full_epoch=True)
    verifier.add(image_batch(keys))
    assert finish_images(verifier, keys)["images_checked"] == 4

    tampered = image_batch(keys)
    tampered["image"][1, 0, 0, 0] += 1 / 255
    verifier = Verifier(8, 8, SEED, full_epoch=True)
    verifier.add(tampered)
    with pytest.raises(VerificationError, match="image 2 differs"):
        finish_images(verifier, keys)


@pytest.mark.timeout(10)
def test_verifier_fails_when_images_used_another_generator():
    keys = [5, 2, 7, 0]
    verifier = Verifier(8, 4, SEED, full_epoch=False)
    verifier.add(image_batch(keys))
    with pytest.raises(VerificationError, match="differs from its recomputed value"):
        finish_images(verifier, list(reversed(keys)))


@pytest.mark.timeout(10)
def test_every_workload_measures_the_dataset_api_of_both_libraries_in_process_and_with_2_workers():
    for workload in WORKLOADS.values():
        dataset = {c.name: c for c in configs_for(workload) if c.api == "dataset"}
        assert sorted(dataset) == [
            "grain-ds-w0",
            "grain-ds-w2",
            "grainlite-ds-w0",
            "grainlite-ds-w2",
        ]
        assert dataset["grainlite-ds-w2"].label == "grainlite Dataset API mp_prefetch W=2"
        assert dataset["grain-ds-w0"].label == "grain Dataset API in-process"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("config", "peer"),
    [("grainlite-ds-w0", "grain-ds-w0"), ("grainlite-ds-w2", "grain-ds-w2"),
     ("grainlite-w2", "grain-w2"), ("grainlite-shm-w0", "grain-w0"), ("grain-ds-w2", None),
     ("grain-best-w0", "grain-w0"), ("bare", None)],
)  # fmt: skip
def test_each_row_is_compared_with_grain_through_the_same_api_and_worker_count(config, peer):
    assert grain_peer(config) == peer


@pytest.mark.timeout(30)
@pytest.mark.parametrize("library", ["grain", "grainlite"])
def test_the_dataset_rng_rule_is_the_generator_random_map_gives_each_position(library):
    module = pytest.importorskip(library)
    seed = 11
    draws = (
        module.MapDataset.range(50)
        .shuffle(seed=seed)
        .random_map(lambda x, rng: rng.integers(0, 2**62, size=4).tolist(), seed=seed)
    )
    for position in (0, 1, 17, 49):
        assert draws[position] == dataset_rng(seed, position).integers(0, 2**62, size=4).tolist()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_suite_runs_bare_and_grainlite_and_every_run_verifies(tmp_path):
    command = [
        sys.executable, "-m", "benchmarks.run", "--quick", "--libraries", "bare,grainlite",
        "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| bare loop |" in done.stdout and "| target" in done.stdout
    assert "| grainlite Dataset API mp_prefetch W=2 |" in done.stdout
    (results,) = (tmp_path / "results").glob("results-*.json")
    runs = json.loads(results.read_text())["runs"]
    expected = {w.name: 5 + 2 * (w.storage == "memory") for w in WORKLOADS.values()}
    assert {w: sum(r["workload"] == w for r in runs) for w in WORKLOADS} == expected
    for run in runs:
        assert "error" not in run, run
        assert run["verification"]["records"] == WORKLOADS[run["workload"]].quick_records
        assert run["children_left_after_close"] == []
        workers = 2 if run["config"].endswith("w2") else 0
        assert run["peak_processes"] == 1 + loader_processes(workers)  # and the parent
    assert all(r["verification"]["images_checked"] > 0 for r in runs if r["workload"] == "images")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_grain_dataset_api_run_on_images_verifies_with_the_dataset_rng_rule(tmp_path):
    pytest.importorskip("grain")
    from benchmarks.datagen import ensure_data

    workload = WORKLOADS["images"]
    data = ensure_data(tmp_path / "data", workload, workload.quick_records, SEED)
    out = tmp_path / "result.json"
    command = [
        sys.executable, "-m", "benchmarks.measure", "--workload", "images", "--config",
        "grain-ds-w0", "--data", str(data), "--records", str(workload.quick_records),
        "--seed", str(SEED), "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["label"] == "grain Dataset API in-process"
    assert result["verification"]["records"] == workload.quick_records
    assert result["verification"]["images_checked"] > 0


def test_runs_are_measured_with_grainlite_byte_compiled_as_an_install_leaves_it(tmp_path):
    from benchmarks.bytecode import compile_tree

    package = tmp_path / "grainlite"
    package.mkdir()
    (package / "module.py").write_text("VALUE = 1\n")
    compile_tree(tmp_path)
    assert [p.name.split(".")[0] for p in (package / "__pycache__").iterdir()] == ["module"]
    (package / "broken.py").write_text("def (:\n")
    with pytest.raises(RuntimeError, match=r"byte-compiling .*grainlite failed"):
        compile_tree(tmp_path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("api", "batches"), [("loader", "rows"), ("dataset", "rows"), ("dataset", "stacked")]
)
def test_the_worker_loop_probe_times_each_kind_of_worker(tmp_path, api, batches):
    from benchmarks.datagen import ensure_data

    data = ensure_data(tmp_path, WORKLOADS["images"], WORKLOADS["images"].quick_records, SEED)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.worker_loop", "--probe", api, batches,
         "glibc defaults", str(data), "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ms_per_batch"] > 0 and result["page_faults"] >= 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["loader", "dataset"])
def test_the_parallel_efficiency_probe_rates_a_window_after_the_fifth_batch(tmp_path, api):
    from benchmarks.datagen import ensure_data

    data = ensure_data(tmp_path, WORKLOADS["images"], 1024, SEED)  # 8 batches of 128
    for workers in (0, 2):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.parallel_efficiency", "--probe", "images", api,
             str(workers), "0.5", "--data", str(data)],
            cwd=ROOT, capture_output=True, text=True, timeout=100,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["records_per_s"] > 0 and result["parent_cpu_us_per_record"] > 0


@pytest.mark.timeout(180)
def test_the_parallel_efficiency_run_reports_the_machines_ceiling_from_runs_side_by_side(
    tmp_path,
):
    from benchmarks.datagen import ensure_data

    data = ensure_data(tmp_path, WORKLOADS["images"], 1024, SEED)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.parallel_efficiency", "--apis", "loader", "--rounds",
         "1", "--seconds", "0.5", "--data", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    together = re.search(r"2 x W=0 at once: ([\d,]+) records/s", done.stdout)
    assert together is not None and int(together[1].replace(",", "")) > 0, done.stdout
    row = next(line for line in done.stdout.splitlines() if line.startswith("| loader |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    efficiency, side_by_side, ceiling, relative = cells[3], cells[4], cells[5], cells[6]
    assert side_by_side == together[1]
    alone = float(cells[1].split()[0].replace(",", ""))  # the median of the runs at W=0
    rate = float(side_by_side.replace(",", ""))
    assert float(ceiling) == pytest.approx(rate / (2 * alone), abs=0.01)
    assert float(relative) == pytest.approx(float(efficiency) / float(ceiling), abs=0.05)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("config", ["grainlite-w2", "grainlite-ds-w2"])
def test_the_memory_breakdown_splits_the_peak_by_process_and_a_workers_start_up_by_step(
    tmp_path, config
):
    from benchmarks.datagen import ensure_data

    records = WORKLOADS["images"].quick_records
    data = ensure_data(tmp_path, WORKLOADS["images"], records, 0)
    command = [sys.executable, "-m", "benchmarks.memory", "--config", config, "--data", str(data),
               "--records", str(records)]  # fmt: skip
    tree, steps = tmp_path / "tree.json", tmp_path / "steps.json"
    for extra, out in (([], tree), (["--imports"], steps)):
        done = subprocess.run(
            [*command, *extra, "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
            timeout=150,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    peak = json.loads(tree.read_text())
    roles = sorted(row["role"] for row in peak["peak"])
    assert roles == ["fork server"] * use_fork_server() + ["parent", "worker", "worker"]
    assert peak["records"] == records
    assert peak["peak_pss_mb"] * 1024 * 1024 == sum(row["Pss"] for row in peak["peak"])
    # The workers' batch slabs are in the peak (a worker caught starting or ending may have none).
    assert sum(row["Pss_Shmem"] for row in peak["peak"] if row["role"] == "worker") > 0
    assert any(row["shm_maps"] >= 1 for row in peak["peak"] if row["role"] == "worker")
    names = [name for name, _, _ in json.loads(steps.read_text())["steps"]]
    assert names == ["interpreter", "import grainlite.engine.child", "unpickle the pipeline"]


def test_the_array_record_read_ways_each_read_every_key_and_report_a_rate(
    tmp_path, capsys, monkeypatch
):
    from benchmarks import array_record_reads
    from benchmarks.datagen import ensure_data, load_records

    path = ensure_data(tmp_path, WORKLOADS["small"], 3000, 0)
    memory = load_records(path)
    keys = np.random.default_rng(1).permutation(len(memory))[:2500]
    seen: list[bytes] = []
    consume = array_record_reads._consume
    monkeypatch.setattr(
        array_record_reads, "_consume", lambda records: (seen.extend(records), consume(records))
    )
    runs = array_record_reads.ways(path, keys, memory)
    for name, run in runs.items():
        seen.clear()
        run()
        if "read only" not in name:  # every record reaches the work, in the keys' order
            assert seen == [memory[k] for k in keys], name
    arguments = ["--records", "2000", "--repeats", "1", "--file-records", "3000"]
    assert array_record_reads.main([*arguments, "--data-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out
    assert all(f"| {name} |" in table for name in runs)
