"""convert writes the same bytes whatever --workers, spreads records by the documented rule, and
never leaves a destination that looks complete when it fails or is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from grainlite.__main__ import main
from grainlite.errors import GrainliteValueError
from grainlite.tools.convert import converter, manifest
from grainlite.tools.convert.shards import shard_bounds
from grainlite_tests.support.convert_helpers import convert, folder_bytes, read_back

pytestmark = pytest.mark.timeout(60)


def write_jsonl(path, count: int) -> None:
    with open(path, "w") as file:
        for i in range(count):
            file.write(json.dumps({"i": i, "v": [i] * (i % 5), "s": "x" * (i % 7)}) + "\n")


def write_images(root, count: int) -> None:
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(0)
    for i in range(count):
        (root / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (5, 4, 3), dtype=np.uint8)
        (root / f"c{i % 3}" / f"{i}.png").write_bytes(cv2.imencode(".png", pixels)[1].tobytes())


@pytest.mark.parametrize("kind", ["jsonl", "npz", "images"])
def test_workers_1_and_2_write_byte_identical_shards_and_manifest(tmp_path, kind):
    if kind == "jsonl":
        src = tmp_path / "data.jsonl"
        write_jsonl(src, 101)
    elif kind == "npz":
        src = tmp_path / "data.npz"
        rng = np.random.default_rng(0)
        np.savez(src, x=rng.random((101, 3)), y=np.arange(101))
    else:
        src = tmp_path / "data"
        write_images(src, 101)
    assert convert(src, tmp_path / "w1", "--num-shards", "5") == 0
    assert convert(src, tmp_path / "w2", "--num-shards", "5", "--workers", "2") == 0
    assert convert(src, tmp_path / "again", "--num-shards", "5") == 0
    one = folder_bytes(tmp_path / "w1")
    assert len(one) == 6
    assert folder_bytes(tmp_path / "w2") == one
    assert folder_bytes(tmp_path / "again") == one


@pytest.mark.parametrize("records, shards", [(101, 5), (7, 7), (10, 3), (1, 1)])
def test_shard_s_holds_the_contiguous_block_of_the_spread_rule(tmp_path, records, shards):
    write_jsonl(tmp_path / "data.jsonl", records)
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--num-shards", str(shards)) == 0
    loaded = manifest.load(tmp_path / "out")
    counts = [s["records"] for s in loaded.data["shards"]]
    assert counts == [
        shard_bounds(records, shards, s)[1] - shard_bounds(records, shards, s)[0]
        for s in range(shards)
    ]
    assert [s * records // shards for s in range(shards)] == list(np.cumsum([0, *counts[:-1]]))
    assert max(counts) - min(counts) <= 1
    assert [int(e["i"]) for e in read_back(tmp_path / "out")] == list(range(records))
    assert [os.path.basename(p) for p in loaded.shard_paths] == [
        f"data-train.array_record-{s:05d}-of-{shards:05d}" for s in range(shards)
    ]


def test_an_existing_non_empty_destination_needs_overwrite(tmp_path):
    write_jsonl(tmp_path / "data.jsonl", 4)
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--num-shards", "2") == 0
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "out")
    assert str(error.value) == (
        f"The destination {str(tmp_path / 'out')!r} already exists and is not an empty folder; "
        f"pass --overwrite to replace it, or choose another destination."
    )
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--overwrite") == 0
    assert sorted(os.listdir(tmp_path / "out")) == [
        "data-train.array_record-00000-of-00001", "data-train.manifest.json"
    ]  # fmt: skip
    assert sorted(os.listdir(tmp_path)) == ["data.jsonl", "out"]


def test_overwrite_never_replaces_a_folder_holding_other_files(tmp_path):
    write_jsonl(tmp_path / "data.jsonl", 4)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("precious")
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "mine", overwrite=True)
    assert str(error.value) == (
        f"The destination {str(tmp_path / 'mine')!r} holds things convert did not write "
        f"(['keep.txt']), so --overwrite will not replace it; remove them yourself or choose "
        f"another destination."
    )
    assert (tmp_path / "mine" / "keep.txt").read_text() == "precious"


def test_a_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    write_jsonl(tmp_path / "data.jsonl", 5)
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--num-shards", "2", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "data-train.array_record-00001-of-00002: records [2, 5) (3)" in out
    assert "features: i: array <i8 (), v: array <i8 (None,), s: str" in out
    assert sorted(os.listdir(tmp_path)) == ["data.jsonl"]


def test_a_failure_in_a_worker_removes_the_partial_output(tmp_path, capsys):
    write_jsonl(tmp_path / "data.jsonl", 20)
    with open(tmp_path / "data.jsonl", "r+b") as file:  # After the scan, a line goes bad.
        source = converter.plan(
            tmp_path / "data.jsonl", tmp_path / "out", converter.ConvertOptions(num_shards=4)
        )
        file.seek(source.source.offsets[17])  # type: ignore[attr-defined]
        file.write(b'{"i": "x"')
    with pytest.raises(GrainliteValueError, match="line 18 is not JSON any more"):
        converter.run(source, workers=2)
    assert sorted(os.listdir(tmp_path)) == ["data.jsonl"]


def test_a_killed_conversion_leaves_no_destination_and_nothing_inspect_accepts(tmp_path):
    np.save(tmp_path / "big.npy", np.random.default_rng(0).random((4096, 2048)))  # 64 MiB
    command = [
        sys.executable, "-m", "grainlite", "convert", str(tmp_path / "big.npy"),
        str(tmp_path / "out"), "--num-shards", "16", "--compression", "uncompressed",
    ]  # fmt: skip
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stderr.readline()  # type: ignore[union-attr]
        assert first.startswith("shard 1/16 written"), first
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=30)
        process.stderr.close()  # type: ignore[union-attr]
    assert process.returncode == -signal.SIGKILL
    names = sorted(os.listdir(tmp_path))
    assert "out" not in names
    partial = [n for n in names if n.startswith("out.partial-")]
    assert len(partial) == 1
    assert not any(n.endswith(".manifest.json") for n in os.listdir(tmp_path / partial[0]))
    with pytest.raises(GrainliteValueError, match="holds 0 manifests"):
        manifest.load(tmp_path / partial[0])


@pytest.mark.parametrize("option, value", [("workers", 0), ("num_shards", -1)])
def test_workers_and_num_shards_must_be_positive_ints(tmp_path, option, value):
    with pytest.raises(GrainliteValueError) as error:
        converter.ConvertOptions(**{option: value})
    flag = option.replace("_", "-")
    assert str(error.value) == (
        f"convert's {option} must be a positive int (got {value}); pass --{flag} N with N >= 1."
    )


def test_more_shards_than_records_is_refused(tmp_path):
    write_jsonl(tmp_path / "data.jsonl", 3)
    with pytest.raises(GrainliteValueError) as error:
        converter.convert(tmp_path / "data.jsonl", tmp_path / "out", num_shards=4)
    assert str(error.value) == (
        f"convert's num_shards is 4 but {str(tmp_path / 'data.jsonl')!r} has 3 records; pass "
        f"--num-shards at most 3, so that no shard is empty."
    )


@pytest.mark.parametrize("workers", ["1", "2"])
def test_progress_is_a_line_per_shard_when_stderr_is_not_a_terminal(tmp_path, capsys, workers):
    write_jsonl(tmp_path / "data.jsonl", 9)
    args = ["convert", str(tmp_path / "data.jsonl"), str(tmp_path / "out"), "--num-shards", "3"]
    assert main([*args, "--workers", workers]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 3
    assert all(
        line.startswith(f"shard {i}/3 written: data-train") for i, line in enumerate(lines, 1)
    )
    assert lines[-1].endswith("(3 records; 9/9 in all)")
    assert captured.out == f"wrote 9 records in 3 shard(s) to {tmp_path / 'out'}\n"
