"""Benchmarks: grainlite, the real ``grain`` package and a bare loop, side by side.

Run ``python -m benchmarks.run`` from the repository root (``--help`` lists the options). Every
configuration runs in a fresh subprocess (:mod:`benchmarks.measure`), verifies what it read and
reports throughput, time to first batch, peak memory and CPU time of its whole process tree.
"""
