"""Every public name of Grain 0.2.18's namespaces, with what grainlite does with it.

This table is the source of docs/grain_names.md (``python -m grainlite_tests.support.grain_names``
rewrites the generated part of that page) and of test_namespaces.py, which walks ``dir()`` of each
Grain namespace and checks that every name is listed here and that its status is true of grainlite.

Statuses:
  same: provided at the same path, the same kind of object (an alias is the same object as in
    Grain), with Grain's behaviour.
  same, with a fix: provided at the same path; the note says what differs from Grain and why.
  not yet: not provided; the note names the issue that will bring it.
  left out: not provided on purpose; the note says why.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

SAME = "same"
FIX = "same, with a fix"
NOT_YET = "not yet"
LEFT_OUT = "left out"
STATUSES = (SAME, FIX, NOT_YET, LEFT_OUT)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One Grain name: its status in grainlite and the note that explains it."""

    status: str
    note: str = ""


def _same(note: str = "") -> Entry:
    return Entry(SAME, note)


def _dataset_api(issue: int = 18) -> Entry:
    return Entry(NOT_YET, f"Grain's experimental datasets (issue {issue})")


_MAP_DATASET = _same(
    "Grain's methods, elements and get_state() dicts; _getitems(indices) reads blocks"
)
_ITER_DATASET = _same("Grain's methods; mp_prefetch runs on grainlite's worker processes")
_DATASET_ITERATOR = _same(
    "Grain's get_state() dicts; close() and the with-form release every thread and process"
)
_FLAT_MAP_DATASET = _same("Grain's constructor (parent, transform) and elements")

_SHARED_MEMORY_ARRAY = Entry(
    FIX,
    "grainlite's own segments (stale ones are cleaned up); an unpickled copy owns the removal "
    "of the segment, where Grain's leaks it",
)

# Grain's namespace -> grainlite's module path. grain.config is an object in Grain, a module here.
NAMESPACES = {
    "grain": "grainlite",
    "grain.python": "grainlite.python",
    "grain.experimental": "grainlite.experimental",
    "grain.python.experimental": "grainlite.python.experimental",
    "grain.samplers": "grainlite.samplers",
    "grain.sharding": "grainlite.sharding",
    "grain.sources": "grainlite.sources",
    "grain.transforms": "grainlite.transforms",
    "grain.checkpoint": "grainlite.checkpoint",
    "grain.constants": "grainlite.constants",
    "grain.config": "grainlite.config",
    "grain.multiprocessing": "grainlite.multiprocessing",
}

