"""Benchmarks: grainlite, the real ``grain`` package and a bare loop, side by side.

Both libraries are measured through both APIs: the ``DataLoader`` and the Dataset API
(``MapDataset ... to_iter_dataset()``, in-process and with ``mp_prefetch``).

Run ``python -m benchmarks.run`` from the repository root (``--help`` lists the options). Every
configuration runs in a fresh subprocess (:mod:`benchmarks.measure`), verifies what it read and
reports throughput, time to first batch, peak memory and CPU time of its whole process tree.
"""
