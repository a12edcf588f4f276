"""ParquetIterDataset: Grain's rows and states over Parquet files the tests write, row groups read
one at a time, pyarrow loaded only when a file is read."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import grainlite as grain
from grainlite.errors import MissingExtraError
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import LIBRARIES, assert_matches_grain

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def rows_file(tmp_path):
    """Seven rows of several column types in row groups of three (3 + 3 + 1)."""
    table = pa.table(
        {
            "id": list(range(7)),
            "score": [0.5 * i for i in range(7)],
            "ok": [i % 2 == 0 for i in range(7)],
            "text": [f"row {i}" for i in range(7)],
            "raw": [bytes([i]) * i for i in range(7)],
            "tokens": [list(range(i)) for i in range(7)],
            "meta": [{"n": i} for i in range(7)],
        }
    )
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, row_group_size=3)
    return str(path)


@pytest.fixture
def second_file(tmp_path):
    path = tmp_path / "second.parquet"
    pq.write_table(pa.table({"id": [100, 101, 102, 103]}), path, row_group_size=2)
    return str(path)


def test_parquet_rows_and_states_match_grain_and_restore_both_ways(rows_file):
    assert_matches_grain(lambda lib: iter(lib.experimental.ParquetIterDataset(rows_file)))


def test_several_files_are_interleaved_with_grains_state(rows_file, second_file):
    def build(lib):
        return iter(lib.experimental.ParquetIterDataset([rows_file, second_file]))

    elements, states = assert_matches_grain(build)
    ids = [dict(element["dict"])["id"][3] for element in elements]
    assert ids == [0, 100, 1, 101, 2, 102, 3, 103, 4, 5, 6]
    assert set(states[-1]) == {
        "next_index_in_cycle",
        "next_index_in_datasets",
        "iterators_in_use_indices",
        "iterators_in_use_states",
        "exhausted",
        "future_states",
    }


def test_a_dataset_class_maps_file_names_to_datasets_for_interleave_as_in_grain(
    rows_file, second_file
):
    def build(lib):
        files = lib.MapDataset.source([rows_file, second_file])
        per_file = files.map(lib.experimental.ParquetIterDataset)
        return iter(lib.experimental.InterleaveIterDataset(per_file, cycle_length=2))

    elements, _ = assert_matches_grain(build)
    ids = [dict(element["dict"])["id"][3] for element in elements]
    assert ids == [0, 100, 1, 101, 2, 102, 3, 103, 4, 5, 6]


def test_nulls_read_as_grain_reads_them(tmp_path):
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"i": [1, None, 3], "s": ["a", None, "c"]}), path, row_group_size=2)
    rows = {
        name: repr(list(lib.experimental.ParquetIterDataset(path)))
        for name, lib in LIBRARIES.items()
    }
    assert rows["lite"] == rows["grain"]
    assert "nan" in rows["lite"]  # an int column with nulls becomes floats, as in Grain


def test_row_groups_are_read_one_at_a_time_when_reached(rows_file, monkeypatch):
    reads = []
    read_row_group = pq.ParquetFile.read_row_group

    def recording(self, i, *args, **kwargs):
        reads.append(i)
        return read_row_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", recording)
    with iter(grain.experimental.ParquetIterDataset(rows_file)) as iterator:
        assert reads == []
        next(iterator)
        assert reads == [0]
        for _ in range(3):
            next(iterator)
        assert reads == [0, 1]
        iterator.set_state({"row_group": 2, "index_within_row_group": 0})
        assert next(iterator)["id"] == 6
        assert reads == [0, 1, 2]


def test_parquet_resumes_at_every_step(rows_file, second_file):
    assert_dataset_resumes_at_every_step(
        lambda: iter(grain.experimental.ParquetIterDataset([rows_file, second_file]))
    )


def test_parquet_resumes_under_mp_prefetch_with_one_worker(rows_file):
    # A file source has no MapDataset below it: like Grain, one worker reads it whole.
    options = grain.MultiprocessingOptions(num_workers=1)

    def make():
        ds = grain.experimental.ParquetIterDataset(rows_file).map(lambda row: row["id"] * 2)
        return iter(ds.mp_prefetch(options))

    assert_dataset_resumes_at_every_step(make, steps=[4])


def test_making_the_dataset_does_not_import_pyarrow(rows_file):
    code = (
        "import sys, grainlite as grain; "
        f"ds = grain.experimental.ParquetIterDataset({rows_file!r}); it = iter(ds); "
        "print('pyarrow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_reading_without_pyarrow_names_the_extra(rows_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'grainlite\[parquet\]'"):
        next(iter(grain.experimental.ParquetIterDataset(rows_file)))


def _small_files(folder, count):
    paths = []
    for k in range(count):
        path = folder / f"part{k:02d}.parquet"
        pq.write_table(pa.table({"id": [10 * k, 10 * k + 1]}), path)
        paths.append(str(path))
    return paths


def test_many_files_are_read_sixteen_at_a_time_as_in_grain(tmp_path):
    paths = _small_files(tmp_path, 18)

    def build(lib):
        return iter(lib.experimental.ParquetIterDataset(paths))

    elements, states = assert_matches_grain(build, restore_at=[0, 16, 20, 36])
    ids = [int(dict(element["dict"])["id"][3]) for element in elements]
    # files 16 and 17 wait until two of the first 16 end
    assert ids[:32] == [10 * k for k in range(16)] + [10 * k + 1 for k in range(16)]
    assert len(states[0]["iterators_in_use_indices"]) == 16


@pytest.mark.timeout(300)  # two runs of worker processes on a loaded machine
def test_mp_prefetch_gives_each_worker_every_wth_file_as_in_grain(tmp_path):
    paths = _small_files(tmp_path, 3)

    def ids(lib):
        ds = LIBRARIES[lib].experimental.ParquetIterDataset(paths)
        options = LIBRARIES[lib].MultiprocessingOptions(num_workers=2)
        return [int(row["id"]) for row in ds.mp_prefetch(options)]

    # worker 0 reads files 0 and 2 round-robin, worker 1 file 1
    assert ids("lite") == ids("grain") == [0, 10, 20, 11, 1, 21]
