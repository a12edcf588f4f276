"""The reserved feature names of Grain's ``grain.constants``, with Grain's values.

Grain's legacy pipelines stored an element's metadata beside its features under these keys;
``META_FEATURES`` is the set of all of them, for code that strips them from a dict element. The
grainlite DataLoader never adds them to elements: they are here so that code which names them runs.
"""

INDEX = "_index"
"""The element's position in the global stream."""

RECORD_KEY = "_record_key"
"""The key of the record read from the data source."""

RECORD = "_record"
"""The raw record, before transforms."""

DATASET_INDEX = "_dataset_index"
"""Which dataset of a mixture the record came from."""

EPOCH = "_epoch"
"""The epoch the record belongs to."""

SEED = "_seed"
"""The per-record random seed."""

META_FEATURES = frozenset([INDEX, RECORD_KEY, RECORD, DATASET_INDEX, EPOCH, SEED])
"""All of the names above."""

__all__ = ["DATASET_INDEX", "EPOCH", "INDEX", "META_FEATURES", "RECORD", "RECORD_KEY", "SEED"]
