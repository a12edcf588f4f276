"""The shared behaviour contracts hold for the DataLoader, and each one can fail."""

from __future__ import annotations

import pytest

import grainlite as grain
from grainlite_tests.support.contracts import SlowReads, assert_same_output_for_any_read_options

pytestmark = pytest.mark.timeout(120)


class _Iterator:
    """An iterator that is also a context manager, as DataLoader iterators are."""

    def __init__(self, elements) -> None:
        self.elements = iter(elements)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.elements)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        pass


class _ReadsInThisThread:
    """A loader that reads every record in the consuming thread, whatever its ReadOptions say."""

    def __init__(self, source: SlowReads, read_options: grain.ReadOptions) -> None:
        self.source = source

    def __iter__(self):
        return _Iterator(self.source[k] for k in range(len(self.source)))


def test_the_read_options_contract_fails_a_reader_that_never_uses_its_threads():
    with pytest.raises(AssertionError, match="never read in a reader thread"):
        assert_same_output_for_any_read_options(_ReadsInThisThread, num_records=50)


class _DropsRecordsWithThreads(_ReadsInThisThread):
    """A loader whose output changes with its ReadOptions."""

    def __init__(self, source: SlowReads, read_options: grain.ReadOptions) -> None:
        super().__init__(source, read_options)
        self.threads = read_options.num_threads

    def __iter__(self):
        return _Iterator(self.source[k] for k in range(len(self.source) - self.threads))


def test_the_read_options_contract_fails_a_loader_whose_output_depends_on_them():
    with pytest.raises(AssertionError, match="changed the output"):
        assert_same_output_for_any_read_options(_DropsRecordsWithThreads, num_records=50)
