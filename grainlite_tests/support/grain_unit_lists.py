# ruff: noqa: E501  (test ids and reasons read best one to a line)
"""Which of Grain 0.2.18's own unit tests the grainlite run takes, leaves out, and why.

Keys of ``LEFT_OUT`` and ``KNOWN_FAILING`` are ``<file stem>::<Class>`` or
``<file stem>::<Class>::<test>`` (a parameterized test's cases share its name); a key ending in
``*`` matches by prefix.
"""

from __future__ import annotations

# The test files of each suite (file stems under grain/_src/python).
SUITES: dict[str, tuple[str, ...]] = {
    "DataLoader path": (
        "data_loader_test",
        "data_sources_test",
        "load_test",
        "operations_test",
        "options_test",
        "record_test",
        "samplers_test",
        "index_shuffle_test",
        "shared_memory_array_test",
        "pack_and_batch_test",
    ),
    "Dataset core": (
        "base_test",
        "dataset_test",
        "batch_test",
        "filter_test",
        "flatmap_test",
        "limit_test",
        "map_test",
        "mix_test",
        "prefetch_test",
        "process_prefetch_test",
        "repeat_test",
        "shuffle_test",
        "slice_test",
        "source_test",
    ),
    "Dataset experimental": (
        "cache_test",
        "device_put_test",
        "elastic_iterator_test",
        "interleave_test",
        "packing_concat_then_split_test",
        "packing_test",
        "parquet_dataset_test",
        "rebatch_test",
        "tfrecord_dataset_test",
        "zip_test",
    ),
}

# Grain's abstract test classes (``absltest.skipThisClass``) that the wheel ships without the
# concrete subclass that runs them: file stem -> {base class: (the subclass's name, the methods the
# base must define itself)}. The adapter makes each subclass (no body of its own, so it runs with
# the base's defaults) when the file is imported, under the name Grain's tests use for it.
CONCRETE_CLASSES: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {
    "interleave_test": {
        "_InterleaveIterDatasetTestBase": (
            "InterleaveIterDatasetTest",
            ("_create_dataset", "_maybe_wrap_ds"),
        ),
    },
}

# Whole test files left out: each tests a private part of Grain with no public counterpart.
LEFT_OUT_FILES: dict[str, str] = {
    "autotune_test": "Grain's private autotuner (dataset.transformations.autotune)",
    "prefetch_autotune_test": "Grain's private buffer-size heuristics (_get_buffer_size, ...)",
    "stats_test": "Grain's private execution statistics (_ExecutionStats, execution_summary_pb2)",
    "stats_utils_test": "Grain's private execution-summary utilities (stats_utils)",
    "queue_test": "Grain's private worker transport (grain._src.python.ipc.queue)",
    "variable_size_queue_test": "Grain's private worker transport (ipc.variable_size_queue)",
    "grain_logging_test": "Grain's private log prefix; every test in it is skipped under pytest",
    "shared_memory_array_test": "Grain's worker-transport metadata (copy_to_shm, open_from_shm)",
}

