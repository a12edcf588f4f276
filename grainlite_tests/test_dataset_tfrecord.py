"""TFRecordIterDataset: records of TFRecord files the tests frame themselves (no TensorFlow),
Grain's elements and states, CRC checks and damaged files."""

from __future__ import annotations

import pytest

import grainlite as grain
from grainlite.dataset.experimental import tfrecord
from grainlite.errors import CorruptedDataError
from grainlite_tests.support.contracts import assert_dataset_resumes_at_every_step
from grainlite_tests.support.stream_checks import assert_matches_grain
from grainlite_tests.support.tfrecord_frames import RECORDS, crc32c, frame

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def records_file(tmp_path):
    path = tmp_path / "records.tfrecord"
    path.write_bytes(b"".join(frame(r) for r in RECORDS))
    return str(path)


def test_crc32c_gives_the_standard_check_value():
    assert tfrecord.crc32c(b"123456789") == 0xE3069283 == crc32c(b"123456789")


def test_tfrecord_records_and_states_match_grain_and_restore_both_ways(records_file):
    elements, states = assert_matches_grain(
        lambda lib: iter(lib.experimental.TFRecordIterDataset(records_file))
    )
    assert elements == RECORDS
    assert states[1] == {"reader_offset": 12 + 5 + 4}


def test_tfrecord_resumes_at_every_step(records_file):
    assert_dataset_resumes_at_every_step(
        lambda: iter(grain.experimental.TFRecordIterDataset(records_file))
    )


def test_tfrecord_resumes_under_mp_prefetch_with_one_worker(records_file):
    options = grain.MultiprocessingOptions(num_workers=1)

    def make():
        ds = grain.experimental.TFRecordIterDataset(records_file).map(len)
        return iter(ds.mp_prefetch(options))

    assert_dataset_resumes_at_every_step(make, steps=[3])


def test_a_damaged_length_is_caught_by_its_crc(tmp_path):
    data = bytearray(frame(b"abc") + frame(b"defg"))
    data[19 + 3] ^= 0x01  # the second record's length field (the first frame is 19 bytes)
    path = tmp_path / "bad_length.tfrecord"
    path.write_bytes(bytes(data))
    with iter(grain.experimental.TFRecordIterDataset(str(path))) as iterator:
        assert next(iterator) == b"abc"
        with pytest.raises(CorruptedDataError, match=r"at byte offset 19: the length CRC does not"):
            next(iterator)


def test_damaged_data_is_caught_where_a_crc32c_is_available(records_file, monkeypatch, tmp_path):
    data = bytearray(frame(b"abc"))
    data[12] ^= 0xFF
    path = tmp_path / "bad_data.tfrecord"
    path.write_bytes(bytes(data))
    monkeypatch.setattr(tfrecord, "compiled_crc32c", lambda: tfrecord.crc32c)
    message = "the data CRC of the 3-byte record does not match"
    with (
        iter(grain.experimental.TFRecordIterDataset(str(path))) as iterator,
        pytest.raises(ValueError, match=message),
    ):
        next(iterator)
    monkeypatch.setattr(tfrecord, "compiled_crc32c", lambda: None)  # as Grain: data unchecked
    with iter(grain.experimental.TFRecordIterDataset(str(path))) as iterator:
        assert next(iterator) == b"\x9ebc"


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        (5, r"offset 0: 5 bytes, fewer than the 12-byte record header"),
        (14, r"offset 0: the record holds 3 bytes and its CRC, but only 2 bytes follow"),
    ],
    ids=["in-header", "in-data"],
)
def test_a_truncated_file_is_a_value_error_naming_the_offset(tmp_path, keep, message):
    path = tmp_path / "short.tfrecord"
    path.write_bytes(frame(b"abc")[:keep])
    with (
        iter(grain.experimental.TFRecordIterDataset(str(path))) as iterator,
        pytest.raises(ValueError, match=message),
    ):
        next(iterator)


def test_a_missing_file_is_file_not_found_as_in_grain(tmp_path):
    with pytest.raises(FileNotFoundError):
        next(iter(grain.experimental.TFRecordIterDataset(str(tmp_path / "none.tfrecord"))))