_EXPERIMENTAL: dict[str, Entry] = {
    "BOSHandling": _same("an enum with Grain's members and values"),
    "BestFitPackIterDataset": Entry(
        FIX,
        "Grain's rows, keys and state, vectorised; max_sequences_per_bin also holds for empty "
        "sequences (Grain's puts them in full bins); a fractional pack_alignment_struct entry "
        "is a ValueError (Grain's misplaces tokens with it)",
    ),
    "CacheIterDataset": Entry(
        FIX,
        "Grain's elements and {parent, position, cache_filled} state; a cache_filled state "
        "restored where the cache is empty reads the parent again",
    ),
    "ConcatThenSplitIterDataset": Entry(
        FIX,
        "Grain's rows and state, with [start, stop] lists for its tuples (Grain misreads its own "
        "state after JSON); no token repeated for unequal features; BOS with empty sequences",
    ),
    "DatasetOptions": _same(
        "Grain's fields, defaults and merge(); the filter thresholds are honoured (at or above "
        "the ratio; 0 is off), execution_tracking_mode and min_shm_size are kept"
    ),
    "ElasticIterator": Entry(
        FIX,
        'Grain\'s batches and {"global_next_index"} state, restored onto any shard count and '
        "global batch size; a DatasetIterator here (an IterDataset subclass in Grain)",
    ),
    "ExecutionTrackingMode": _same("an enum with Grain's members and values"),
    "FirstFitPackIterDataset": Entry(
        FIX,
        "Grain's rows, keys and state, written with numpy; bad arguments (no bins, a group-by "
        "feature the rows lack) fail at construction, not at the first element; a fractional "
        "pack_alignment_struct entry is a ValueError (Grain's misplaces tokens with it)",
    ),
    "FlatMapIterDataset": _FLAT_MAP_DATASET,
    "FlatMapMapDataset": _FLAT_MAP_DATASET,
    "FlatMapTransform": _same("the DataLoader runs it, with Grain's nested checkpoint state"),
    "InterleaveIterDataset": Entry(
        FIX,
        "Grain's order and state (future_states included); a MapDataset of datasets is read "
        "lazily; under mp_prefetch worker w of W interleaves datasets[w::W] as in Grain (a "
        "worker left without datasets gives none, where Grain fails with an IndexError); "
        "set_state() leaves the given state unchanged (Grain's restored iterator rewrites its "
        "lists)",
    ),
    "LimitIterDataset": _same('Grain\'s elements and {"parent", "count_elements_read"} state'),
    "MapWithIndexTransform": _same("the DataLoader refuses it with a TypeError, as Grain's does"),
    "PackAndBatchOperation": Entry(
        FIX,
        "Grain's batches and metadata; keeps no state on the object; an empty input gives no "
        "batch (Grain's raises AttributeError)",
    ),
    "ParquetIterDataset": _same(
        "row groups read one at a time; Grain's row dicts and state; pyarrow loads on use"
    ),
    "PerformanceConfig": _same("a dataclass of the two options"),
    "RebatchIterDataset": _same('Grain\'s batches and {"parent", "batch_idx"} state'),
    "RepeatIterDataset": _same(
        "Grain's state; an endless repeat of an empty stream ends (Grain's hangs)"
    ),
    "RngPool": Entry(
        FIX,
        "the same generators; releasing one it did not hand out raises ValueError "
        "(Grain accepts it and fails on a later acquire)",
    ),
    "ShapeDtypeStruct": _same("a frozen dataclass of shape and dtype"),
    "ShapeDtypeStructProtocol": _same("a runtime-checkable Protocol"),
    "TFRecordIterDataset": _same(
        "no TensorFlow; length CRCs checked (data CRCs with a compiled crc32c)"
    ),
    "ThreadPrefetchDatasetIterator": _same(
        "the state is the parent's after the last element delivered"
    ),
    "ThreadPrefetchIterDataset": _same(
        "a daemon thread that ends on close(), at exhaustion and on collection"
    ),
    "WindowShuffleIterDataset": _same("Grain's order and state; a fresh iterator restores alike"),
    "WindowShuffleMapDataset": _same(
        "Grain's permutation per window (index_shuffle with seed + window)"
    ),
    "WithOptionsIterDataset": _same(
        "options for the whole pipeline it is part of (below and above it, mp_prefetch workers "
        "included); the outer node wins where two set a field"
    ),
    "ZipIterDataset": _same('Grain\'s tuples, strict rule and {"parents": [...]} state'),
    "ZipMapDataset": _same("Grain's tuples; parents of one length"),
    "apply_transformations": _same("what MapDataset.apply and IterDataset.apply call"),
    "assert_equal_output_after_checkpoint": _same(
        "every state of one pass, restored in a fresh iterator, resumes the same output"
    ),
    "batch_and_pad": _same("Grain's padded batches and errors"),
    "device_put": Entry(
        FIX,
        "an IterDataset of placed elements, get_state() after the last one returned; one thread "
        "reads and places (cpu_buffer_size is validated, unused); close() ends the thread",
    ),
    "get_element_spec": _same(
        "Grain's rules for range, map (output_spec), batch, zip, mix and the pass-through nodes"
    ),
    "get_next_index": _same('from Grain\'s _get_next_index hook or a {"next_index"} state'),
    "index_shuffle": _same("the same permutation as Grain's (test_index_shuffle.py compares them)"),
    "multithread_prefetch": Entry(
        FIX,
        "Grain's elements, order and states: num_threads slices of ds (sequential_slice: "
        "contiguous), each read ahead by its own thread, interleaved; the slices follow "
        "mp_prefetch's batch rule (google/grain#1129)",
    ),
    "pick_performance_config": _same("the same options from the same element sizes and budget"),
    "set_next_index": _same('through Grain\'s _set_next_index hook or a {"next_index"} state'),
}