# Single tests left out: Grain private internals, or a Grain bug grainlite fixes on purpose.
LEFT_OUT: dict[str, str] = {
    "process_prefetch_test::MultiprocessingPrefetchTest::test_start_prefetch": (
        "sleeps 30 s per case (3 min in all); start_prefetch: test_dataset_grain_extras.py"
    ),
    "base_test::IteratorContextTest": "Grain's private IteratorContext",
    "batch_test::MakeBatchParallelTest": "Grain's private _MakeBatchParallel",
    "batch_test::MakeBatchTest::test_batch_*parallel_batch_enabled*": "private _MakeBatchParallel",
    "batch_test::MakeBatchTest::test_batch_non_numpy_values": "Grain's private _MakeBatchParallel",
    "batch_test::StringTruncationTest": "Grain's shared-memory batch transport (private)",
    "batch_test::BatchIterDatasetTest::test_batch_size_*": "checks the private field ds._batch_fn",
    "batch_test::BatchIterDatasetTest::test_batch_shared_memory_source_ds_*": (
        "checks the private field ds._batch_fn"
    ),
    "batch_test::BatchIterDatasetTest::test_dataloader_enables_shared_memory_on_batch_dataset": (
        "checks the private field DataLoader._dataset"
    ),
    "dataset_test::WithOptionsIterDatasetTest": "checks the private iterator field _ctx",
    "dataset_test::GetExecutionSummaryTest": "Grain's private execution statistics",
    "dataset_test::DatasetTest::test_mp_prefetch_switches_to_threads_for_free_threaded_python": (
        "mocks Grain's private process_prefetch module"
    ),
    "mix_test::ConcatenateLazyMapTest::test_concat_selection_map": "private _ConcatSelectionMap",
    "interleave_test::InterleaveIterDatasetTest::test_interleave_stats*": (
        "Grain's private execution statistics (dataset.get_execution_summary, not in its public API)"
    ),
    "interleave_test::InterleaveIterDatasetTest::test_slice_state_management_*": (
        "Grain's private SupportsSlicedStateManagement (get/set_shard_states of its elastic resize)"
    ),
    "interleave_test::InterleaveIterDatasetTest::test_correct_interleave_state_after_setting_shards*": (
        "Grain's private SupportsSlicedStateManagement (get/set_shard_states of its elastic resize)"
    ),
    "interleave_test::InterleaveIterDatasetTest::test_setting_shard_state_with_exhausted_states": (
        "Grain's private SupportsSlicedStateManagement (get/set_shard_states of its elastic resize)"
    ),
    "data_loader_test::CopyNumPyArrayToSharedMemoryTest": "Grain's private CopyNumPyArrayToSharedMemory",
    "filter_test::FilterValidatorTest": "Grain's private FilterThresholdChecker",
    "map_test::RngPoolTest::test_reset_rng_state": "Grain's private _reset_rng_state",
    "process_prefetch_test::ProcessPrefetchIterDatasetTest::test_parent_dataset_modifies_state": (
        "the state format and buffer_size check of Grain's private ProcessPrefetchIterDataset"
    ),
    "mix_test::ConcatenateLazyMapTest::test_cannot_concatenate_infinite_datasets": (
        "Grain's private _ConcatSelectionMap"
    ),
    "prefetch_test::PrefetchIterDatasetTest::test_prefetch_does_not_buffer_unnecessary_elements": (
        "checks the private read buffer _buffer"
    ),
    "prefetch_test::PrefetchIterDatasetTest::test_set_num_threads_*": (
        "Grain's private _set_num_threads / _target_num_threads"
    ),
    "prefetch_test::PrefetchIterDatasetTest::test_set_prefetch_buffer_size_*": (
        "Grain's private _set_prefetch_buffer_size / _buffer / _executor"
    ),
    "prefetch_test::PrefetchIterDatasetTest::test_start_prefetch": (
        "checks the private read buffer _buffer; start_prefetch: test_dataset_grain_extras.py"
    ),
    "prefetch_test::PrefetchIterDatasetTest::test_stats_are_initialized_in_a_single_thread": (
        "overrides Grain's private _initialize_stats"
    ),
    "prefetch_test::MultithreadPrefetchTest::test_mp_context_is_set_correctly": (
        "reads the private iterator field _ctx"
    ),
}

# Tests that pass but take longer than the runner's 60 s per test on a loaded 2-core machine
# (Grain 0.2.18 itself takes about as long): they get grain_unit_adapter.SLOW_TIMEOUT_S.
SLOW: dict[str, str] = {
    "prefetch_test::ThreadPrefetchIterDatasetTest::test_no_mem_leak": (
        "1000 iterators, 0.03-0.04 s each alone"
    ),
    "prefetch_test::ThreadPrefetchIterDatasetTest::test_no_mem_leak_with_double_prefetch": (
        "1000 iterators over 8 MB arrays, 0.04-0.06 s each alone"
    ),
}

# Known failing, not yet fixed: run as expected failures, not counted. Empty when done.
KNOWN_FAILING: dict[str, str] = {}
