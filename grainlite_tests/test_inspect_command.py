"""python -m grainlite inspect: the summary, the first records, and --verify catching damage."""

from __future__ import annotations

import json
import os

import pytest

from grainlite.__main__ import main
from grainlite_tests.support.convert_helpers import convert

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def converted(tmp_path):
    with open(tmp_path / "data.jsonl", "w") as file:
        for i in range(30):
            file.write(json.dumps({"id": i, "name": f"n{i}", "v": [0.5] * 3}) + "\n")
    assert convert(tmp_path / "data.jsonl", tmp_path / "out", "--num-shards", "3") == 0
    return tmp_path / "out"


def test_inspect_shows_the_manifest_shards_and_first_records_decoded(converted, capsys):
    assert main(["inspect", str(converted), "--records", "2"]) == 0
    out = capsys.readouterr().out
    assert f"manifest: {converted / 'data-train.manifest.json'}\n" in out
    assert "dataset: data split train: 30 records in 3 shard(s), manifest version 1\n" in out
    assert "  v: array <f8 (3,)\n" in out
    assert "  data-train.array_record-00002-of-00003: 10 records" in out
    assert "  [1] id: int64 1; name: str 'n1'; v: float64 array (3,)\n" in out
    assert "[2]" not in out


def test_verify_passes_on_an_untouched_conversion(converted, capsys):
    assert main(["inspect", str(converted), "--verify"]) == 0
    assert "verify: OK, 30 records match the manifest\n" in capsys.readouterr().out


def test_verify_catches_a_truncated_shard(converted, capsys):
    shard = converted / "data-train.array_record-00001-of-00003"
    size = os.path.getsize(shard)
    with open(shard, "r+b") as file:
        file.truncate(size // 2)
    assert main(["inspect", str(converted), "--verify", "--records", "0"]) == 1
    out = capsys.readouterr().out
    assert (
        f"verify: data-train.array_record-00001-of-00003: {size // 2} bytes, the manifest says "
        f"{size} (truncated or changed)\n"
    ) in out
    assert "verify: FAILED (1 problem(s))\n" in out


def test_verify_names_a_missing_shard(converted, capsys):
    (converted / "data-train.array_record-00000-of-00003").unlink()
    assert main(["inspect", str(converted), "--verify", "--records", "0"]) == 1
    assert capsys.readouterr().out.endswith(
        "verify: data-train.array_record-00000-of-00003: missing (the manifest lists it)\n"
        "verify: FAILED (1 problem(s))\n"
    )


def test_verify_catches_a_changed_record_of_the_same_size(tmp_path, capsys):
    (tmp_path / "data.jsonl").write_text("".join(f'{{"name": "n{i}"}}\n' for i in range(6)))
    out = tmp_path / "out"
    assert convert(tmp_path / "data.jsonl", out, "--compression", "uncompressed") == 0
    shard = out / "data-train.array_record-00000-of-00001"
    data = shard.read_bytes()
    assert data.count(b"n4") == 1
    shard.write_bytes(data.replace(b"n4", b"n5"))
    assert main(["inspect", str(out), "--verify", "--records", "0"]) == 1
    out = capsys.readouterr().out
    # ArrayRecord's own chunk hash refuses the changed chunk before grainlite's checksum would.
    assert "verify: data-train.array_record-00000-of-00001: a record does not read back: " in out
    assert out.endswith("verify: FAILED (1 problem(s))\n")


def test_verify_catches_records_that_differ_from_the_manifests_checksum(converted, capsys):
    manifest_file = converted / "data-train.manifest.json"
    data = json.loads(manifest_file.read_text())
    data["shards"][2]["records_crc32"] = "00000000"
    manifest_file.write_text(json.dumps(data))
    assert main(["inspect", str(converted), "--verify", "--records", "0"]) == 1
    assert capsys.readouterr().out.endswith(
        "verify: data-train.array_record-00002-of-00003: record checksum differs from the "
        "manifest's (changed)\nverify: FAILED (1 problem(s))\n"
    )


def test_inspect_refuses_a_folder_without_a_manifest(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    assert main(["inspect", str(tmp_path / "half")]) == 2
    assert capsys.readouterr().err == (
        f"inspect: error: {str(tmp_path / 'half')!r} holds 0 manifests ([]); a complete "
        f"conversion holds exactly one: pass the manifest file itself, or convert again (an "
        f"interrupted conversion leaves none).\n"
    )