_CONFIG = Entry(
    FIX,
    "a module, not absl flags: update() and get_or_default() take Grain's option names; "
    "py_traceback_filtering and py_debug_mode are honoured, the other options accept only "
    "Grain's default and raise ValueError naming the option otherwise",
)
_CONSTANT = _same("Grain's value")
_LEGACY = _same("deprecated, as in Grain: logs a deprecation message when a DataLoader takes it")

TABLE: dict[str, dict[str, Entry]] = {
    "grain": {
        "DataLoader": _same(),
        "DataLoaderIterator": _same(),
        "DatasetIterator": _DATASET_ITERATOR,
        "IterDataset": _ITER_DATASET,
        "MapDataset": _MAP_DATASET,
        "MultiprocessingOptions": _same(),
        "ReadOptions": _same(),
        "Record": _same(),
        "RecordMetadata": _same(),
        "checkpoint": Entry(
            FIX, "Orbax is imported on first use of its names; import grain imports it"
        ),
        "config": _CONFIG,
        "constants": _same(),
        "experimental": _same("its names are listed under grain.experimental"),
        "load": _same("Grain's signature and defaults"),
        "monitoring": Entry(
            LEFT_OUT,
            "Google-internal telemetry (streamz metrics, debug servers); grainlite records none "
            "and never starts telemetry at import",
        ),
        "multiprocessing": _same(),
        "python": _same("after import grain.python (grainlite.python), as in Grain"),
        "proto": Entry(
            LEFT_OUT,
            "protobuf messages of the Dataset API's execution summary; grainlite has no protobuf "
            "dependency (its own statistics: issue 14)",
        ),
        "samplers": _same(),
        "sharding": _same(),
        "sources": _same(),
        "transforms": _same(),
    },
    "grain.python": {
        "ArrayRecordDataSource": _same(),
        "Batch": _same(),
        "BatchOperation": _same("deprecated, as in Grain; an exact BatchOperation runs as Batch"),
        "DATASET_INDEX": _CONSTANT,
        "DataLoader": _same(),
        "DatasetIterator": _DATASET_ITERATOR,
        "DatasetSelectionMap": _same("MapDataset.select_from_datasets takes it, as in Grain"),
        "EPOCH": _CONSTANT,
        "FilterOperation": _LEGACY,
        "FilterTransform": _same(),
        "INDEX": _CONSTANT,
        "InMemoryDataSource": _same(),
        "IndexSampler": _same(),
        "IterDataset": _ITER_DATASET,
        "META_FEATURES": _CONSTANT,
        "MapDataset": _MAP_DATASET,
        "MapOperation": _LEGACY,
        "MapTransform": _same(),
        "MapWithIndexTransform": _same(
            "the DataLoader refuses it with a TypeError, as Grain's does"
        ),
        "MultiprocessingOptions": _same(),
        "NoSharding": _same(),
        "Operation": _same(
            "the protocol of the legacy operations (records in, records out); a custom subclass "
            "runs in the DataLoader as in Grain"
        ),
        "PyGrainCheckpointHandler": _same("Orbax is imported on first use"),
        "PyGrainCheckpointRestore": _same("Orbax is imported on first use"),
        "PyGrainCheckpointSave": _same("Orbax is imported on first use"),
        "PyGrainDatasetIterator": _same(),
        "RECORD": _CONSTANT,
        "RECORD_KEY": _CONSTANT,
        "RandomAccessDataSource": _same(),
        "RandomMapOperation": _LEGACY,
        "RandomMapTransform": _same(),
        "RangeDataSource": _same(),
        "ReadOptions": _same(),
        "Record": _same(),
        "RecordMetadata": _same(),
        "SEED": _CONSTANT,
        "Sampler": _same(),
        "SequentialSampler": _same(),
        "ShardByJaxProcess": _same(),
        "ShardOptions": _same(),
        "SharedMemoryArray": _SHARED_MEMORY_ARRAY,
        "Transformation": Entry(
            FIX,
            "the union of what the DataLoader runs: without MapWithIndex, which it refuses",
        ),
        "Transformations": Entry(FIX, "a sequence of Transformation, as above"),
        "config": _CONFIG,
        "experimental": _same("its names are listed under grain.python.experimental"),
        "load": _same("Grain's signature and defaults"),
    },
    "grain.experimental": _EXPERIMENTAL,
    "grain.python.experimental": _EXPERIMENTAL,
    "grain.samplers": {"IndexSampler": _same(), "Sampler": _same(), "SequentialSampler": _same()},
    "grain.sharding": {
        "NoSharding": _same(),
        "ShardByJaxProcess": _same(),
        "ShardOptions": _same(),
    },
    "grain.sources": {
        "ArrayRecordDataSource": _same(),
        "RandomAccessDataSource": _same(),
        "RangeDataSource": _same(),
        "SharedMemoryDataSource": _same("the same class as InMemoryDataSource"),
    },
    "grain.transforms": {
        "Batch": _same(),
        "DatasetSelectionMap": _same("MapDataset.select_from_datasets takes it, as in Grain"),
        "Filter": _same("the same class as FilterTransform"),
        "Map": _same("the same class as MapTransform"),
        "MapWithIndex": _same("the DataLoader refuses it with a TypeError, as Grain's does"),
        "RandomMap": _same("the same class as RandomMapTransform"),
        "TfRandomMap": _same(
            "the DataLoader calls np_random_map(element, rng) with the record's numpy generator, "
            "as Grain's does (subclasses of Grain's own TfRandomMap too)"
        ),
        "Transformation": Entry(
            FIX,
            "the union of what the DataLoader runs: without MapWithIndex, which it refuses",
        ),
        "Transformations": Entry(FIX, "a sequence of Transformation, as above"),
    },
    "grain.checkpoint": {
        "CheckpointHandler": _same("Orbax is imported on first use"),
        "CheckpointRestore": _same("Orbax is imported on first use"),
        "CheckpointSave": _same("Orbax is imported on first use"),
    },
    "grain.constants": {
        name: _CONSTANT
        for name in (
            "DATASET_INDEX",
            "EPOCH",
            "INDEX",
            "META_FEATURES",
            "RECORD",
            "RECORD_KEY",
            "SEED",
        )
    },
    "grain.config": {
        "get_or_default": _same("Grain's option names and defaults"),
        "update": _same("see grain.config above for the options honoured"),
    },
    "grain.multiprocessing": {
        "MultiprocessingOptions": _same(),
        "SharedMemoryArray": _SHARED_MEMORY_ARRAY,
        "SharedMemoryArrayMetadata": _same(),
    },
}

