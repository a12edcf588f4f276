"""iterator.stats(): the numbers add up, for the DataLoader and the Dataset API, in-process and
with worker processes; the table, the JSON, time to first element, and enable_profiling logging."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest

import grainlite as grain
from grainlite.stats import profiling
from grainlite.stats.counters import SampleGaps


class Square(grain.MapTransform):
    def map(self, x):
        return np.array([x * x])


class KeepEven(grain.FilterTransform):
    def filter(self, x):
        return x % 2 == 0


class Twice(grain.experimental.FlatMapTransform):
    max_fan_out = 2

    def flat_map(self, x):
        return [x, x]


class Spin(grain.MapTransform):
    """Busy for ``seconds`` per element (CPU time, like a real transform)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def map(self, x):
        end = time.perf_counter() + self.seconds
        while time.perf_counter() < end:
            pass
        return x


def loader(records, operations, worker_count=0, **kwargs):
    return grain.DataLoader(
        data_source=grain.RangeDataSource(0, records, 1),
        sampler=grain.IndexSampler(records, grain.NoSharding(), num_epochs=1, seed=0),
        operations=operations,
        worker_count=worker_count,
        **kwargs,
    )


def rows(stats):
    return {(stage.name, stage.where): stage for stage in stats.stages}


def counts(table, name, where):
    """(elements in, elements out) of one row."""
    stage = table[(name, where)]
    return stage.elements_in, stage.elements_out


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "2-workers"])
def test_loader_stats_count_every_element_and_stay_within_the_wall_time(worker_count):
    with iter(loader(64, [Square(), grain.Batch(4)], worker_count)) as iterator:
        delivered = sum(1 for _ in iterator)
        stats = iterator.stats()
    where = "workers" if worker_count else "in-process"
    table = rows(stats)
    read = table[("read (RangeDataSource)", where)]
    square, batch = table[("Square", where)], table[("Batch", where)]
    assert (read.elements_in, read.elements_out) == (64, 64)
    assert (square.elements_in, square.elements_out) == (64, 64)
    assert (batch.elements_in, batch.elements_out) == (64, 16)
    assert delivered == stats.elements_delivered == 16
    wait = table[("wait for data", "consumer")]
    assert (wait.elements_in, wait.elements_out) == (16, 16)
    assert 0 < stats.time_to_first_element <= stats.wall_seconds
    assert 0 < stats.wait_seconds <= stats.wall_seconds
    if worker_count:
        assert stats.worker_count == 2 and stats.buffer is not None and stats.buffer.size == 1
        transport = table[("transport", "workers")]
        # Every batch was made in a worker and crossed to the parent.
        assert transport.elements_in == 16
        assert 0 < stats.time_to_first_element == stats.start_up_seconds <= stats.wall_seconds
        assert sum(s.share for s in stats.stages if s.where == "workers") <= 1.0 + 1e-9
    else:
        assert stats.buffer is None
        in_process = sum(s.seconds for s in stats.stages if s.where == "in-process")
        assert in_process <= stats.wall_seconds