BEGIN = "<!-- BEGIN generated by grainlite_tests/support/grain_names.py -->"
END = "<!-- END generated by grainlite_tests/support/grain_names.py -->"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "grain_names.md"


def render() -> str:
    """The generated part of docs/grain_names.md: one table per Grain namespace."""
    out: list[str] = []
    for namespace, entries in TABLE.items():
        out += [f"## `{namespace}`", "", f"grainlite: `{NAMESPACES[namespace]}`", ""]
        out += ["| Name | Status | Note |", "| --- | --- | --- |"]
        for name in sorted(entries):
            entry = entries[name]
            out.append(f"| `{name}` | {entry.status} | {entry.note} |")
        out.append("")
    return "\n".join(out)


def generated_part(text: str) -> str | None:
    """The text between the BEGIN and END markers of the page, None without the markers."""
    match = re.search(re.escape(BEGIN) + r"\n(.*)" + re.escape(END), text, re.DOTALL)
    return match.group(1) if match else None


def main() -> None:
    """Rewrites the generated part of docs/grain_names.md from TABLE."""
    text = PAGE.read_text()
    old = generated_part(text)
    if old is None:
        sys.exit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are missing")
    PAGE.write_text(text.replace(BEGIN + "\n" + old + END, BEGIN + "\n" + render() + END))


if __name__ == "__main__":
    main()