@pytest.mark.parametrize("worker_count", [0, 2], ids=["in-process", "2-workers"])
def test_counts_carry_on_across_set_state(worker_count):
    with iter(loader(64, [Square(), grain.Batch(4)], worker_count)) as iterator:
        for _ in range(5):
            next(iterator)
        iterator.set_state(iterator.get_state())  # a new chain (and, with workers, a restart)
        delivered = 5 + sum(1 for _ in iterator)
        stats = iterator.stats()
    where = "workers" if worker_count else "in-process"
    table = rows(stats)
    assert delivered == stats.elements_delivered == 16
    if worker_count:  # the restart drops what was in flight: the workers make it again
        squared, _ = counts(table, "Square", where)
        assert squared >= 64
        assert counts(table, "Batch", where) == (squared, squared // 4)
    else:
        assert counts(table, "Square", where) == (64, 64)
        assert counts(table, "Batch", where) == (64, 16)


def test_filter_and_flat_map_counts_follow_the_elements_through_the_chain():
    with iter(loader(40, [KeepEven(), Twice(), grain.Batch(8)])) as iterator:
        delivered = sum(1 for _ in iterator)
        table = rows(iterator.stats())
    assert counts(table, "KeepEven", "in-process") == (40, 20)
    assert counts(table, "Twice", "in-process") == (20, 40)
    assert table[("Batch", "in-process")].elements_out == delivered == 5


def test_counts_mid_stream_match_what_was_delivered_not_what_was_read_ahead():
    with iter(loader(1000, [Square()])) as iterator:
        for _ in range(10):
            next(iterator)
        table = rows(iterator.stats())
    assert table[("Square", "in-process")].elements_out == 10
    assert table[("read (RangeDataSource)", "in-process")].elements_out >= 10  # read in chunks


def test_sampled_time_of_a_transform_that_takes_all_the_time_estimates_the_run():
    with iter(loader(400, [Spin(0.0005)])) as iterator:
        begin = time.perf_counter()
        for _ in iterator:
            pass
        elapsed = time.perf_counter() - begin  # nearly all of it spinning, however busy the CPU
        spin = rows(iterator.stats())[("Spin", "in-process")]
    assert spin.sampled
    # Every element spins at least 0.5 ms, and each timed one stands for the elements since the
    # last: the estimate cannot fall below that, however busy the machine (nor exceed the run).
    assert spin.seconds_per_element >= 0.00045
    assert spin.seconds <= elapsed


def test_sample_gaps_start_dense_average_64_later_and_never_lock_onto_a_batch_size():
    gaps = SampleGaps()
    values = [gaps.next_gap() for _ in range(16000)]
    assert 1.5 <= np.mean(values[:16]) <= 2.5
    assert 6 <= np.mean(values[16:128]) <= 10
    assert 28 <= np.mean(values[128:256]) <= 36
    assert 60 <= np.mean(values[256:]) <= 68
    assert min(values) >= 1 and max(values) <= 127
    again = SampleGaps()
    assert values == [again.next_gap() for _ in range(16000)]  # the same every time
    positions = np.cumsum(values[256:])
    for batch_size in (8, 16, 32, 64):
        completing = np.mean(positions % batch_size == 0)  # sampled elements that end a batch
        assert completing == pytest.approx(1 / batch_size, rel=0.5)


def test_time_to_first_element_includes_starting_the_worker_processes():
    with iter(loader(8, [Square()], worker_count=1)) as iterator:
        begin = time.perf_counter()
        next(iterator)
        elapsed = time.perf_counter() - begin
        first = iterator.stats().time_to_first_element
    assert 0.9 * elapsed - 0.002 <= first <= elapsed


def test_stats_are_a_table_and_json():
    with iter(loader(32, [Square(), grain.Batch(4)])) as iterator:
        list(iterator)
        stats = iterator.stats()
    data = json.loads(json.dumps(stats.to_dict()))
    assert data["elements_delivered"] == 8
    assert [s["name"] for s in data["stages"]] == [
        "read (RangeDataSource)", "Square", "Batch", "wait for data",
    ]  # fmt: skip
    assert data["diagnosis"] == stats.diagnosis
    text = str(stats).splitlines()
    assert text[0].startswith("grainlite stats: in-process (worker_count=0), wall ")
    assert text[1].split() == ["stage", "where", "per", "element", "share", "in", "out"]
    assert text[-1] == f"diagnosis: {stats.diagnosis}"


def test_dataset_api_stats_count_map_filter_and_batch_in_process():
    dataset = (
        grain.MapDataset.range(48).to_iter_dataset().map(Square()).filter(lambda x: x[0] % 2 == 0)
    )
    with iter(dataset.batch(4)) as iterator:
        delivered = sum(1 for _ in iterator)
        table = rows(iterator.stats())
    assert delivered == 6
    assert table[("read (RangeMapDataset)", "in-process")].elements_out == 48
    assert counts(table, "Square", "in-process") == (48, 48)
    assert counts(table, "<lambda>", "in-process") == (48, 24)
    assert counts(table, "Batch", "in-process") == (24, 6)
    assert table[("wait for data", "consumer")].elements_out == 6


def test_map_dataset_transformations_below_to_iter_dataset_get_their_own_rows():
    dataset = grain.MapDataset.range(48).map(Square()).filter(lambda x: x[0] % 2 == 0)
    first = iter(dataset.to_iter_dataset())
    list(first)  # another iterator of the same dataset: its work is not counted below
    with iter(dataset.to_iter_dataset()) as iterator:
        delivered = sum(1 for _ in iterator)
        table = rows(iterator.stats())
    assert delivered == 24
    assert counts(table, "read (RangeMapDataset)", "in-process") == (48, 48)
    assert counts(table, "Square", "in-process") == (48, 48)
    assert counts(table, "<lambda>", "in-process") == (48, 24)  # the rest are holes


def test_dataset_api_stats_come_from_the_mp_prefetch_workers():
    dataset = grain.MapDataset.range(48).to_iter_dataset().map(Square()).batch(4)
    options = grain.MultiprocessingOptions(num_workers=2)
    with iter(dataset.mp_prefetch(options)) as iterator:
        for _ in range(3):
            next(iterator)
        iterator.set_state(iterator.get_state())  # the workers restart: their counts carry on
        delivered = 3 + sum(1 for _ in iterator)
        stats = iterator.stats()
    table = rows(stats)
    assert delivered == stats.elements_delivered == 12
    assert stats.worker_count == 2
    squared, _ = counts(table, "Square", "workers")  # what was in flight is made again
    assert squared >= 48
    assert counts(table, "Batch", "workers") == (squared, squared // 4)
    assert table[("transport", "parent")].elements_in == 12


def test_enable_profiling_logs_the_table_through_logging_and_never_prints(
    monkeypatch, caplog, capsys
):
    monkeypatch.setattr(profiling, "EVERY_S", 0.05)
    caplog.set_level(logging.INFO, logger="grainlite.stats")
    with iter(loader(400, [Spin(0.001)], enable_profiling=True)) as iterator:
        deadline = time.monotonic() + 30
        while not any("(periodic)" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no periodic stats logged"
            next(iterator)
    messages = [r.getMessage() for r in caplog.records if r.name == "grainlite.stats"]
    assert "grainlite stats: in-process" in messages[0]
    assert "diagnosis: " in messages[0]
    assert messages[-1].startswith("grainlite profiling (final):")
    assert capsys.readouterr().out == ""


def test_without_enable_profiling_nothing_is_logged(caplog):
    caplog.set_level(logging.DEBUG, logger="grainlite.stats")
    with iter(loader(16, [Square()])) as iterator:
        list(iterator)
    assert not [r for r in caplog.records if r.name == "grainlite.stats"]


def test_the_troubleshooting_page_example_prints_the_rows_the_page_shows(capsys):
    page = (Path(__file__).resolve().parents[1] / "docs" / "troubleshooting.md").read_text()
    section = page[page.index("## The loader is slow") :]
    code = section.split("```{code-cell} ipython3\n", 1)[1].split("```", 1)[0]
    shown = section.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    exec(compile(code, "troubleshooting.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()

    def shape(lines):  # what does not depend on the machine: stage, where, in, out
        end = next(i for i, line in enumerate(lines) if line.startswith("share:"))
        rows = [line.split() for line in lines[2:end]]
        return [(row[:-5], row[-2:]) for row in rows]

    assert shape(printed) == shape(shown)
    assert [x for x in printed if x.startswith("share:")] == [
        x for x in shown if x.startswith("share:")
    ]
    assert printed[0].startswith("grainlite stats: in-process (worker_count=0), wall ")
    assert printed[-1].startswith("diagnosis: Transform `Decode` takes ")


def test_the_overhead_benchmark_compares_timing_on_and_off_for_both_apis(tmp_path, capsys):
    from benchmarks import stats_overhead
    from grainlite.stats import chain

    argv = ["--in-process", "--quick", "--repeats", "1", "--records", "2000"]
    assert stats_overhead.main([*argv, "--data-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["grainlite-w0", "grainlite-ds-w0"]
    assert all(" overhead " in line and "(median of 1 paired rounds)" in line for line in lines)
    assert chain.ENABLED  # switched back on (the round ended with it off)


def test_every_element_wise_iter_dataset_node_counts_its_elements():
    dataset = grain.MapDataset.range(30).to_iter_dataset()
    dataset = dataset.map_with_index(lambda i, x: x).random_map(lambda x, rng: x, seed=1)
    with iter(dataset) as iterator:
        assert sum(1 for _ in iterator) == 30
        names = [(s.name, s.elements_in, s.elements_out) for s in iterator.stats().stages]
    assert names == [
        ("read (RangeMapDataset)", 30, 30), ("<lambda>", 30, 30), ("<lambda> (2)", 30, 30),
        ("wait for data", 30, 30),
    ]  # fmt: skip
